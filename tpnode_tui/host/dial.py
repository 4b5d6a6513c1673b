"""A connection to a Unix socket on this machine, waiting for room in its queue.

A server's socket holds a queue of connections it has not accepted yet. When
the queue is full (someone opens connections faster than the agent takes
them), a connect that may not block fails at once with EAGAIN: the server is
there, and busy, not gone. So a full queue is tried again, after a wait that
starts at a millisecond and doubles up to :data:`LONGEST_WAIT_S`, until the
caller's time is up; the agent drains its queue in milliseconds (it refuses a
flood's connections at once: agent/gate.py), so room comes soon. Any other
failure (no socket, no permission, nobody listening) is said at once.

Only the standard library, and one class for both kinds of client: a command
waits with ``time.sleep`` (``status --json`` imports nothing else), the
dashboard with ``asyncio.sleep``.
"""

from __future__ import annotations

import socket
import time

#: the first wait for room in a full queue, and the longest
FIRST_WAIT_S, LONGEST_WAIT_S = 0.001, 0.01


class Dial:
    """Attempts to connect to the Unix socket at ``path`` until ``timeout_s`` has passed."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._wait = FIRST_WAIT_S
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.setblocking(False)  # a full queue answers EAGAIN at once, rather than block

    def attempt(self) -> socket.socket | None:
        """The connection (blocking), or None: the queue is full, wait :meth:`wait` and attempt again.
        Raises TimeoutError once the time is up, and any other OSError as it comes."""
        try:
            self._sock.connect(self.path)
        except BlockingIOError:
            if time.monotonic() >= self._deadline:
                self._sock.close()
                raise TimeoutError(f"its queue of connections stayed full for {self.timeout_s:g} s") from None
            return None
        except BaseException:
            self._sock.close()
            raise
        self._sock.setblocking(True)
        return self._sock

    def wait(self) -> float:
        """How long to wait before the next attempt."""
        wait = min(self._wait, max(self._deadline - time.monotonic(), 0.0))
        self._wait = min(self._wait * 2, LONGEST_WAIT_S)
        return wait

    def close(self) -> None:
        """Give up before a connection was made (the caller was cancelled)."""
        self._sock.close()


def connect_unix(path: str, timeout_s: float) -> socket.socket:
    """A blocking connection to the Unix socket at ``path``, waiting for room up to ``timeout_s``."""
    dial = Dial(path, timeout_s)
    while (sock := dial.attempt()) is None:
        time.sleep(dial.wait())
    return sock
