"""Launches not started yet: queued for cards, or under way in this dashboard.

A launch refused with NoCapacity is not a failure, it is "not your turn yet";
the operator chose to wait, so the dashboard keeps the request and tries it
again every poll. Two rules come from the reference's dequeue loop:

- Stop at the first request that does not fit. Skipping ahead to smaller ones
  would let a stream of 1-card jobs starve an 8-card job forever.
- A request that can never fit (NeverFits), or that fails for any other
  reason, leaves the queue with its reason: retrying it every second would
  keep it waiting for nothing, and quietly.

The queue lives only in this dashboard: it is a list of wishes, not a record
of who holds which card (the runtime is), so losing it on quit hides nothing
(the dashboard still asks before dropping it).

A launch may wait on the allocation lock for as long as another holder keeps
it (forever while Redis is down), so every launch under way, from a dialog or
from the queue, is listed here too and can be cancelled. Each runs in a task
of its own, so that cancelling one ends nothing else. Until it holds the lock
it has done nothing, and a cancel abandons it. Once it holds the lock it
picks cards and creates its job, and stopping it halfway could leave a job
created but never started: it is left to finish, and its outcome says the
cancel came too late, so the operator can stop it.
"""
from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Optional

from ..allocator import Launched
from ..model import BadRequest, JobSpec, NoCapacity, TpnodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    spec: JobSpec
    queued_at: float


@dataclass(frozen=True)
class Outcome:
    """What became of one launch under way."""

    spec: JobSpec
    launched: Optional[Launched] = None
    error: Optional[Exception] = None
    #: cancelled once it held the lock: too late to stop it being placed
    cancelled: bool = False
    #: cancelled while it waited for the lock: nothing was picked or created
    abandoned: bool = False


@dataclass(frozen=True)
class Pending:
    """One launch not started yet, as the jobs table lists it."""

    spec: JobSpec
    #: when it was queued, or when its launch began if it never was
    since: float
    #: QUEUED (waiting for cards), WAITING (for the allocation lock) or PLACING (holding it)
    state: str
    #: its place in the queue, while queued and not under way
    position: Optional[int] = None


QUEUED, WAITING, PLACING = "queued", "waiting", "placing"


class Cancel(enum.Enum):
    """What a cancel did."""

    #: it was only queued: dropped, nothing had been tried
    DROPPED = "dropped"
    #: it was waiting for the allocation lock: its launch was ended before any card was picked
    ABANDONED = "abandoned"
    #: it holds the allocation lock and is being placed: it is no longer queued, but it goes on
    TOO_LATE = "too late"


#: ``allocator.launch``, or anything called like it
Launch = Callable[..., Awaitable[Launched]]


class _UnderWay:
    """One launch running now, from the moment it is begun until its outcome is known."""

    def __init__(self, spec: JobSpec, since: float, changed: Callable[[], None]) -> None:
        self.spec = spec
        self.since = since
        self.placing = False
        self.cancelled = False
        self.abandoned = False
        self.task: Optional[asyncio.Future] = None
        self._changed = changed

    def locked(self) -> None:
        """Called by the allocator, with the lock just taken, inside the launch's task."""
        self.placing = True
        self._changed()


class LaunchQueue:
    def __init__(self, changed: Callable[[], None] = lambda: None) -> None:
        """``changed`` is called whenever a launch begins, takes the lock or ends.

        It is called from inside a launch, with the allocation lock held, so it
        must only arrange a redraw, never draw or raise."""
        self._items: list[Queued] = []
        self._under_way: dict[str, _UnderWay] = {}
        self._changed = changed

    def __iter__(self) -> Iterator[Queued]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, run_id: object) -> bool:
        return any(q.spec.run_id == run_id for q in self._items)

    def add(self, spec: JobSpec, now: float) -> Queued:
        if spec.run_id in self or spec.run_id in self._under_way:
            raise BadRequest(f"{spec.run_id} is already queued or being launched; cancel it first "
                             "or choose another run id")
        item = Queued(spec, now)
        self._items.append(item)
        return item

    def position(self, run_id: str) -> Optional[int]:
        for n, q in enumerate(self._items, start=1):
            if q.spec.run_id == run_id:
                return n
        return None

    def pending(self) -> list[Pending]:
        """Every launch not started yet: those under way first, then the queue in order."""
        rows = []
        queued_at = {q.spec.run_id: q.queued_at for q in self._items}
        for going in self._under_way.values():
            state = PLACING if going.placing else WAITING
            rows.append(Pending(going.spec, queued_at.get(going.spec.run_id, going.since), state))
        for n, q in enumerate(self._items, start=1):
            if q.spec.run_id not in self._under_way:
                rows.append(Pending(q.spec, q.queued_at, QUEUED, n))
        return rows

    def cancel(self, run_id: str) -> Optional[Cancel]:
        """Take a launch back; None when it is neither queued nor under way (placed, or gone)."""
        queued = run_id in self
        self._items = [q for q in self._items if q.spec.run_id != run_id]
        going = self._under_way.get(run_id)
        if going is None:
            return Cancel.DROPPED if queued else None
        if going.placing:
            going.cancelled = True
            return Cancel.TOO_LATE
        # Not holding the lock means suspended before it, in this same event
        # loop: the cancel lands there, before the allocator reads or picks anything.
        going.abandoned = True
        going.task.cancel()
        del self._under_way[run_id]
        self._changed()
        return Cancel.ABANDONED

    async def attempt(self, spec: JobSpec, launch: Launch, now: float, *, queued: bool = False) -> Outcome:
        """Run one launch, listed as under way until its outcome is known.

        ``launch`` is called as ``launch(spec, locked=callback)``. NoCapacity,
        and any other refusal, comes back in the outcome rather than raised.
        ``queued`` says it is the queue's own head; any other launch of a run
        id that is queued or under way is refused.
        """
        if spec.run_id in self._under_way or (not queued and spec.run_id in self):
            raise BadRequest(f"{spec.run_id} is already queued or being launched; cancel it first "
                             "or choose another run id")
        going = _UnderWay(spec, now, self._changed)
        going.task = asyncio.ensure_future(launch(spec, locked=going.locked))
        self._under_way[spec.run_id] = going
        self._changed()
        try:
            await asyncio.wait([going.task])  # a cancel of the launch must not end the caller
        finally:
            if not going.task.done():  # the caller was cancelled: the dashboard is closing
                going.task.cancel()
            if self._under_way.get(spec.run_id) is going:
                del self._under_way[spec.run_id]
                self._changed()
        if going.abandoned or going.task.cancelled():
            return Outcome(spec, abandoned=True)
        error = going.task.exception()
        if error is not None:
            return Outcome(spec, error=error, cancelled=going.cancelled)
        return Outcome(spec, launched=going.task.result(), cancelled=going.cancelled)

    async def drain(self, launch: Launch, now: float) -> list[Outcome]:
        """Try the waiting launches in order until one does not fit yet.

        One that is abandoned while it waits for the lock leaves no outcome (the
        cancel already said so), and the next one is tried in its place."""
        outcomes: list[Outcome] = []
        while self._items:
            item = self._items[0]
            outcome = await self.attempt(item.spec, launch, now, queued=True)
            if isinstance(outcome.error, NoCapacity):
                break  # still queued, first in line; or cancelled meanwhile, and gone
            if outcome.error is not None and not isinstance(outcome.error, TpnodeError):
                log.warning("queued launch %s failed", item.spec.run_id, exc_info=outcome.error)
            self._items = [q for q in self._items if q is not item]
            if not outcome.abandoned:
                outcomes.append(outcome)
        return outcomes
