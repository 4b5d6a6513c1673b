"""Another node's agent, reached over SSH, as ``docker -H ssh://`` reaches a daemon.

Each connection runs ``ssh [user@]host tpnode-tui dial-stdio``, a bridge to
the agent's socket run by sshd as the account SSH logged in, so the agent
names that account from the kernel exactly as on the node: there is no
authentication of our own. Connections share one login (ControlMaster), made
before the dashboard draws so SSH asks on a plain terminal. See
docs/architecture.md, section 'Reaching the agent' ("Over SSH").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Optional

from tpnode_tui.config.ssh import SshTarget
from tpnode_tui.node.http import BlockingStream, Connector, Stream, Unreachable
from tpnode_tui.node.remote import AgentNode

#: what sshd runs on the node: the bridge to its agent's socket
REMOTE_COMMAND = ("tpnode-tui", "dial-stdio")
#: seconds a shared SSH login stays up after its last connection
PERSIST_S = 60
#: seconds SSH may take to connect before the node counts as unreachable
CONNECT_TIMEOUT_S = 10


def control_dir() -> Path:
    """This account's directory for SSH control sockets, made 0700 (a control
    socket lets whoever can reach it use the login without authenticating):
    in the account's runtime directory, else under its home (a name in /tmp
    that another account could make first would deny it SSH here)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path.home() / ".cache" / "tpnode-tui"
    path = base / f"tpnode-tui-ssh-{os.getuid()}" if runtime else base / "ssh"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as e:
        raise Unreachable(f"no SSH login can be shared in {path} ({e.strerror or e})", e, whole=True) from None
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unreachable(
            f"{path} is not this account's own private directory, so no SSH login is shared "
            "there: remove it, or set XDG_RUNTIME_DIR to a directory of your own",
            whole=True,
        )
    if any(ch.isspace() for ch in str(path)):
        raise Unreachable(
            f"{path} has a space in it, which ssh cannot take as a control path: set "
            "XDG_RUNTIME_DIR to a directory without one",
            whole=True,
        )
    return path


def ssh_argv(target: SshTarget, control: Path) -> list[str]:
    """The ssh command for one connection. ``--`` ends the options: a host is
    never read as one, whoever published it. A "%" in the control path is
    ssh's own escape, so it is doubled; a dead network is noticed within 45 s."""
    host = target.host[1:-1] if target.host.startswith("[") else target.host
    escaped = str(control).replace("%", "%%")
    return [
        "ssh",
        "-T",
        "-e",
        "none",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={escaped}/%C",
        "-o",
        f"ControlPersist={PERSIST_S}",
        *(["-p", str(target.port)] if target.port is not None else []),
        *(["-l", target.user] if target.user else []),
        "--",
        host,
        *REMOTE_COMMAND,
    ]


def _said(log: IO[bytes]) -> Optional[str]:
    """The last line SSH (or the bridge) wrote to stderr, if it wrote one."""
    with contextlib.suppress(OSError, ValueError):
        log.seek(0)
        lines = [ln.strip() for ln in log.read()[-4096:].decode(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return None


def failure(target: SshTarget, code: Optional[int], said: Optional[str]) -> Optional[Unreachable]:
    """Why a connection over SSH ended, from how ssh exited and what it (or the
    bridge on the node, whose lines start "tpnode-tui: ") last said; None when
    nothing was said. ssh exits 255 for its own failures, else with the
    bridge's code: 77 when this account may not reach the node's agent."""
    if code is None or not said:
        return None
    if said.startswith("tpnode-tui: "):
        words = f"on {target}: {said.removeprefix('tpnode-tui: ')}"
        return Unreachable(words, whole=True, forbidden=code == 77)
    return Unreachable(f"cannot reach {target} over ssh: {said}", whole=True)


def blocking(target: SshTarget) -> Connector:
    """Connections over SSH, used blocking (a command that asks one question)."""

    async def connect() -> Stream:
        argv = ssh_argv(target, control_dir())
        log = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        except OSError as e:
            log.close()
            raise Unreachable(f"ssh could not be run ({e.strerror or e})", e, whole=True) from None
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        def why() -> Optional[Unreachable]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2)
            return failure(target, proc.returncode, _said(log))

        def close() -> None:
            with contextlib.suppress(OSError):
                stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()

        return BlockingStream(proc.stdout, send, close, why)

    return connect


def in_loop(target: SshTarget) -> Connector:
    """Connections over SSH for an event loop (the dashboard)."""

    async def connect() -> Stream:
        import asyncio

        from tpnode_tui.node.aiostream import AsyncioStream

        argv = ssh_argv(target, control_dir())
        log = tempfile.TemporaryFile()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        except OSError as e:
            log.close()
            raise Unreachable(f"ssh could not be run ({e.strerror or e})", e, whole=True) from None
        assert proc.stdin is not None and proc.stdout is not None

        async def why() -> Optional[Unreachable]:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 2)
            return failure(target, proc.returncode, _said(log))

        async def finish() -> None:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()
            log.close()

        return AsyncioStream(proc.stdout, proc.stdin, why=why, finish=finish)

    return connect


def ssh_node(target: SshTarget, *, blocking_calls: bool = False) -> AgentNode:
    """The agent of the node ``target`` names, over SSH."""
    return AgentNode.through(
        blocking(target) if blocking_calls else in_loop(target),
        address=f"{target} (over ssh)",
        where=f"agent on {target} over ssh",
        sends_env=False,
    )
