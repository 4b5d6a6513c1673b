"""``tpnode-tui dial-stdio``: this process's standard input and output, joined to the agent's socket.

sshd runs it as the account it logged in, so the connection the agent sees
is that account's (SO_PEERCRED names it from the kernel) and nothing here
can say otherwise: it moves bytes and decides nothing. It ends when the
agent's side ends, when its output is closed (the client went away), or a
moment after its input ends once the agent has gone quiet: an answer already
on its way still arrives, but the agent is not told of the end by a
half-close, since a web server takes one for a client that went away and
drops the answer.

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
#: once standard input has ended, how long the agent may stay quiet before the bridge ends
QUIET_S = 2.0


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
        _say(f"no agent answers at {socket_path} ({e.strerror or e}); start it (systemctl start "
             "tpnode-tui-agent) or ask the node's operator")
        return 1
    reading = True  # standard input still open
    agent = sock.fileno()
    try:
        while True:
            ready, _, _ = select.select([agent, stdin] if reading else [agent], [], [], None if reading else QUIET_S)
            if not ready:
                return 0  # the client is done, and so is whatever the agent was saying to it
            if stdin in ready:
                data = os.read(stdin, CHUNK)
                if data:
                    sock.sendall(data)
                else:
                    reading = False
            if agent in ready:
                data = sock.recv(CHUNK)
                if not data:
                    return 0
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view):]
    except (BrokenPipeError, ConnectionResetError):
        return 0  # one side went away: nothing more to move
    finally:
        sock.close()
