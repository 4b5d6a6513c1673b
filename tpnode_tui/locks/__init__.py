"""Who may allocate cards right now.

"Read occupancy, pick cards, create the job" must be atomic across every
process on the node: until the job exists its cards still look free, and two
callers inside that window hand one card to two jobs. So an ``asyncio.Lock``
orders one process's tasks and a cross-process lock (``flock``, or a Redis
lease with ``TUNEPLANE_REDIS_URL``) orders the rest; a caller waits, never
goes ahead without it, and each hold gets a lease token larger than any
before. ``redis`` is imported only for a Redis lease. See
docs/architecture.md, section 'Launch, step by step'.
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
