"""Launches waiting for cards, kept in order by the dashboard that queued them.

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
it, so the one being tried is named (``trying``): a cancel that arrives then
can only drop it if it finds no room; if it is placed, its outcome says the
cancel came too late, so the operator can stop it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Optional, Union

from ..allocator import Launched
from ..model import BadRequest, JobSpec, NoCapacity, TpnodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    spec: JobSpec
    queued_at: float


@dataclass(frozen=True)
class Outcome:
    """What became of one queued launch this round."""

    item: Queued
    launched: Optional[Launched] = None
    error: Optional[Exception] = None
    #: cancelled while its launch was already under way
    cancelled: bool = False


Launch = Callable[[JobSpec], Awaitable[Launched]]


class LaunchQueue:
    def __init__(self) -> None:
        self._items: list[Queued] = []
        self._trying: Optional[Queued] = None

    def __iter__(self) -> Iterator[Queued]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, run_id: object) -> bool:
        return any(q.spec.run_id == run_id for q in self._items)

    def add(self, spec: JobSpec, now: float) -> Queued:
        if spec.run_id in self:
            raise BadRequest(f"{spec.run_id} is already queued; cancel it first or choose another run id")
        item = Queued(spec, now)
        self._items.append(item)
        return item

    def cancel(self, run_id: str) -> bool:
        """Drop a waiting request; False when it is no longer queued (placed or gone)."""
        before = len(self._items)
        self._items = [q for q in self._items if q.spec.run_id != run_id]
        return len(self._items) < before

    @property
    def trying(self) -> Optional[str]:
        """The run id whose launch is under way now (perhaps waiting for the lock)."""
        return self._trying.spec.run_id if self._trying is not None else None

    def position(self, run_id: str) -> Optional[int]:
        for n, q in enumerate(self._items, start=1):
            if q.spec.run_id == run_id:
                return n
        return None

    async def drain(self, launch: Launch) -> list[Outcome]:
        """Try the waiting launches in order until one does not fit yet."""
        outcomes: list[Outcome] = []
        while self._items:
            item = self._items[0]
            self._trying = item
            try:
                result: Union[Launched, Exception] = await launch(item.spec)
            except NoCapacity:
                break
            except Exception as e:  # NeverFits, a bad run id, the runtime refusing: say so, drop it
                if not isinstance(e, TpnodeError):
                    log.warning("queued launch %s failed", item.spec.run_id, exc_info=True)
                result = e
            finally:
                self._trying = None
            # A cancel while the launch was running already took it out.
            cancelled = not any(q is item for q in self._items)
            self._items = [q for q in self._items if q is not item]
            if isinstance(result, Exception):
                outcomes.append(Outcome(item, error=result, cancelled=cancelled))
            else:
                outcomes.append(Outcome(item, launched=result, cancelled=cancelled))
        return outcomes
