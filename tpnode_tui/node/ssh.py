"""Another node's agent, reached over SSH, as ``docker -H ssh://`` reaches a daemon.

Each connection runs ``ssh [user@]host tpnode-tui dial-stdio`` and speaks to
the agent through it: ``dial-stdio`` is a bridge from its standard input and
output to the agent's socket, run by sshd as the account SSH logged in, so
the agent names that account from the kernel (SO_PEERCRED) exactly as it
names one on the node. There is no authentication of our own: whoever SSH
lets in is who they are on the node, and may do what the node lets them.

Connections share one SSH login (ControlMaster, with a control socket in a
directory only this account can enter, kept a minute after the last use):
the dashboard opens a connection for its readings, its log and each action,
and a login each would cost a handshake and, with a password, a prompt on a
screen the dashboard is drawing. The first connection is made before the
dashboard starts, so anything SSH asks is asked on a plain terminal.

A job launched over SSH gets the environment and working directory of a
login on the node (its PATH, the account's home), not this machine's, which
would mean nothing there. What SSH prints when it cannot connect (no route,
a host key that changed, permission denied) is the error's reason.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Optional

from ..config import SshTarget
from .http import BlockingStream, Connector, Stream, Unreachable
from .remote import AgentNode

#: what sshd runs on the node: the bridge to its agent's socket
REMOTE_COMMAND = ("tpnode-tui", "dial-stdio")
#: seconds a shared SSH login stays up after its last connection
PERSIST_S = 60
#: seconds SSH may take to connect before the node counts as unreachable
CONNECT_TIMEOUT_S = 10


def control_dir() -> Path:
    """This account's directory for SSH control sockets, made 0700 (a control
    socket lets whoever can reach it use the login without authenticating)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"tpnode-tui-ssh-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.is_symlink() or path.stat().st_uid != os.getuid() or path.stat().st_mode & 0o077:
        raise Unreachable(f"{path} is not this account's own private directory, so no SSH login is shared there")
    return path


def ssh_argv(target: SshTarget, control: Path) -> list[str]:
    """The ssh command for one connection. ``--`` ends the options: a host is
    never read as one, whoever published it."""
    host = target.host[1:-1] if target.host.startswith("[") else target.host
    return [
        "ssh", "-T", "-e", "none",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", "ControlMaster=auto", "-o", f"ControlPath={control}/%C", "-o", f"ControlPersist={PERSIST_S}",
        *(["-p", str(target.port)] if target.port is not None else []),
        *(["-l", target.user] if target.user else []),
        "--", host, *REMOTE_COMMAND,
    ]


def _said(log: IO[bytes]) -> Optional[str]:
    """The last line SSH (or the bridge) wrote to stderr, if it wrote one."""
    with contextlib.suppress(OSError):
        log.seek(0)
        lines = [ln.strip() for ln in log.read()[-4096:].decode(errors="replace").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return None


def _ssh_failed(proc: subprocess.Popen[bytes], log: IO[bytes], target: SshTarget) -> Optional[str]:
    """Why the connection ended, in SSH's words, once ssh has exited (briefly waited for)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(2)
    said = _said(log)
    if proc.returncode is None or not said:
        return None
    return f"ssh to {target}: {said.removeprefix('tpnode-tui: ')}"


def blocking(target: SshTarget) -> Connector:
    """Connections over SSH, used blocking (a command that asks one question)."""

    async def connect() -> Stream:
        log = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(ssh_argv(target, control_dir()), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log)
        except OSError as e:
            log.close()
            raise Unreachable(f"ssh could not be run ({e.strerror or e})", e) from None
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        def close() -> None:
            with contextlib.suppress(OSError):
                stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()

        return BlockingStream(proc.stdout, send, close, lambda: _ssh_failed(proc, log, target))

    return connect


def in_loop(target: SshTarget) -> Connector:
    """Connections over SSH for an event loop (the dashboard)."""

    async def connect() -> Stream:
        import asyncio

        from .aiostream import AsyncioStream

        log = tempfile.TemporaryFile()
        try:
            proc = await asyncio.create_subprocess_exec(
                *ssh_argv(target, control_dir()), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=log)
        except OSError as e:
            log.close()
            raise Unreachable(f"ssh could not be run ({e.strerror or e})", e) from None
        assert proc.stdin is not None and proc.stdout is not None

        async def why() -> Optional[str]:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 2)
            said = _said(log)
            if proc.returncode is None or not said:
                return None
            return f"ssh to {target}: {said.removeprefix('tpnode-tui: ')}"

        def ended() -> None:
            if proc.returncode is None:
                proc.kill()
            log.close()

        return AsyncioStream(proc.stdout, proc.stdin, why=why, ended=ended)

    return connect


def ssh_node(target: SshTarget, *, blocking_calls: bool = False) -> AgentNode:
    """The agent of the node ``target`` names, over SSH."""
    return AgentNode.through(blocking(target) if blocking_calls else in_loop(target),
                             address=f"{target} (over ssh)", where=f"agent on {target} over ssh", sends_env=False)
