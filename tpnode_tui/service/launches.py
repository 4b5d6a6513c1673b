"""Launches and reservations: placed now, or queued, and every one in flight listed.

Launches that wait are visible: one waiting for the allocation lock, one
placing its job, and one queued for cards are all listed in the snapshot's
queue, and each can be cancelled by its owner or an operator until it holds
cards. A launch whose asker goes away while it waits for the lock is dropped;
once it holds the lock it is finished, so a job is never left half-made.

The queue is tried in rounds, after every poll: in order, the first launch
that does not fit ends the round, and one over its owner's limit waits
without holding back the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.policy import Policy
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import (
    BadRequest,
    Conflict,
    JobNotFound,
    LockWaitTimeout,
    NoCapacity,
    NotAllowed,
    RuntimeUnavailable,
    TpnodeError,
)
from tpnode_tui.model.jobs import JobSpec, JobState, Launched, QueuedLaunch
from tpnode_tui.model.topology import PLACEMENTS
from tpnode_tui.model.validation import check_run_id
from tpnode_tui.port.types import Cancelled, LaunchRequest, LaunchResult, OverQuota, ReserveRequest, new_run_id
from tpnode_tui.service.accounts import account, group_names, run_as
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.readings import Readings
from tpnode_tui.state.queue import LaunchQueue, QueueEntry
from tpnode_tui.text.printable import printable

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A launch in flight: waiting for the allocation lock, or placing its job."""

    entry: QueueEntry
    phase: str = "waiting"
    task: Optional[asyncio.Future[Launched]] = None
    cancelled_by: Optional[Caller] = None


