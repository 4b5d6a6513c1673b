"""``tpnode-tui dial-stdio``: this process's standard input and output, joined to the agent's socket.

sshd runs it as the account it logged in, so the connection the agent sees
is that account's (SO_PEERCRED names it from the kernel) and nothing here
can say otherwise: it moves bytes and decides nothing. It ends as soon as
either side does: the agent's, or the client's (its input ends, or its output
is closed). The client closes its side only once it has read every answer it
wants, or has given up on one; either way the agent must learn at once that
nobody waits, so that a launch still waiting for the allocation lock is
dropped rather than placed for an asker who was told it was not.

Blocking system calls and select: it starts and moves bytes without an
event loop, since every connection made over SSH starts one.
"""

from __future__ import annotations

import errno
import os
import select
import socket
from pathlib import Path

#: bytes moved at a time
CHUNK = 1 << 16


def _say(message: str) -> None:
    """One line on stderr, which ssh carries back to the client's error."""
    os.write(2, f"tpnode-tui: {message}\n".encode(errors="replace"))


def bridge(socket_path: Path, stdin: int = 0, stdout: int = 1) -> int:
    """Join ``stdin``/``stdout`` to the agent at ``socket_path``; the exit code."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(socket_path))
    except OSError as e:
        sock.close()
        if e.errno in (errno.EACCES, errno.EPERM):
            _say(f"this account may not open the node's agent socket {socket_path} (permission denied)")
            return 77
        _say(
            f"no agent answers at {socket_path} ({e.strerror or e}); start it (systemctl start "
            "tpnode-tui-agent) or ask the node's operator"
        )
        return 1
    agent = sock.fileno()
    try:
        while True:
            ready, _, _ = select.select([agent, stdin], [], [])
            if stdin in ready:
                data = os.read(stdin, CHUNK)
                if not data:
                    return 0  # the client is done, or gone
                sock.sendall(data)
            if agent in ready:
                data = sock.recv(CHUNK)
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view) :]
    except (BrokenPipeError, ConnectionResetError):
        return 0  # one side went away: nothing more to move
    finally:
        sock.close()
