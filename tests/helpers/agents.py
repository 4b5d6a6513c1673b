"""A node agent for tests: one run in the test's own event loop, and one run
as its own process as root (as systemd runs it) for real accounts to use.

Both serve a simulated node with the process runtime from a directory every
test account can reach, on a private socket; nothing tells the agent who
anyone is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from helpers.accounts import Account, Accounts, cli_as, shared_dir
from helpers.load import BOUND_S, kill_process_jobs
from helpers.services import write_scene
from helpers.waiting import until, until_async
from tpnode_tui.agent.serve import serve
from tpnode_tui.config.settings import load_settings

WAIT_S = 15.0
INTERVAL = "0.2"


class Agent:
    def __init__(self, tmp_path, clock: Callable[[], float] = time.time) -> None:
        """``clock``: the agent's time (a test's, so that hours pass at once)."""
        self.clock = clock
        self.scene = write_scene(tmp_path / "node.json", 8)
        self.state = tmp_path / "state"
        self.socket = tmp_path / "run" / "agent.sock"
        self.settings = load_settings(
            {},
            probe_kind=f"simulated:{self.scene}",
            runtime_kind="process",
            state_dir=str(self.state),
            agent_socket=str(self.socket),
            lock_retry_ms="10",
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.task = asyncio.ensure_future(serve(self.settings, interval=0.2, stop=self.stop, clock=self.clock))
        await until_async(lambda: self.socket.exists() or self.task.done(), "the agent to start", WAIT_S)
        assert not self.task.done(), self.task.exception()

    async def request(self, raw: bytes) -> tuple[int, dict]:
        """One raw HTTP exchange; the status and the JSON body."""
        reader, writer = await asyncio.open_unix_connection(str(self.socket))
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), WAIT_S)
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if b"chunked" in head.lower():
            body = b"".join(body.split(b"\r\n")[1::2])
        return status, json.loads(body)

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict]:
        return await self.request(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


class SharedNode:
    """A node with an agent, in a directory every test account can reach."""

    def __init__(self, accounts: Accounts, root: Path, **settings: str) -> None:
        self.accounts = accounts
        self.root = root
        self.scene = write_scene(root / "node.json", 8)
        self.state = root / "state"
        self.socket = root / "run" / "agent.sock"
        self.settings = {
            "TUNEPLANE_PROBE": f"simulated:{self.scene}",
            "TUNEPLANE_RUNTIME": "process",
            "TUNEPLANE_STATE_DIR": str(self.state),
            "TUNEPLANE_AGENT_SOCKET": str(self.socket),
            "TUNEPLANE_OPERATORS_GROUP": accounts.operators_group,
            "TUNEPLANE_LOCK_RETRY_MS": "10",
            **settings,
        }
        self.agent: subprocess.Popen | None = None
        self.log = root / "agent.log"

    def start(self) -> None:
        """Start the agent and wait until it answers on its socket (an agent
        killed outright leaves a socket file behind that answers nobody)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")} | self.settings
        with open(self.log, "ab") as log:
            self.agent = subprocess.Popen(
                [sys.executable, "-m", "tpnode_tui", "--interval", INTERVAL, "agent"],
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        until(lambda: self._answers() or self.agent.poll() is not None, "the agent to answer", BOUND_S)
        assert self.agent.poll() is None, self.log.read_text()

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(self.socket))
            except OSError:
                return False
        return True

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(sig)
            self.agent.wait(BOUND_S)

    def env(self, who: Account) -> dict[str, str]:
        return who.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(self.socket))

    def cli(self, who: Account, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return cli_as(who, self.env(who), *args, cwd=cwd)

    def status(self, who: Account) -> dict:
        done = self.cli(who, "status", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    @classmethod
    @contextlib.contextmanager
    def started(cls, accounts: Accounts, prefix: str, **settings: str) -> Iterator[SharedNode]:
        """One started in a fresh directory every account can reach (named from
        ``prefix``); its agent, its jobs and the directory are gone afterwards."""
        root = shared_dir(prefix)
        node = cls(accounts, root, **settings)
        try:
            node.start()
            yield node
        finally:
            node.kill()
            kill_process_jobs(node.state)
            shutil.rmtree(root, ignore_errors=True)


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[Agent]:
    """``agent`` started in this loop; stopped, and its jobs ended, afterwards."""
    await agent.start()
    try:
        yield agent
    finally:
        agent.stop.set()
        await asyncio.wait_for(agent.task, WAIT_S)
        kill_process_jobs(agent.state)