class Launches:
    def __init__(
        self,
        allocator: GpuAllocator,
        policy: Policy,
        queue: LaunchQueue,
        *,
        clock: Callable[[], float],
        readings: Readings,
        journal: Journal,
        changes: Changes,
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.queue = queue
        self.clock = clock
        self.readings = readings
        self.journal = journal
        self.changes = changes
        self._pending: dict[str, _Pending] = {}
        self._round: Optional[asyncio.Task[None]] = None

    def _spec(
        self,
        caller: Caller,
        *,
        run_id: str,
        cards: int,
        owner: str,
        command: tuple[str, ...] = (),
        image: Optional[str] = None,
        kind: str = "job",
        env: Optional[tuple[tuple[str, str], ...]] = None,
        cwd: Optional[str] = None,
        placement: Optional[str] = None,
        slice: Optional[str] = None,
    ) -> JobSpec:
        check_run_id(run_id)
        if cards <= 0:
            raise BadRequest(f"a job needs at least 1 card, not {cards}")
        if placement is not None and placement not in PLACEMENTS:
            raise BadRequest(f"{placement!r} is not a placement: use {' or '.join(PLACEMENTS)}")
        if placement is not None and slice is not None:
            raise BadRequest(f"a MIG slice ({slice}) is one device: it has no placement ({placement}) to ask for")
        owner = self.policy.owner_for(caller, owner)
        self.policy.check_image(image)
        named = caller if owner == caller.user else account(owner)
        # Being an operator is not being root: a job an operator places for alice is
        # hers (her uid, so she may stop it and her processes are its own) but runs
        # as the operator. Only root, who could anyway, starts it as her.
        runner = named if named is not None and caller.uid == 0 else caller
        return JobSpec(
            run_id=run_id,
            cards=cards,
            command=command,
            image=image,
            kind=kind,
            owner=owner,
            uid=named.uid if named is not None else None,
            env=env,
            cwd=cwd,
            run_as=run_as(runner),
            placement=placement,
            slice=slice,
        )

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        run_id = request.run_id or new_run_id()
        spec = self._spec(
            caller,
            run_id=run_id,
            cards=request.cards,
            owner=request.owner,
            command=request.command,
            image=request.image,
            env=request.env,
            cwd=request.cwd,
            placement=request.placement,
            slice=request.slice,
        )
        entry = QueueEntry(spec, caller, self.clock())

        async def work() -> LaunchResult:
            # A launch that agrees to wait takes its place behind the ones already
            # waiting, so it cannot pass a larger launch queued before it.
            if not (request.queue and self.queue.entries()):
                try:
                    return LaunchResult(launched=await self._place(entry))
                except (NoCapacity, OverQuota):
                    if not request.queue:
                        raise
            self.queue.add(entry)
            self.readings.republish()
            self.changes.poll_soon()
            return LaunchResult(queued=entry.public())

        def done(result: LaunchResult) -> str:
            if result.queued is not None:
                return f"{run_id} queued for {spec.wants}"
            return _placed(result.launched)

        return await self.journal.audited(
            caller,
            "launch",
            run_id,
            work(),
            done,
            lambda r: r.launched.job.cards if r.launched is not None else (),
            finish=False,
        )

    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        if not request.duration_s >= 1:
            raise BadRequest(f"a reservation lasts at least 1 second, not {request.duration_s:g}")
        run_id = request.run_id or new_run_id("rsv")
        spec = self._spec(
            caller,
            run_id=run_id,
            cards=request.cards,
            owner=request.owner,
            kind="reservation",
            placement=request.placement,
            slice=request.slice,
        )
        spec = replace(spec, expires_at=self.clock() + request.duration_s)
        entry = QueueEntry(spec, caller, self.clock())
        return await self.journal.audited(
            caller,
            "reserve",
            run_id,
            self._place(entry, hold_for_s=request.duration_s),
            _placed,
            lambda launched: launched.job.cards,
            finish=False,
        )

    async def _place(self, entry: QueueEntry, hold_for_s: Optional[float] = None) -> Launched:
        """Launch ``entry`` as a cancellable pending launch, listed in the
        snapshot's queue from the next reading on while it waits.

        The allocator runs in a task of its own, awaited through a shield: if
        the asker goes away (or cancels) while the launch still waits for the
        lock, the launch is dropped; once it holds the lock it is finished,
        because a job cancelled half-way would hold cards with nobody to start it.
        """
        spec, caller = entry.spec, entry.caller
        if spec.run_id in self._pending:
            raise Conflict(f"{spec.run_id} is being launched already; wait for it or cancel it")
        pending = _Pending(entry)
        groups = group_names(caller.groups)

        def admit(jobs: list[JobState]) -> None:
            # Under the allocation lock, on the jobs just read: a quota checked
            # before the lock could be passed by two launches at once.
            taken = next((j for j in jobs if j.live and j.key == spec.run_id), None)
            if taken is not None and taken.owner != spec.owner:
                # a retry gets its own job back; someone else's is not "already placed" for them
                raise Conflict(
                    f"run id {spec.run_id} is taken by {taken.owner or 'another account'}'s "
                    f"{taken.kind}; choose another run id (or leave it out for a new one)"
                )
            if taken is None:
                self.policy.check_quota_ever(caller, spec.cards, groups)
                try:
                    self.policy.check_quota(caller, jobs, spec.cards, groups)
                except NotAllowed as e:
                    raise OverQuota(str(e)) from None
            pending.phase = "placing"

        pending.task = asyncio.ensure_future(self.allocator.launch(spec, hold_for_s=hold_for_s, admit=admit))
        self._pending[spec.run_id] = pending
        try:
            return await asyncio.shield(pending.task)
        except asyncio.CancelledError:
            if pending.cancelled_by is not None:
                by = pending.cancelled_by
                raise Cancelled(
                    f"{spec.run_id} was cancelled by {by.user} while it waited for "
                    "the allocation lock; nothing was placed"
                ) from None
            if pending.phase == "waiting":
                pending.task.cancel()
            raise
        finally:
            if self._pending.get(spec.run_id) is pending:
                del self._pending[spec.run_id]

    def queued(self) -> tuple[QueuedLaunch, ...]:
        """Launches in flight first (in the order they began), then the queue in
        its order. A launch is shown waiting only while the allocation lock really
        keeps it waiting, and says for what: a queued launch being tried, as
        each round tries it, keeps its place and its "queued" meanwhile."""
        waiting = self.allocator.lock.waiting
        entries = self.queue.entries()
        in_queue = {e.spec.run_id for e in entries}

        def trying(p: _Pending, otherwise: QueuedLaunch) -> QueuedLaunch:
            if p.phase == "waiting" and waiting:
                return p.entry.public("waiting", waiting)
            if p.phase == "placing":
                return p.entry.public("placing", "placing its job")
            return otherwise

        shown = [
            trying(p, p.entry.public("placing", "placing its job"))
            for run_id, p in self._pending.items()
            if run_id not in in_queue
        ]
        for n, entry in enumerate(entries):
            place = entry.public("queued", f"{entry.spec.wants}, #{n + 1} in the queue")
            pending = self._pending.get(entry.spec.run_id)
            shown.append(place if pending is None else trying(pending, place))
        return tuple(shown)

    def try_queue(self) -> None:
        """Start a round over the queue, unless one is under way or nothing is queued."""
        if self._round is None or self._round.done():
            if self.queue.entries():
                self._round = asyncio.ensure_future(self._queue_round())

    async def _queue_round(self) -> None:
        """One round over the queue, in order. The first launch that does not fit
        ends the round (no starving a large job with small ones), and so does a
        problem of the node's that passes (the engine restarting, a broken
        drains file, the lock not had): nobody's launch is dropped for it. One
        over its owner's quota waits without holding back anyone else's; one
        that fails for its own reasons leaves the queue, said in the node's log."""
        for entry in self.queue.entries():
            spec = entry.spec
            if spec.run_id in self._pending:
                continue
            try:
                launched = await self._place(entry)
            except (NoCapacity, LockWaitTimeout, RuntimeUnavailable) as e:
                if not isinstance(e, NoCapacity):
                    log.warning("the queue waits: %s", printable(str(e)))
                return
            except OverQuota:
                continue
            except TpnodeError as e:
                if self.queue.remove(spec.run_id) is not None:
                    self.journal.record(
                        entry.caller,
                        "launch",
                        spec.run_id,
                        "dropped",
                        f"queued launch {spec.run_id} left the queue: {e}",
                    )
                continue
            if self.queue.remove(spec.run_id) is not None:
                self.journal.record(
                    entry.caller, "launch", spec.run_id, "ok", f"queued launch: {_placed(launched)}", counted="placed"
                )
            self.changes.acted()

    async def cancel(self, caller: Caller, run_id: str) -> QueuedLaunch:
        """Drop a queued launch, or one still waiting for the lock; the owner or an operator."""

        async def work() -> QueuedLaunch:
            pending = self._pending.get(run_id)
            queued = next((e for e in self.queue.entries() if e.spec.run_id == run_id), None)
            entry = pending.entry if pending is not None else queued
            if entry is None:
                raise JobNotFound(f"no launch {run_id} is queued or waiting")
            self.policy.check_cancel(caller, run_id, entry.spec.owner, entry.spec.uid)
            if pending is not None:
                if pending.phase != "waiting":
                    raise TpnodeError(
                        f"{run_id} already holds the allocation lock and is placing "
                        f"its job: too late to cancel; stop it once it runs "
                        f"(tpnode-tui stop {run_id})"
                    )
                pending.cancelled_by = caller
                if pending.task is not None:
                    pending.task.cancel()
            self.queue.remove(run_id)
            self.readings.republish()
            return entry.public("cancelled")

        return await self.journal.audited(
            caller, "cancel", run_id, work(), lambda q: f"{q.run_id} of {q.owner} was cancelled"
        )

    async def close(self) -> None:
        """Drop the launches still waiting for the lock, and the round under way."""
        for pending in list(self._pending.values()):
            if pending.task is not None and pending.phase == "waiting":
                pending.task.cancel()
        if self._round is not None:
            self._round.cancel()
            with contextlib.suppress(BaseException):
                await self._round


def _placed(launched: Optional[Launched]) -> str:
    if launched is None:
        return "nothing placed"
    job = launched.job
    if launched.existing:
        return f"{job.key} already held {launched.holding}"
    return f"{job.key} of {job.owner or 'nobody'} got {launched.holding}"
