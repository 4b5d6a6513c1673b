"""A pseudo-terminal an account's process draws on, as a login's terminal: what
the fleet's enter and the dashboard's shell key hand to another program."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time

from helpers.waiting import until
from tpnode_tui.runtimes.jobprocs import process_stat

#: an escape sequence: CSI (with its parameters), OSC, or a two-byte one
_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


class Terminal:
    """A pseudo-terminal of 120x40 running a process of an account, and what it drew."""

    def __init__(self, who, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.chown(os.ttyname(slave), who.uid, -1)
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=who.home,
            user=who.uid,
            group=who.gid,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # its controlling terminal, as a login's
        )
        os.close(slave)
        self._drawn: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._drawn.append(data)

    def mark(self) -> int:
        with self._lock:
            return len(self._drawn)

    def text(self, since: int = 0) -> str:
        """What was drawn since ``since`` (a mark), its escape sequences taken out."""
        with self._lock:
            raw = b"".join(self._drawn[since:])
        return _ESCAPE.sub("", raw.decode(errors="replace"))

    def shows(self, words: str, since: int = 0, what: str = "") -> None:
        until(
            lambda: words in self.text(since),
            what or f"the terminal to show {words!r}",
            60,
            show=lambda: f"the terminal's last words: {self.text(since)[-1500:]!r}",
        )

    def press(self, keys: str) -> None:
        time.sleep(0.3)  # a key sent before the app reads keys would be lost
        os.write(self.master, keys.encode())

    def close(self) -> None:
        """End the process and whatever it started on this terminal (a node's dashboard
        or a shell it ran, if a test fails while that is up), then the terminal."""
        for pid in _session(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        os.close(self.master)


def _session(sid: int) -> list[int]:
    """The processes of session ``sid`` that have not ended."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = process_stat(int(entry))
            if stat is not None and stat.session == sid and not stat.ended:
                found.append(int(entry))
    return found
