"""What every job runtime promises.

The runtime is the only source of truth for which cards the platform's own
jobs hold: container labels (docker) or the state file (process). Nothing is
kept in memory between calls, so a restarted CLI or dashboard rebuilds the
same picture from ``ps()``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Optional, Protocol

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JOB_KINDS, DeviceFence, JobOutput, JobSpec, JobState, SliceRef
from tpnode_tui.model.validation import MIG_UUID_PATTERN


class Runtime(Protocol):
    #: "docker" or "process"
    name: str

    def describe(self) -> str:
        """Where the truth lives, for the header: the engine address or the state file."""
        ...

    def node_fence(self) -> DeviceFence:
        """Whether the jobs this runtime starts on this node are fenced to their
        cards' device files, and by what (or why not): found once, then kept."""
        ...

    def output_of(self, job: JobState) -> str:
        """Where a job's output is, in words its owner can follow: a log's path, a command."""
        ...

    async def ps(self) -> list[JobState]:
        """Every platform job, live or exited, read afresh. Raises
        RuntimeUnavailable when the truth cannot be read (never an empty list)."""
        ...

    async def check(self, spec: JobSpec) -> None:
        """Refuse a spec this runtime can never run (BadRequest or Conflict),
        before any card is picked: a request that cannot run must not be told
        "no capacity, try later" just because the node happens to be full.
        Called before the allocation lock, never under it: what it runs may be
        the caller's to slow down."""
        ...

    async def create(self, spec: JobSpec, gpus: list[int]) -> JobState:
        """Make the job visible to every other reader of ``ps()`` as holding
        ``gpus``. Called under the allocation lock; keep it short, and run
        nothing a caller controls (no process of theirs, nothing that waits
        on one): everyone's allocations wait meanwhile."""
        ...

    async def start(self, name: str) -> JobState:
        """Start a created job. Called after the lock is released. On failure
        the job is removed (so it holds nothing) and the error is raised."""
        ...

    async def run(self, spec: JobSpec, gpus: list[int]) -> JobState:
        """create, then start."""
        ...

    async def stop(self, name: str) -> None: ...

    async def extend(self, name: str, expires_at: float) -> JobState:
        """Move a live reservation's expiry to ``expires_at`` (unix seconds).
        Called under the allocation lock; the reservation never stops holding
        its cards meanwhile."""
        ...

    async def remove(self, name: str) -> None:
        """Remove a job's record or container. Callers only remove exited jobs."""
        ...

    async def remove_exited(self, jobs: Sequence[JobState]) -> list[str]:
        """Remove these exited jobs, as read, all at once where the runtime can (the
        agent removing each account's oldest beyond its limit); one live again, gone,
        or whose name is another job's by now, is passed over. The names removed."""
        ...

    async def output(self, job: JobState, after: Optional[str], most: int) -> JobOutput:
        """At most ``most`` bytes of what ``job`` (as ``ps()`` read it) wrote to its
        standard output and error, from ``after`` (where the last page said the
        next starts; None: the beginning), as this runtime keeps it; JobNotFound
        once that job is gone, even if its name is another's now. Never waits
        for more to be written."""
        ...

    async def close(self) -> None: ...


# What every runtime refuses alike, before any card is held.


def check_kind(spec: JobSpec) -> None:
    if spec.kind not in JOB_KINDS:
        raise BadRequest(f"job kind {spec.kind!r} is not one of {', '.join(JOB_KINDS)}")


def check_cards(gpus: Sequence[int]) -> None:
    """Card indices as an allocator hands them out: whole numbers, none twice."""
    if len(set(gpus)) != len(gpus) or any(type(i) is not int or i < 0 for i in gpus):
        raise BadRequest(f"cards {list(gpus)!r} are not distinct card indices")


def check_slices(gpus: Sequence[int], slices: Sequence[SliceRef]) -> None:
    """MIG slices as an allocator hands them out: each a card index and a MIG
    uuid, none twice, and never beside whole cards (a job holds one or the other)."""
    if not slices:
        return
    if gpus:
        raise BadRequest(f"a job is given whole cards or MIG slices, not both ({list(gpus)!r} and slices)")
    uuids = [getattr(s, "uuid", None) for s in slices]
    if len(set(uuids)) != len(uuids) or not all(
        isinstance(s, SliceRef)
        and type(s.card) is int
        and s.card >= 0
        and isinstance(s.uuid, str)
        and MIG_UUID_PATTERN.fullmatch(s.uuid)
        for s in slices
    ):
        raise BadRequest(f"slices {list(slices)!r} are not distinct MIG slices (a card and a MIG-... uuid each)")


def hold_seconds(spec: JobSpec) -> float:
    """How long a reservation still holds its cards; BadRequest when it has no
    expiry or it is past (a hold that ended at once would look like a success)."""
    if spec.expires_at is None or not math.isfinite(spec.expires_at):
        raise BadRequest(f"reservation {spec.run_id!r} needs an expiry time")
    seconds = spec.expires_at - time.time()
    if not seconds > 0:
        raise BadRequest(f"reservation {spec.run_id!r} would expire in the past; give a later time")
    return seconds
