"""``tpnode-tui agent``: the one process that serves a shared node to every account.

It runs in the foreground (systemd's ``Type=exec``), logs to stderr, and
stops cleanly on SIGTERM or SIGINT. Jobs are not its children in any way
that matters: they run under their own supervisors (or in containers), so
they keep running when the agent stops or dies, and a restarted agent finds
them where the truth lives, with its queue back from the state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from aiohttp import web

from tpnode_tui.agent.api import make_app
from tpnode_tui.agent.exports import Exports
from tpnode_tui.agent.gate import Door
from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import ConfigError, TpnodeError
from tpnode_tui.service import NodeService
from tpnode_tui.state.queue import FileQueue

log = logging.getLogger("tpnode_tui.agent")

#: an idle connection, or one that never sends its request, is closed after this
IDLE_TIMEOUT_S = 15.0
#: how long requests still being answered get when the agent stops: streams are
#: cut at once (end_streams), and a connection accepted as the agent stopped but
#: never read (a dashboard's fetch) must not hold the stop for aiohttp's minute
SHUTDOWN_S = 5.0


def _answers(path: Path) -> bool:
    """Whether an agent listens at ``path``: one whose queue is full (EAGAIN:
    flooded with connections) is there all the same."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except BlockingIOError:
            return True
        except OSError:
            return False
    return True


def prepare_socket(path: Path) -> None:
    """Make room for the socket: its directory, and no stale socket in the way.

    A socket file nobody answers on is what an agent killed with SIGKILL
    leaves; one that answers belongs to a running agent, and two agents on one
    node would be two queues and two logs: refused.
    """
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {path.parent} for the agent's socket: {e.strerror}") from None
    if path.exists() or path.is_symlink():
        if _answers(path):
            raise ConfigError(
                f"another agent already answers at {path}; stop it first (systemctl stop tpnode-tui-agent)"
            )
        path.unlink()


def prepare_state_dir(state_dir: Path) -> None:
    """The agent owns the node's state dir: it keeps the queue, the drains and
    the log there from its first moment, not from the first launch (systemd's
    StateDirectory= makes it too; run by hand, the agent does)."""
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the state dir {state_dir} for the agent: {e.strerror}") from None
    if not state_dir.is_dir():
        raise ConfigError(f"the state dir {state_dir} is not a directory")


def _more_connections() -> None:
    """Dashboards, CLIs and idle connections each take a descriptor: use the
    hard limit, not the soft 1024, so many clients at once are not refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(
    settings: Settings,
    *,
    interval: float,
    stop: Optional[asyncio.Event] = None,
    clock: Callable[[], float] = time.time,
) -> int:
    """Serve the node until SIGTERM or SIGINT (or ``stop`` is set); the exit code.
    ``clock``: the service's time, for tests that let hours pass at once."""
    path = settings.agent.socket
    prepare_socket(path)
    prepare_state_dir(settings.state.dir)
    _more_connections()
    # The queue is the state dir's, so a queued launch survives the agent; the
    # usage ledger (in the state dir too) and idle reservations given back are the agent's alone.
    service = NodeService.from_settings(
        settings, queue=FileQueue(settings.state.dir), interval=interval, agent=True, clock=clock
    )
    allocator, policy = service.allocator, service.policy
    runner = web.AppRunner(
        make_app(service, policy.operators),
        access_log=None,
        handler_cancellation=True,
        keepalive_timeout=IDLE_TIMEOUT_S,
        shutdown_timeout=SHUTDOWN_S,
    )
    loop = asyncio.get_running_loop()
    signals = () if stop is not None else (signal.SIGTERM, signal.SIGINT)
    stop = stop or asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    poller = None
    door: Optional[Door] = None
    exports = Exports()
    try:
        await exports.start(settings, service)
        await runner.setup()
        assert runner.server is not None  # set up just now
        # every connection is counted against its account as it is accepted (agent/gate.py)
        door = Door(runner.server, policy.operators, settings.limits)
        door.listen(str(path))
        # Every account may connect; what each may do is decided by who it is.
        os.chmod(path, 0o666)
        poller = asyncio.create_task(service.run())
        log.info(
            "serving %s on %s (%s, %s, lock %s, operators: %s)",
            allocator.runtime.describe(),
            path,
            allocator.probe.source,
            f"every {interval:g} s",
            allocator.lock.description,
            policy.operators.describe(),
        )
        await stop.wait()
        log.info("stopping: jobs keep running")
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, TpnodeError):
                await poller
        await exports.close()
        if door is not None:
            door.close()  # no new connection; those open are ended by the runner's cleanup
        await runner.cleanup()
        await service.close()
        await allocator.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return 0
