"""Who may allocate cards right now.

Launching is "read occupancy -> pick cards -> create the job", and it has to be
atomic across every process on the node: occupancy is rebuilt from container
labels and the process state file, so until the job exists its cards still look
free to everyone else. Two callers inside that window hand the same card to two
jobs, and the symptom (both go OOM, or one runs slow) says nothing about why.

Concurrency comes from two places, so there are two layers:

- an ``asyncio.Lock``, for tasks of one process (the dashboard's keys, a queue
  loop): they queue on it in order instead of polling the cross-process lock
  against each other;
- a cross-process lock, for the CLI next to the dashboard, several dashboards,
  a scheduler in another process. By default an ``flock`` on a file in the state
  directory: the kernel drops it when its holder dies, even by ``kill -9``, so a
  crash never leaves the node stuck. With ``TUNEPLANE_REDIS_URL`` set, a Redis
  lease instead, for setups that already coordinate through Redis.

While the cross-process lock cannot be taken (someone holds it, or Redis cannot
be reached) a caller waits and :attr:`AllocationLock.waiting` says why. It never
goes ahead without the lock: letting an allocation through blind is exactly the
over-subscription this exists to prevent, and waiting costs only time.

Every acquisition gets a fencing number, larger than any handed out before on
this node. A Redis lease can be lost while its holder still runs (Redis
restarted, the key was cleared, the holder stalled past its lease); the holder
learns it through :meth:`LockHold.lost` and the fence tells which of two
holders came later.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Optional, Protocol


from .config import Settings
from .model import ConfigError

log = logging.getLogger(__name__)

LOCK_FILE = "alloc.lock"
FENCE_FILE = "alloc.fence"
REDIS_KEY = "tpnode:gpu-alloc"

_STATE_DIR_HINT = "set TUNEPLANE_STATE_DIR to a directory this user can write"



@dataclass
class LockHold:
    """One holding of the allocation lock, handed to the code inside it."""

    #: larger than every fence handed out before it on this node, by any process
    fence: int
    _lost_because: Optional[str] = field(default=None, init=False, repr=False)

    def lost(self) -> bool:
        """Whether the lock was found to be no longer ours while held.

        Only a Redis lease can be lost; the kernel does not take an flock away
        from a live process. Once True it stays True: another process may have
        allocated in the meantime, and the caller has to back off.
        """
        return self._lost_because is not None

    def _mark_lost(self, why: str) -> None:
        if self._lost_because is None:
            self._lost_because = why


#: What a backend hands back for one acquisition: the hold, and how to give it up.
_Release = Callable[[], Awaitable[None]]
_Report = Callable[[Optional[str]], None]


class _CrossProcessLock(Protocol):
    kind: str
    description: str

    async def acquire(self, report: _Report) -> tuple[LockHold, _Release]:
        """Wait until this process holds the lock, calling ``report`` with why it
        is waiting on every retry. Raises ConfigError for what waiting cannot fix."""
        ...

    async def inspect(self) -> Optional[str]:
        """Who holds the lock or why it cannot be had, without taking it; None when free."""
        ...

    async def close(self) -> None: ...


class AllocationLock:
    """The allocation critical section: ``async with lock.hold() as h:``."""

    #: Both backends span processes. :func:`check_allocation_safety` asks this
    #: attribute, so any other object passed as a lock (a test double) is
    #: refused unless it says the same.
    cross_process = True

    def __init__(self, backend: _CrossProcessLock) -> None:
        self._backend = backend
        self._local = asyncio.Lock()
        self._local_waiters = 0
        self._backend_waiting: Optional[str] = None
        self.kind = backend.kind
        self.description = backend.description

    @property
    def waiting(self) -> Optional[str]:
        """What a waiting caller waits for, in plain words; None when nobody waits."""
        if self._backend_waiting:
            return self._backend_waiting
        if self._local_waiters:
            return "waiting for the allocation lock (held by another allocation in this process)"
        return None

    async def state(self) -> Optional[str]:
        """The lock as another reader of the node should hear of it: what a caller
        here waits for, else who holds it or why it cannot be had (Redis down),
        else None. Used by ``status`` and the dashboard header, which do not
        allocate and so would otherwise never learn that launches are waiting."""
        return self.waiting or await self._backend.inspect()

    def locked(self) -> bool:
        """Whether an allocation in this process is inside the lock now."""
        return self._local.locked()

    def _report(self, why: Optional[str]) -> None:
        self._backend_waiting = why

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[LockHold]:
        """Hold the lock for the body: in-process first, then across processes.

        Given back on leaving, whether the body returns, raises or is cancelled.
        """
        self._local_waiters += 1
        try:
            await self._local.acquire()
        finally:
            self._local_waiters -= 1
        try:
            try:
                hold, release = await self._backend.acquire(self._report)
            finally:
                self._backend_waiting = None
            try:
                yield hold
            finally:
                await release()
        finally:
            self._local.release()

    async def close(self) -> None:
        await self._backend.close()


def make_lock(settings: Settings) -> AllocationLock:
    """The lock the settings ask for: a Redis lease when a URL is set, else flock."""
    retry_s = settings.lock_retry_ms / 1000
    if settings.redis_url:
        # Imported only here: redis-py is most of a CLI command's start-up,
        # and a node on the default flock lock never needs it.
        from .redis_lease import RedisLease

        return AllocationLock(
            RedisLease(
                settings.redis_url,
                settings.redis_url_safe or "",
                lease_ms=settings.lock_lease_ms,
                retry_s=retry_s,
            )
        )
    return AllocationLock(_FileLock(Path(settings.state_dir), retry_s))


def check_allocation_safety(lock: Optional[AllocationLock], allocating_processes: int) -> None:
    """Refuse to start several allocating processes that cannot see each other.

    Each process has its own in-process lock, so without a cross-process one two
    of them can read the same occupancy and hand out the same card.
    """
    if allocating_processes <= 1:
        return
    if lock is not None and getattr(lock, "cross_process", False):
        return
    raise ConfigError(
        f"{allocating_processes} processes would allocate cards on this node with no "
        "cross-process lock, so two of them could hand out the same card; use the flock "
        "lock (every process with the same TUNEPLANE_STATE_DIR) or set TUNEPLANE_REDIS_URL "
        "to one Redis for all of them"
    )


def _fence_floor() -> int:
    """Where a fence counter starts when it is missing: microseconds since the epoch.

    A counter goes missing when Redis restarts without persistence, the key or
    the fence file is deleted, or on first use. Restarting at 1 would give the
    next holder a *smaller* fence than a holder that may still be running with a
    lost lease, which is when fencing matters. No node takes the lock more than
    once per microsecond, so the clock is above every fence handed out before.
    (Microseconds since the epoch still fit exactly in a Lua number.)
    """
    return time.time_ns() // 1_000


# ── flock ────────────────────────────────────────────────────────────────────

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


class _FileLock:
    """``flock`` on ``state_dir/alloc.lock``, fenced by ``state_dir/alloc.fence``.

    The file is opened per acquisition and closed on release, so nothing stays
    open between allocations. Locking is non-blocking with a retry: a thread
    parked in a blocking flock cannot be cancelled, and the event loop keeps
    drawing the dashboard meanwhile.
    """

    kind = "flock"

    def __init__(self, state_dir: Path, retry_s: float) -> None:
        self._dir = state_dir
        self._path = state_dir / LOCK_FILE
        self._fence_path = state_dir / FENCE_FILE
        self._retry_s = retry_s
        self.description = f"flock {self._path}"

    def _unusable(self, e: OSError) -> ConfigError:
        return ConfigError(
            f"the state directory {self._dir} cannot hold the allocation lock "
            f"({e.strerror or e}); {_STATE_DIR_HINT}"
        )

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

    async def acquire(self, report: _Report) -> tuple[LockHold, _Release]:
        fd = self._open()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    report(f"waiting for the allocation lock {self._path} ({_flock_holder(fd)})")
                await asyncio.sleep(self._retry_s)
            hold = LockHold(fence=self._next_fence())
        except OSError as e:
            self._close(fd)
            raise self._unusable(e) from None
        except BaseException:
            self._close(fd)
            raise

        async def release() -> None:
            self._close(fd)

        return hold, release

    def _next_fence(self) -> int:
        """Read, increment and atomically replace the counter; called holding the lock."""
        try:
            text = self._fence_path.read_text().strip()
        except FileNotFoundError:
            fence = _fence_floor()
        else:
            if not text.isdigit():
                raise ConfigError(
                    f"{self._fence_path} should hold the last fencing number but holds "
                    f"{text[:40]!r}; delete it (the next number then starts from the clock)"
                )
            fence = int(text) + 1
        tmp = self._dir / f".{FENCE_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, f"{fence}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._fence_path)
        return fence

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
            return f"allocation lock {self._path} {_flock_holder(fd)}"
        finally:
            os.close(fd)  # closing drops the shared lock if it was taken
        return None

    async def close(self) -> None:
        """Nothing stays open between holds."""


def _flock_holder(fd: int) -> str:
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
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                return f"held by pid {pid}"
            return f"held by pid {pid} ({name})"
    return "held by another process"
