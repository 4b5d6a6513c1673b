"""The allocation lock itself, and what every cross-process backend promises.

See the package's docstring for why there are two layers and two backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Optional, Protocol

from tpnode_tui.model.errors import ConfigError, LockWaitTimeout
from tpnode_tui.text.printable import printable

#: The Redis key of the lease (and, with ":fence", of its lease token counter: a name
#: from before the lease token was called so, kept so that every version counts on one).
#: Here rather than beside the Redis backend, so that naming it never imports redis-py.
REDIS_KEY = "tpnode:gpu-alloc"


@dataclass
class LockHold:
    """One holding of the allocation lock, handed to the code inside it."""

    #: larger than every lease token handed out before it on this node, by any process
    lease_token: int
    _lost_because: Optional[str] = field(default=None, init=False, repr=False)

    def lost(self) -> bool:
        """Whether the lock was found to be no longer ours while held.

        Only a Redis lease can be lost; the kernel does not take an flock away
        from a live process. Once True it stays True: another process may have
        allocated in the meantime, and the caller has to back off.
        """
        return self._lost_because is not None

    def mark_lost(self, why: str) -> None:
        """Record that the lock stopped being ours (for the backend that found out)."""
        if self._lost_because is None:
            self._lost_because = why


#: How one acquisition is given up again.
Release = Callable[[], Awaitable[None]]
#: How a backend says, on every retry, why it is still waiting (None: it is not).
Report = Callable[[Optional[str]], None]


@dataclass(frozen=True)
class Holder:
    """Who takes the allocation lock in this process, and for what: named to
    anyone who waits for it, as a flock holder is named from /proc/locks.

    ``uid`` is the account the kernel named (None: the node itself, such as
    an idle reservation given back). Each account takes its turn: one of its
    allocations holds or waits for the lock at a time, the rest wait behind
    it, so one account's many requests never queue ahead of everyone else's.
    """

    account: str
    uid: Optional[int]
    #: what it does, as a person would say it: "launch of train-3"
    doing: str

    def words(self) -> str:
        if not self.account:
            return printable(self.doing)
        return f"{printable(self.account)}'s {printable(self.doing)}"


#: an allocation nobody named (a test's, a library caller's)
NOBODY = Holder("", None, "another allocation in this process")


class CrossProcessLock(Protocol):
    kind: str
    description: str

    async def acquire(self, report: Report, deadline: Optional[float]) -> tuple[LockHold, Release]:
        """Wait until this process holds the lock, calling ``report`` with why it
        is waiting on every retry. Tries at least once; after a failed try past
        ``deadline`` (``time.monotonic()``; None: no limit) raises
        :class:`LockWaitTimeout` with the last reason. Raises ConfigError for
        what waiting cannot fix."""
        ...

    async def inspect(self) -> Optional[str]:
        """Who holds the lock or why it cannot be had, without taking it; None when free."""
        ...

    async def close(self) -> None: ...


def past(deadline: Optional[float]) -> bool:
    """Whether a waiting backend has run out of time (never, without a deadline)."""
    return deadline is not None and time.monotonic() >= deadline


class AllocationLock:
    """The allocation critical section: ``async with lock.hold() as h:``.

    ``max_wait_s`` bounds how long one hold waits for the lock (None: for as
    long as it takes, which is what the dashboard wants). ``on_wait`` hears the
    first reason of every hold that has to wait, so a command line can say
    once what it waits for instead of hanging without a word.
    """

    #: Both backends span processes. :func:`check_allocation_safety` asks this
    #: attribute, so any other object passed as a lock (a test double) is
    #: refused unless it says the same.
    cross_process = True

    def __init__(
        self,
        backend: CrossProcessLock,
        *,
        max_wait_s: Optional[float] = None,
        on_wait: Optional[Callable[[str], None]] = None,
    ) -> None:
        self._backend = backend
        self._local = asyncio.Lock()
        self._local_waiters = 0
        #: each account's turn (one allocation of an account at the lock at a time),
        #: and how many of its allocations hold or wait for it
        self._turns: dict[int, tuple[asyncio.Lock, list[int]]] = {}
        #: who is inside the lock in this process, and since when (time.time())
        self._holder: Optional[tuple[Holder, float]] = None
        self._backend_waiting: Optional[str] = None
        self._max_wait_s = max_wait_s
        self._on_wait = on_wait
        self.kind = backend.kind
        self.description = backend.description

    @property
    def waiting(self) -> Optional[str]:
        """What a waiting caller waits for, in plain words; None when nobody waits."""
        if self._backend_waiting:
            return self._backend_waiting
        if self._local_waiters:
            return self._held_here()
        return None

    def _why(self) -> str:
        """Why a caller of this process waits now: the backend's reason while the
        allocation inside waits for it, else whose allocation is inside."""
        return self._backend_waiting or self._held_here()

    def _held_here(self) -> str:
        """What a caller waiting behind an allocation of this process waits for: whose, and since when."""
        if self._holder is None:
            return "waiting for the allocation lock, held by another allocation in this process"
        holder, since = self._holder
        clock = time.strftime("%H:%M:%S", time.localtime(since))
        return f"waiting for the allocation lock, held by {holder.words()} since {clock}"

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
        if why and self._backend_waiting is None and self._on_wait is not None:
            self._on_wait(why)
        self._backend_waiting = why

    def _gave_up(self, why: str) -> LockWaitTimeout:
        return LockWaitTimeout(f"gave up after {self._max_wait_s:g}s ({why}); nothing was started, try again later")

    async def _take(self, lock: asyncio.Lock, deadline: Optional[float]) -> None:
        """Take one of this process's locks (an account's turn, or the lock itself),
        waiting at most until ``deadline`` and saying once whom it waits for."""
        self._local_waiters += 1
        try:
            if deadline is None or not lock.locked():
                await lock.acquire()
                return
            if self._on_wait is not None:
                self._on_wait(self._why())
            try:
                await asyncio.wait_for(lock.acquire(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise self._gave_up(self._why()) from None
        finally:
            self._local_waiters -= 1

    @contextlib.asynccontextmanager
    async def _turn(self, by: Holder, deadline: Optional[float]) -> AsyncIterator[None]:
        """Wait behind the same account's allocations already at the lock."""
        if by.uid is None:
            yield
            return
        turn, users = self._turns.setdefault(by.uid, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            await self._take(turn, deadline)
            try:
                yield
            finally:
                turn.release()
        finally:
            users[0] -= 1
            if not users[0]:  # kept only while the account has an allocation at the lock
                del self._turns[by.uid]

    @contextlib.asynccontextmanager
    async def hold(self, by: Holder = NOBODY) -> AsyncIterator[LockHold]:
        """Hold the lock for the body: the account's turn, in-process, then across processes.

        Given back on leaving, whether the body returns, raises or is cancelled.
        ``by`` is named to whoever waits meanwhile.
        """
        deadline = None if self._max_wait_s is None else time.monotonic() + self._max_wait_s
        async with self._turn(by, deadline):
            await self._take(self._local, deadline)
            self._holder = (by, time.time())
            try:
                try:
                    hold, release = await self._backend.acquire(self._report, deadline)
                except LockWaitTimeout as e:
                    raise self._gave_up(str(e)) from None
                finally:
                    self._backend_waiting = None
                try:
                    yield hold
                finally:
                    await release()
            finally:
                self._holder = None
                self._local.release()

    async def close(self) -> None:
        await self._backend.close()


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


def lease_token_floor() -> int:
    """Where a lease token counter starts when it is missing: microseconds since the epoch.

    A counter goes missing when Redis restarts without persistence, the key or
    the counter's file is deleted, or on first use. Restarting at 1 would give the
    next holder a *smaller* lease token than a holder that may still be running with a
    lost lease, which is when the lease token matters. No node takes the lock more than
    once per microsecond, so the clock is above every lease token handed out before.
    (Microseconds since the epoch still fit exactly in a Lua number.)
    """
    return time.time_ns() // 1_000
