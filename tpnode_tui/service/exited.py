"""Exited jobs kept per account up to a limit: the oldest beyond it leave the node's list for the usage ledger.

An exited job holds nothing, but its record and log stay and every reading
lists it: one account looping quick jobs once left 700, and an idle agent at
84 % of a core. So the agent keeps each account's newest
TUNEPLANE_MAX_EXITED_PER_USER and removes the older ones as ``reclaim``
would, only from a reading the usage ledger has written, after a poll, never
under the allocation lock, at most PER_ROUND at a time. See
docs/architecture.md, section 'The usage ledger and idle cards'.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.service.readings import Readings
from tpnode_tui.text.printable import printable

log = logging.getLogger(__name__)

#: the most exited jobs removed after one poll: the process runtime removes them in
#: one rewrite of its state file; the engine, one call each, for 2 s at most
PER_ROUND = 500


def _age(job: JobState) -> tuple[float, str]:
    return (job.started_at if job.started_at is not None else -math.inf, job.name)


def beyond(jobs: Iterable[JobState], most: int) -> list[JobState]:
    """Each account's exited jobs but its newest ``most``, oldest first. An account
    is the uid its jobs recorded, else their owner's name."""
    exited: dict[tuple[Optional[int], str], list[JobState]] = {}
    for job in jobs:
        if not job.live:
            exited.setdefault((job.uid, "" if job.uid is not None else job.owner), []).append(job)
    old = [job for kept in exited.values() for job in sorted(kept, key=_age)[: max(0, len(kept) - most)]]
    return sorted(old, key=_age)


class ExitedRecords:
    def __init__(self, allocator: GpuAllocator, readings: Readings, *, most: Optional[int]) -> None:
        """``most``: TUNEPLANE_MAX_EXITED_PER_USER (None: keep them all, a node with no ledger)."""
        self.allocator = allocator
        self.readings = readings
        self.most = most
        #: the reading whose exited jobs were last looked at: each is looked at once
        self._done: Optional[NodeSnapshot] = None
        #: why the last removal failed, said once until it changes
        self._trouble: Optional[str] = None

    async def prune(self) -> list[JobState]:
        """Remove the exited jobs beyond each account's limit, as the last reading the
        ledger has wholly written lists them (at most PER_ROUND); those removed."""
        snap = self.readings.recorded
        if self.most is None or snap is None or snap is self._done:
            return []
        self._done = snap
        old = beyond(snap.jobs, self.most)[:PER_ROUND]
        trouble = None
        try:
            gone = set(await self.allocator.runtime.remove_exited(old))
        except TpnodeError as e:  # the state file's lock, or the engine: the next poll tries again
            gone, trouble = set(), str(e)
        if trouble is not None and trouble != self._trouble:
            log.warning("could not remove exited jobs beyond the limit: %s", printable(trouble))
        self._trouble = trouble
        removed = [j for j in old if j.name in gone]
        if removed:
            log.info(
                "removed %d exited jobs beyond the %d kept per account (the usage ledger has them): %s",
                len(removed),
                self.most,
                printable(", ".join(j.key for j in removed)[:500]),
            )
        return removed
