"""Launches and reservations: placed now, or queued, and every one in flight listed.

Launches that wait are visible in the snapshot's queue and can be cancelled
until they hold cards; one whose asker goes away while it waits for the lock
is dropped, and one that holds the lock is finished, so no job is left
half-made. The queue is tried in rounds, first come first served; a run id
is its owner's while queued, placed, held or listed. See
docs/architecture.md, sections 'A shared node' and 'The door'.
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
from tpnode_tui.locks import Holder
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
from tpnode_tui.model.jobs import JobSpec, JobState, Launched, QueuedLaunch, wanted_words
from tpnode_tui.model.owners import is_owner
from tpnode_tui.port.types.jobs import CancelRequest, LaunchRequest, LaunchResult, new_run_id
from tpnode_tui.port.types.parsing import MOST_CARDS
from tpnode_tui.port.types.refusals import Cancelled, OverQuota
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.service.accounts import account, group_names, run_as
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.readings import Readings
from tpnode_tui.state.queue import NO_BOUNDS, Bounds, LaunchQueue, QueueEntry
from tpnode_tui.text.printable import printable

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A launch in flight: waiting for the allocation lock, or placing its job."""

    spec: JobSpec
    caller: Caller
    began_at: float
    phase: str = "waiting"
    task: Optional[asyncio.Future[Launched]] = None
    cancelled_by: Optional[Caller] = None

    def public(self, state: str, waiting_for: Optional[str]) -> QueuedLaunch:
        s = self.spec
        return QueuedLaunch(
            run_id=s.run_id,
            cards=s.cards,
            owner=s.owner,
            queued_at=self.began_at,
            kind=s.kind,
            command=s.command,
            image=s.image,
            uid=s.uid,
            state=state,
            waiting_for=waiting_for,
            slice=s.slice,
            placement=s.placement,
        )


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
        bounds: Bounds = NO_BOUNDS,
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.queue = queue
        self.clock = clock
        self.readings = readings
        self.journal = journal
        self.changes = changes
        #: how many launches may wait (TUNEPLANE_MAX_QUEUED_PER_USER, TUNEPLANE_MAX_QUEUED)
        self.bounds = bounds
        self._pending: dict[str, _Pending] = {}
        self._round: Optional[asyncio.Task[None]] = None
        #: the last reason the queue could not be tried, said once until it changes
        self._stuck: Optional[str] = None

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
        """The job ``caller`` asks for, as the node's rules make it: whose it is
        (another owner: operators only), the image allowed, whom it runs as.
        The request itself was read and checked at the door
        (:meth:`LaunchRequest.parse <tpnode_tui.port.types.jobs.LaunchRequest.parse>`)."""
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

    def _job_spec(self, caller: Caller, request: LaunchRequest) -> JobSpec:
        assert request.run_id is not None
        return self._spec(
            caller,
            run_id=request.run_id,
            cards=request.cards,
            owner=request.owner,
            command=request.command,
            image=request.image,
            env=request.env,
            cwd=request.cwd,
            placement=request.placement,
            slice=request.slice,
        )

    def _check_run_id(self, spec: JobSpec) -> None:
        """Refuse a run id that is someone else's: queued by them, being placed
        for them, or one of their jobs not yet reclaimed (as last read; the
        allocator checks the live ones again under its lock). The same owner's
        is theirs to ask for again: a retry gets its job back."""
        run_id = spec.run_id
        pending = self._pending.get(run_id)
        if pending is not None:
            if _same_owner(spec, pending.spec.uid, pending.spec.owner):
                raise Conflict(f"{run_id} is being launched already; wait for it or cancel it, or choose another")
            raise Conflict(
                f"run id {run_id} is being launched already for {pending.spec.owner}; choose another run id "
                "(only they or an operator may cancel it)"
            )
        queued = next((e for e in self.queue.entries() if e.run_id == run_id), None)
        if queued is not None and not _same_owner(spec, queued.owner_uid, queued.owner):
            raise Conflict(
                f"run id {run_id} is queued by {queued.owner}; choose another run id "
                "(only they or an operator may cancel it)"
            )
        snap = self.readings.raw
        for job in snap.jobs if snap is not None else ():
            if job.key == run_id and not _same_owner(spec, job.uid, job.owner):
                what = f"{job.status} {job.kind}" if job.live else f"exited {job.kind}, not yet reclaimed"
                raise Conflict(
                    f"run id {run_id} is taken by {job.owner or 'another account'}'s {what}; choose another "
                    "run id (or leave it out for a new one)"
                )

    async def _within_reason(self, run_id: str, cards: int) -> None:
        """Refuse a count of cards no node has, in the words of one over this node's
        (its count as last read, or read now): 100000000000000000000 cards is the
        same mistake as 9 on an 8-card node, and is never queued or held."""
        if cards <= MOST_CARDS:
            return  # the allocator says it, under its lock, on the node just read
        from tpnode_tui.allocator.picking import more_than_the_node  # the picking rules: a launch's, not a status's

        snap = self.readings.raw or (await self.readings.poll()).snapshot
        raise more_than_the_node(run_id, cards, snap.occupancy.total if snap is not None else 0)

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        """Place a launch now, or (``queue``) let it wait its turn. Everything
        about it is decided inside the audited work, so every refusal (another
        owner named, a run id someone else holds, a full queue) is logged."""
        run_id = request.run_id or new_run_id()
        request = replace(request, run_id=run_id)

        async def work() -> LaunchResult:
            await self._within_reason(run_id, request.cards)
            spec = self._job_spec(caller, request)
            self._check_run_id(spec)
            # A launch that agrees to wait takes its place behind the ones already
            # waiting, so it cannot pass a larger launch queued before it.
            if not (request.queue and self.queue.entries()):
                try:
                    return LaunchResult(launched=await self._place(spec, caller))
                except (NoCapacity, OverQuota):
                    if not request.queue:
                        raise
            entry = QueueEntry(request, caller, self.clock())
            self.queue.add(entry, self.bounds)
            self.readings.republish()
            self.changes.poll_soon()
            return LaunchResult(queued=entry.public())

        def done(result: LaunchResult) -> str:
            if result.queued is not None:
                return f"{run_id} queued for {wanted_words(request.cards, request.slice, request.placement)}"
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
        run_id = request.run_id or new_run_id("rsv")

        async def work() -> Launched:
            if not request.duration_s >= 1:
                raise BadRequest(f"a reservation lasts at least 1 second, not {request.duration_s:g}")
            await self._within_reason(run_id, request.cards)
            spec = self._spec(
                caller,
                run_id=run_id,
                cards=request.cards,
                owner=request.owner,
                kind="reservation",
                placement=request.placement,
                slice=request.slice,
            )
            self._check_run_id(spec)
            spec = replace(spec, expires_at=self.clock() + request.duration_s)
            return await self._place(spec, caller, hold_for_s=request.duration_s)

        return await self.journal.audited(
            caller, "reserve", run_id, work(), _placed, lambda launched: launched.job.cards, finish=False
        )

    async def _place(
        self, spec: JobSpec, caller: Caller, hold_for_s: Optional[float] = None, began_at: Optional[float] = None
    ) -> Launched:
        """Launch ``entry`` as a cancellable pending launch, listed in the
        snapshot's queue from the next reading on while it waits.

        The allocator runs in a task of its own, awaited through a shield: if
        the asker goes away (or cancels) while the launch still waits for the
        lock, the launch is dropped; once it holds the lock it is finished,
        because a job cancelled half-way would hold cards with nobody to start it.
        """
        if spec.run_id in self._pending:
            raise Conflict(f"{spec.run_id} is being launched already; wait for it or cancel it")
        pending = _Pending(spec, caller, self.clock() if began_at is None else began_at)
        groups = group_names(caller.groups)

        def admit(jobs: list[JobState]) -> None:
            # Under the allocation lock, on the jobs just read: a quota checked
            # before the lock could be passed by two launches at once.
            theirs = next((j for j in jobs if j.key == spec.run_id and not _same_owner(spec, j.uid, j.owner)), None)
            if theirs is not None:
                # a retry gets its own job back; someone else's is not "already placed" for them
                what = theirs.kind if theirs.live else f"exited {theirs.kind}, not yet reclaimed"
                raise Conflict(
                    f"run id {spec.run_id} is taken by {theirs.owner or 'another account'}'s "
                    f"{what}; choose another run id (or leave it out for a new one)"
                )
            taken = next((j for j in jobs if j.live and j.key == spec.run_id), None)
            if taken is None:
                self.policy.check_quota_ever(caller, spec.cards, groups)
                try:
                    self.policy.check_quota(caller, jobs, spec.cards, groups)
                except NotAllowed as e:
                    raise OverQuota(str(e)) from None
            pending.phase = "placing"

        what = "reservation" if spec.kind == "reservation" else "launch"
        holder = Holder(caller.user, caller.uid, f"{'queued ' if began_at is not None else ''}{what} of {spec.run_id}")
        pending.task = asyncio.ensure_future(self.allocator.launch(spec, hold_for_s=hold_for_s, admit=admit, by=holder))
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
        in_queue = {e.run_id for e in entries}

        def trying(p: _Pending, otherwise: QueuedLaunch) -> QueuedLaunch:
            if p.phase == "waiting" and waiting:
                return p.public("waiting", waiting)
            if p.phase == "placing":
                return p.public("placing", "placing its job")
            return otherwise

        shown = [
            trying(p, p.public("placing", "placing its job"))
            for run_id, p in self._pending.items()
            if run_id not in in_queue
        ]
        for n, entry in enumerate(entries):
            place = entry.public("queued", f"{entry.public().wants}, #{n + 1} in the queue")
            pending = self._pending.get(entry.run_id)
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
        that fails for its own reasons, however it fails, leaves the queue,
        said once in the node's log: it never stops the round for the others."""
        try:
            entries = self.queue.entries()
        except TpnodeError as e:  # the file cannot be read: every reading says so
            self._say_stuck(str(e))
            return
        for entry in entries:
            if entry.run_id in self._pending:
                continue
            try:
                spec = self._job_spec(entry.caller, entry.request)
                launched = await self._place(spec, entry.caller, began_at=entry.queued_at)
            except (NoCapacity, LockWaitTimeout, RuntimeUnavailable) as e:
                self._say_stuck(None if isinstance(e, NoCapacity) else str(e))
                return
            except OverQuota:
                continue
            except TpnodeError as e:
                self._drop(entry, str(e))
                continue
            except Exception as e:  # noqa: BLE001 (what no rule foresaw: this launch's, never the round's)
                log.warning("queued launch %s failed; it leaves the queue", printable(entry.run_id), exc_info=True)
                self._drop(entry, f"it failed in the agent ({type(e).__name__}); the agent's log has the details")
                continue
            self._say_stuck(None)
            if self.queue.remove(entry.run_id) is not None:
                self.journal.record(
                    entry.caller,
                    "launch",
                    entry.run_id,
                    "ok",
                    f"queued launch: {_placed(launched)}",
                    counted="placed",
                    cards=launched.job.cards,
                    placed_from="queue",
                    owner_uid=launched.job.uid,
                )
            self.changes.acted()

    def _drop(self, entry: QueueEntry, why: str) -> None:
        if self.queue.remove(entry.run_id) is not None:
            self.journal.record(
                entry.caller, "launch", entry.run_id, "dropped", f"queued launch {entry.run_id} left the queue: {why}"
            )

    def _say_stuck(self, why: Optional[str]) -> None:
        """Say in the agent's log why the queue waits: once, not every round."""
        if why is not None and why != self._stuck:
            log.warning("the queue waits: %s", printable(why))
        self._stuck = why

    async def cancel(self, caller: Caller, request: CancelRequest) -> QueuedLaunch:
        """Drop a queued launch, or one still waiting for the lock; the owner or an operator."""
        run_id = request.run_id

        async def work() -> QueuedLaunch:
            pending = self._pending.get(run_id)
            queued = next((e for e in self.queue.entries() if e.run_id == run_id), None)
            if pending is None and queued is None:
                raise JobNotFound(f"no launch {run_id} is queued or waiting")
            if pending is not None:
                owner, owner_uid, shown = pending.spec.owner, pending.spec.uid, pending.public("cancelled", None)
            else:
                assert queued is not None
                owner, owner_uid, shown = queued.owner, queued.owner_uid, queued.public("cancelled")
            self.policy.check_cancel(caller, run_id, owner, owner_uid)
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
            return shown

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


def _same_owner(spec: JobSpec, uid: Optional[int], owner: str) -> bool:
    """Whether what recorded ``uid`` and ``owner`` is ``spec``'s owner's: by uid
    where both are known, else by name (as the policy compares)."""
    if spec.uid is not None:
        return is_owner(uid, owner, spec.uid, spec.owner)
    return owner == spec.owner


def _placed(launched: Optional[Launched]) -> str:
    if launched is None:
        return "nothing placed"
    job = launched.job
    if launched.existing:
        return f"{job.key} already held {launched.holding}"
    return f"{job.key} of {job.owner or 'nobody'} got {launched.holding}"
