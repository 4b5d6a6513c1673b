"""The default cross-process lock: an ``flock`` on a file in the state directory.

The kernel drops an flock when its holder dies, even by ``kill -9``, so a
crash never leaves the node stuck, and ``/proc/locks`` names the holder, so a
waiting caller can say who it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shlex
import time
from pathlib import Path
from typing import Optional

from tpnode_tui.config.statedir import state_dir_unusable
from tpnode_tui.host.procinfo import describe
from tpnode_tui.locks.base import LockHold, Release, Report, lease_token_floor, past
from tpnode_tui.model.errors import ConfigError, LockWaitTimeout
from tpnode_tui.model.facts import ProcessFacts

LOCK_FILE = "alloc.lock"
#: the last lease token handed out; named before the lease token was called so, and
#: kept, so that a node's processes of every version count on the one file
LEASE_TOKEN_FILE = "alloc.fence"

#: the commands of tpnode-tui, to name a holder that is one ("tpnode-tui launch")
_COMMANDS = ("status", "launch", "reserve", "reclaim", "stop")

#: Lock-file descriptors this process has open. A child made by a bare fork
#: shares their open file descriptions, and with them the lock: it would keep
#: the node locked after this process dies. The child closes its copies at once
#: (closing, unlike LOCK_UN, leaves the parent's lock alone).
_OPEN_LOCK_FDS: set[int] = set()


def _forget_lock_fds_in_child() -> None:
    for fd in _OPEN_LOCK_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN_LOCK_FDS.clear()


os.register_at_fork(after_in_child=_forget_lock_fds_in_child)


class FileLock:
    """``flock`` on ``state_dir/alloc.lock``, its lease tokens counted in ``state_dir/alloc.fence``.

    The file is opened per acquisition and closed on release, so nothing stays
    open between allocations. Locking is non-blocking with a retry: a thread
    parked in a blocking flock cannot be cancelled, and the event loop keeps
    drawing the dashboard meanwhile.
    """

    kind = "flock"

    def __init__(self, state_dir: Path, retry_s: float) -> None:
        self._dir = state_dir
        self._path = state_dir / LOCK_FILE
        self._token_path = state_dir / LEASE_TOKEN_FILE
        self._retry_s = retry_s
        self.description = f"flock {self._path}"

    def _unusable(self, e: OSError) -> ConfigError:
        return ConfigError(state_dir_unusable(self._dir, e, "hold the allocation lock"))

    def _open(self) -> int:
        try:
            # 0700 as the state file makes it: whoever creates the directory first
            # (usually this lock) decides its mode, and an existing one keeps its own.
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise self._unusable(e) from None
        _OPEN_LOCK_FDS.add(fd)
        return fd

    @staticmethod
    def _close(fd: int) -> None:
        _OPEN_LOCK_FDS.discard(fd)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    async def acquire(self, report: Report, deadline: Optional[float]) -> tuple[LockHold, Release]:
        fd = self._open()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    why = f"waiting for the allocation lock, {flock_holder(fd)} on {self._path}"
                    report(why)
                    if past(deadline):
                        raise LockWaitTimeout(why) from None
                await asyncio.sleep(self._retry_s)
            hold = LockHold(lease_token=self._next_lease_token())
        except OSError as e:
            self._close(fd)
            raise self._unusable(e) from None
        except BaseException:
            self._close(fd)
            raise

        async def release() -> None:
            self._close(fd)

        return hold, release

    def _next_lease_token(self) -> int:
        """Read, increment and atomically replace the counter; called holding the lock."""
        try:
            text = self._token_path.read_text().strip()
        except FileNotFoundError:
            token = lease_token_floor()
        else:
            if not text.isdigit():
                raise ConfigError(
                    f"{self._token_path} should hold the last lease token but holds "
                    f"{text[:40]!r}; delete it (the next number then starts from the clock)"
                )
            token = int(text) + 1
        tmp = self._dir / f".{LEASE_TOKEN_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, f"{token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._token_path)
        return token

    async def inspect(self) -> Optional[str]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"the allocation lock {self._path} cannot be opened ({e.strerror or e})"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"allocation lock {self._path} {flock_holder(fd)}"
        finally:
            os.close(fd)  # closing drops the shared lock if it was taken
        return None

    async def close(self) -> None:
        """Nothing stays open between holds."""


def flock_holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file, as the kernel's /proc/locks says.

    The answer is the kernel's own record, so it cannot go stale the way a pid
    written into the lock file would. Falls back to plain words where
    /proc/locks cannot be read or names nobody (another pid namespace).
    """
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return "held by another process"
    for line in lines:
        parts = line.split()
        # "1: FLOCK ADVISORY WRITE <pid> <maj:min:inode> 0 EOF"; waiters have "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == wanted and parts[4].isdigit():
            pid = int(parts[4])
            about = process_words(pid)
            return f"held by pid {pid} ({about})" if about else f"held by pid {pid}"
    return "held by another process"


def process_words(pid: int) -> str:
    """What the process ``pid`` is, in a few words: "tpnode-tui launch, user alice,
    since 14:02:11". Empty when this machine cannot see it.

    The command line belongs to another process, so it is shortened and shown
    with its control characters escaped: it must not break the line it is on.
    """
    holder = describe(ProcessFacts(pid=pid))
    if not holder.visible:
        return ""
    words = []
    if holder.command:
        words.append(short_command(shlex.split(holder.command)))
    if holder.user:
        words.append(f"user {holder.user}")
    if holder.started_at:
        today = time.strftime("%Y-%m-%d") == time.strftime("%Y-%m-%d", time.localtime(holder.started_at))
        since = time.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M", time.localtime(holder.started_at))
        words.append(f"since {since}")
    return ", ".join(words)


def short_command(argv: list[str]) -> str:
    """A command line as a person would name it: "tpnode-tui launch" for our
    own commands (however Python was started), else its words with paths cut
    to their last part ("python3 train.py --lr 3"), at most 60 characters."""
    for i, arg in enumerate(argv):
        ours = os.path.basename(arg) == "tpnode-tui" or (
            arg == "-m" and i + 1 < len(argv) and argv[i + 1] in ("tpnode_tui", "tpnode_tui.cli")
        )
        if ours:
            command = next((a for a in argv[i + 1 :] if a in _COMMANDS), "dashboard")
            return f"tpnode-tui {command}"
    text = " ".join(os.path.basename(a) if a.startswith("/") else a for a in argv)
    return text if len(text) <= 60 else text[:59] + "…"
