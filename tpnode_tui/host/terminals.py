"""An account's own terminals, and one line written to them as ``write(1)`` does.

The node's agent (root) tells an account something on the terminals it is
logged in on: those utmp lists for it, and the pseudo-terminals in /dev/pts
it owns (a terminal emulator or tmux need not write utmp). Only where the
account allows messages, as ``mesg y`` leaves a terminal: group-writable.
``mesg n`` takes that away and the agent writes nothing there, as write(1)
would not.

Nothing named by anyone is trusted: a path is taken only under /dev, opened
without following a link, never as a controlling terminal and without
blocking, and written only when, once open, it is a character device owned by
the account with messages allowed. The line is made printable and cut short;
a terminal that cannot take it at once (a full buffer, a stopped reader) is
skipped, never waited for.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Iterator

from tpnode_tui.text.printable import printable

UTMP = Path("/var/run/utmp")
PTS = Path("/dev/pts")
DEV = Path("/dev")
#: glibc's struct utmp on Linux (x86_64, aarch64): 384 bytes
_UTMP_RECORD = struct.Struct("@hi32s4s32s256shhiii4i20s")
_USER_PROCESS = 7
#: what utmp may name as a terminal: a name under /dev, no way out of it
_LINE = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?")
#: the most utmp records read: a file made huge cannot hold the agent
_UTMP_MOST = 4096
#: the longest title and text a terminal is given
TITLE_MOST, TEXT_MOST = 120, 600


def terminals_of(uid: int, utmp: Path = UTMP, pts: Path = PTS) -> list[Path]:
    """The terminals ``uid`` may be told something on: utmp's and /dev/pts's, each
    once, not yet checked (:func:`write_line` checks each as it opens it)."""
    found = dict.fromkeys([*_from_utmp(utmp), *_owned_pts(uid, pts)])
    return list(found)


def _from_utmp(utmp: Path) -> Iterator[Path]:
    try:
        with open(utmp, "rb") as f:
            data = f.read(_UTMP_RECORD.size * _UTMP_MOST)
    except OSError:
        return
    for start in range(0, len(data) - _UTMP_RECORD.size + 1, _UTMP_RECORD.size):
        record = _UTMP_RECORD.unpack_from(data, start)
        if record[0] != _USER_PROCESS:
            continue
        line = record[2].split(b"\0", 1)[0].decode("ascii", "replace")
        if _LINE.fullmatch(line) and ".." not in line.split("/"):
            yield DEV / line


def _owned_pts(uid: int, pts: Path) -> Iterator[Path]:
    try:
        entries = list(os.scandir(pts))
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                yield Path(entry.path)
        except OSError:
            continue


def allows_messages(st: os.stat_result, uid: int) -> bool:
    """Whether a terminal so described is ``uid``'s own, with messages allowed (``mesg y``)."""
    return stat.S_ISCHR(st.st_mode) and st.st_uid == uid and bool(st.st_mode & stat.S_IWGRP)


def write_line(path: Path, uid: int, text: bytes) -> bool:
    """Write ``text`` to the terminal ``path`` if it is ``uid``'s own and allows
    messages, at once or not at all; whether it was written whole."""
    try:
        if not allows_messages(os.lstat(path), uid):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not allows_messages(os.fstat(fd), uid):  # what was opened, not what the path said before
            return False
        return os.write(fd, text) == len(text)
    except OSError:  # full (EAGAIN), hung up, gone
        return False
    finally:
        os.close(fd)


def message(title: str, text: str, now: float) -> bytes:
    """What a terminal is given, as write(1) lays it out: a bell and a heading
    that says who speaks, then the text; each made printable and cut short."""
    heading = f"Message from tpnode-tui on {socket.gethostname()} at {time.strftime('%H:%M', time.localtime(now))}"
    lines = (printable(heading), _cut(printable(title), TITLE_MOST), _cut(printable(text), TEXT_MOST))
    return ("\r\n\a" + "\r\n".join(lines) + "\r\n").encode("utf-8", "replace")


def tell_terminals(uid: int, title: str, text: str, now: float) -> int:
    """Tell ``uid`` on each of its terminals that allows messages; how many were told."""
    line = message(title, text, now)
    return sum(write_line(path, uid, line) for path in terminals_of(uid))


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
