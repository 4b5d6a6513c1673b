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
be reached) a caller waits, for as long as it allows, and
:attr:`AllocationLock.waiting` says why. It never goes ahead without the lock:
letting an allocation through blind is exactly the over-subscription this
exists to prevent, and waiting costs only time.

Every acquisition gets a lease token, a number larger than any handed out before on
this node. A Redis lease can be lost while its holder still runs (Redis
restarted, the key was cleared, the holder stalled past its lease); the holder
learns it through :meth:`LockHold.lost` and the lease token tells which of two
holders came later.

The package: ``base`` (the lock, the hold, what a backend promises), ``flock``
and ``redis`` (the backends). ``redis`` is imported only when a Redis lease is
configured, so a node on the default flock lock never loads redis-py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

from tpnode_tui.config.settings import Settings
from tpnode_tui.locks.base import REDIS_KEY, AllocationLock, CrossProcessLock, Holder, LockHold, check_allocation_safety
from tpnode_tui.locks.flock import LEASE_TOKEN_FILE, LOCK_FILE, FileLock

__all__ = [
    "LEASE_TOKEN_FILE",
    "LOCK_FILE",
    "REDIS_KEY",
    "AllocationLock",
    "Holder",
    "LockHold",
    "check_allocation_safety",
    "make_lock",
]


def make_lock(
    settings: Settings,
    *,
    max_wait_s: Optional[float] = None,
    on_wait: Optional[Callable[[str], None]] = None,
) -> AllocationLock:
    """The lock the settings ask for: a Redis lease when a URL is set, else flock.

    ``max_wait_s`` and ``on_wait``: see :class:`AllocationLock`.
    """
    retry_s = settings.lock.retry_ms / 1000
    if settings.lock.redis_url:
        # Imported only here: redis-py is most of a CLI command's start-up,
        # and a node on the default flock lock never needs it.
        from tpnode_tui.locks.redis import RedisLease

        backend: CrossProcessLock = RedisLease(
            settings.lock.redis_url,
            settings.lock.redis_url_safe or "",
            lease_ms=settings.lock.lease_ms,
            retry_s=retry_s,
        )
    else:
        backend = FileLock(Path(settings.state.dir), retry_s)
    return AllocationLock(backend, max_wait_s=max_wait_s, on_wait=on_wait)
