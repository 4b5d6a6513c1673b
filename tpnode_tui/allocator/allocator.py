"""The node's GPU allocator: which physical cards a job gets, never one in use.

Without Kubernetes' scheduler and device plugin nobody else keeps two jobs off
one card. So occupancy is read afresh on every decision from where the truth
lives, "read, pick, create" runs under the one allocation lock, and the lock
is released before the slow start, since a created job is already visible to
every reader. See docs/architecture.md, section 'Launch, step by step'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from tpnode_tui.allocator.holders import identify, name_on_slices
from tpnode_tui.allocator.missing import note_missing
from tpnode_tui.allocator.repeats import repeated
from tpnode_tui.config.settings import Settings
from tpnode_tui.core.cards import card_count, compute_occupancy
from tpnode_tui.core.display import card_views
from tpnode_tui.host.procinfo import name_containers
from tpnode_tui.locks import AllocationLock, Holder, check_allocation_safety, make_lock
from tpnode_tui.locks.base import NOBODY
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NoCapacity, TpnodeError, no_running_job
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import JobSpec, JobState, Launched, SliceRef, claims_overlap, holding_words
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.validation import check_profile, check_run_id
from tpnode_tui.model.views import Drain
from tpnode_tui.port.fields import days, over
from tpnode_tui.port.types.jobs import new_run_id
from tpnode_tui.state.drains import DrainStore
from tpnode_tui.text.refusals import not_extended

if TYPE_CHECKING:
    from tpnode_tui.probes.base import Probe
    from tpnode_tui.runtimes.base import Runtime

log = logging.getLogger(__name__)

SeriesResolver = Callable[[str, str], str]

#: how long a job that met a rival with a later lease token on its cards waits
#: for that rival to withdraw before withdrawing itself
LEASE_GRACE_S = 2.0


def raw_series(profile: str, gpu_name: str) -> str:
    """The series a node reports when nobody maps it: the operator's profile,
    else the cards' name as the driver gives it ("NVIDIA H200"), so the fleet
    and the metrics name the cards as ``status`` and the dashboard do."""
    return (profile or gpu_name or "").strip()


class GpuAllocator:
    """Hands physical cards to jobs, through one runtime, one probe and one lock.

    The lock belongs to the allocator, not to its callers: a caller that forgot
    it would silently steal cards, which costs far more than one extra wait.
    """

    def __init__(
        self,
        runtime: Runtime,
        probe: Probe,
        settings: Settings,
        lock: AllocationLock,
        *,
        series_resolver: Optional[SeriesResolver] = None,
        drains: Optional[DrainStore] = None,
    ) -> None:
        # A node always has more than one would-be allocator (the dashboard and
        # any shell running the CLI), so a lock that only orders tasks of this
        # process is refused outright rather than trusted.
        check_allocation_safety(lock, allocating_processes=2)
        self.runtime = runtime
        self.probe = probe
        self.settings = settings
        self.lock = lock
        #: the cards taken out of service; every allocator on the node reads the
        #: same file, so none can be constructed that would hand them out
        self.drains = drains if drains is not None else DrainStore(settings.state.dir)
        self._resolve_series = series_resolver or raw_series
        self._total: Optional[int] = None
        self._series = ""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        lock: Optional[AllocationLock] = None,
        series_resolver: Optional[SeriesResolver] = None,
    ) -> GpuAllocator:
        """The allocator the settings describe; ``lock`` replaces the one they
        would make (the CLI's, which bounds its wait and says what it waits for)."""
        # Imported here: the probes and the docker client are most of a CLI
        # command's start-up, and constructing them is what settings are checked for.
        from tpnode_tui.probes import make_probe
        from tpnode_tui.runtimes import make_runtime

        return cls(
            make_runtime(settings),
            make_probe(settings),
            settings,
            lock or make_lock(settings),
            series_resolver=series_resolver,
        )

    async def close(self) -> None:
        for part in (self.runtime, self.probe, self.lock):
            await part.close()

    # -- what the node has ----------------------------------------------------

    def _count(self, reading: ProbeReading) -> int:
        """The card count: the most cards any reading of this process has found.

        Every successful reading counts again, so a card that comes back after
        a reset or a driver reload is seen by a dashboard that ran through it.
        A failed reading (no count) changes nothing: a cached 0 would pin the
        node at "no cards". And the count never goes down: a card the driver
        stops reporting stays counted and is shown as not reported (unhealthy,
        or a job's card with a warning), never silently dropped with whatever
        holds it.
        """
        total = card_count(self.settings.cards.count, self._total, reading)
        if total > (self._total or 0):
            self._total = total
        return total

    def _series_of(self, reading: ProbeReading) -> str:
        """The hardware series of this node's cards; empty when unknown.

        A configured profile answers first (an operator may have classified the
        cards on purpose), and then the driver's card name is not used. Only a
        resolved series is kept: an empty answer after one failed probe must
        not make the node unclassifiable for the life of the process.
        """
        if not self._series:
            profile = self.settings.cards.profile
            self._series = self._resolve_series(profile, "" if profile else reading.model_name) or ""
        return self._series

    # -- occupancy ------------------------------------------------------------

    async def _read(self) -> tuple[GpuOccupancy, ProbeReading, list[JobState]]:
        """One fresh look at the node: the runtime and the probe, side by side.

        If the runtime cannot be read this raises: nobody knows which cards
        platform jobs hold, so no card may be called free.
        """
        occ, reading, jobs, _drains = await self._read_all()
        return occ, reading, jobs

    async def _read_all(self) -> tuple[GpuOccupancy, ProbeReading, list[JobState], dict[int, Drain]]:
        """:meth:`_read`, and the drains it took into account.

        The drain file is read with the jobs and the driver, so under the
        allocation lock a drain is part of "who may have this card". A drain
        file that cannot be understood raises like an unreadable runtime: which
        cards are out of service is then unknown, so none may be handed out.
        """
        jobs, reading, drains = await asyncio.gather(self.runtime.ps(), self.probe.read(), self._drains())
        total = self._count(reading)
        occ = compute_occupancy(
            total,
            jobs,
            reading,
            mem_busy_mib=self.settings.cards.mem_busy_mib,
            check_external=self.settings.cards.check_external,
            check_health=self.settings.cards.check_health,
            drains=drains,
        )
        return occ, reading, jobs, drains

    def _drains(self) -> Awaitable[dict[int, Drain]]:
        """The drains, as :meth:`DrainStore.read` reads them. Most nodes never
        drain a card and have no drain file: that is one stat, answered on the
        loop, where a thread of its own cost a reading of 8 idle cards a fifth
        of its time (bench/run.py, section 1). A file is read in a thread: its
        shared lock may wait for a writer's fsync."""
        if self.drains.path.exists():
            return asyncio.to_thread(self.drains.read)
        none: asyncio.Future[dict[int, Drain]] = asyncio.get_running_loop().create_future()
        none.set_result({})
        return none

    async def occupancy(self) -> GpuOccupancy:
        """Occupancy now, read afresh: a cached answer is how cards get handed out twice."""
        occ, _reading, _jobs = await self._read()
        return occ

    async def snapshot(self) -> NodeSnapshot:
        """Occupancy, per-card facts, holders and jobs, for display."""
        occ, reading, jobs, drains = await self._read_all()
        jobs = [note_missing(j, occ.total, reading) for j in jobs]
        live = {j.key: j for j in jobs if j.live}
        (holders, on_slices), lock_state = await asyncio.gather(
            asyncio.to_thread(identify, reading, occ, live), self.lock.state()
        )
        # Only a runtime that knows containers (docker) can name them.
        holders = await name_containers(holders, getattr(self.runtime, "containers", None))
        if on_slices:
            on_slices = name_on_slices(holders, on_slices)
        return NodeSnapshot(
            taken_at=time.time(),
            host=socket.gethostname(),
            occupancy=occ,
            cards=card_views(
                occ,
                reading,
                jobs,
                lambda c: holders.get(c.index, ()),
                drains,
                lambda card, s: on_slices.get((card, s.index), ()),
            ),
            jobs=tuple(sorted(jobs, key=lambda j: (j.started_at or 0, j.name))),
            probe=reading,
            series=self._series_of(reading),
            runtime=self.runtime.describe(),
            runtime_kind=self.runtime.name,
            node_fence=self.runtime.node_fence(),
            allow_unverified=self.settings.cards.allow_unverified,
            mem_busy_mib=self.settings.cards.mem_busy_mib,
            lock=self.lock.description,
            lock_state=lock_state,
            explain=occ.explain(),
        )

    # -- allocation -----------------------------------------------------------

    async def launch(
        self,
        spec: JobSpec,
        *,
        hold_for_s: Optional[float] = None,
        admit: Optional[Callable[[list[JobState]], None]] = None,
        by: Holder = NOBODY,
    ) -> Launched:
        """Place and start a job: pick and create under the lock, start after it.

        A run id that already holds cards gets its job back when the request is the
        same; asked for differently, or taken by an exited job, it is a Conflict.
        ``hold_for_s`` sets the expiry from the moment the cards are picked, so the
        wait for the lock does not shorten a reservation. ``admit(jobs)`` is called
        under the lock with the jobs just read, before any card is picked (a quota is
        only sound there; raising refuses the launch); once called, the launch is past
        cancelling. ``by`` is who asks, named to whoever waits for the lock. Whether
        the command can run is checked before the lock only: nothing of the caller's
        runs under it (see docs/architecture.md, section 'A caller's process job runs
        as the caller').
        """
        spec = _checked(spec)
        await self.runtime.check(spec)
        async with self.lock.hold(by) as hold:
            occ, reading, jobs = await self._read()
            if admit is not None:
                admit(jobs)
            if (again := repeated(spec, jobs, hold_for_s)) is not None:
                return again
            spec, gpus = self._place(spec, occ, reading, jobs)
            if hold_for_s is not None:
                spec = replace(spec, expires_at=time.time() + hold_for_s)
            created = await self.runtime.create(replace(spec, lease_token=hold.lease_token), gpus)
        await self._check_lease(created, hold.lease_token, hold.lost())
        job = await self.runtime.start(created.name)
        if not job.live and job.exit_code is None:
            # Ended with no exit code of its own: stopped (or killed) between
            # create and start, not a command that ran and finished quickly.
            raise Conflict(f"{spec.run_id} was stopped before it started; nothing ran")
        warning = None
        slices = job.slices or spec.slices
        if not occ.external_probe_ok:
            warning = (
                f"{holding_words(gpus, slices)} handed out unverified: "
                "use from outside the platform could not be probed"
            )
        return Launched(tuple(gpus), job, warning=warning, slices=slices)

    def _place(
        self, spec: JobSpec, occ: GpuOccupancy, reading: ProbeReading, jobs: list[JobState]
    ) -> tuple[JobSpec, list[int]]:
        """Pick what ``spec`` asks for, with the lock held and occupancy just read:
        whole cards, or one MIG slice (then named in the spec, and no card); and
        record in the spec what that is in device numbers, from the same reading."""
        # Only a launch picks: a reading never loads the placement search.
        from tpnode_tui.allocator.picking import device_grant, pick_cards, pick_slice

        allow = self.settings.cards.allow_unverified
        if spec.slice is None:
            gpus = pick_cards(spec.run_id, spec.cards, occ, reading, spec.placement, allow_unverified=allow)
            return replace(spec, granted=device_grant(reading, gpus, ())), gpus
        chosen = pick_slice(spec.run_id, spec.slice, occ, reading, jobs, allow_unverified=allow)
        assert chosen.uuid is not None  # a slice without one is never free
        refs = (SliceRef(chosen.card, chosen.uuid, chosen.profile or spec.slice),)
        return replace(spec, slices=refs, granted=device_grant(reading, (), refs)), []

    async def _check_lease(self, created: JobState, lease_token: int, lost: bool) -> None:
        """Make sure no other live job sits on our cards before ours starts.

        Two jobs can only meet on a card if the lock failed (a Redis lease
        expired while its holder stalled, a key cleared by hand). Every job
        carries the lease token of the allocation that placed it. Meeting an
        earlier job (lower number, or placed by hand) we remove ours at once.
        Meeting a later one we give it a moment to remove itself, as it will
        when it checks; if it is still there it checked before ours existed and
        may be starting, so ours goes. Either way two jobs never start on one
        card. If the node cannot be read back, ours is removed too.
        """
        deadline = asyncio.get_running_loop().time() + LEASE_GRACE_S
        while True:
            try:
                jobs = await self.runtime.ps()
            except TpnodeError:
                await self._withdraw(created)
                raise
            rivals = [j for j in jobs if j.live and j.name != created.name and claims_overlap(j, created)]
            if not rivals:
                return
            earlier = [j for j in rivals if j.lease_token is None or j.lease_token < lease_token]
            if earlier or asyncio.get_running_loop().time() >= deadline:
                await self._withdraw(created)
                names = ", ".join(f"{j.run_id} ({j.holding})" for j in rivals)
                why = "the allocation lock was lost" if lost else "another allocation placed a job there"
                log.error("withdrew %s: %s meanwhile; %s", created.run_id, why, names)
                what = "cards were" if created.gpus or not created.slices else "its MIG slice was"
                raise NoCapacity(f"{what} taken meanwhile by {names} ({why}); try again")
            await asyncio.sleep(LEASE_GRACE_S / 10)

    async def _withdraw(self, job: JobState) -> None:
        for step in (self.runtime.stop, self.runtime.remove):
            try:
                await step(job.name)
            except JobNotFound:
                return  # stopping an unstarted container already removed it
            except TpnodeError as e:
                log.warning("while withdrawing %s: %s", job.name, e)

    async def reserve(
        self, cards: int, duration_s: float, owner: str = "", run_id: Optional[str] = None, slice: Optional[str] = None
    ) -> Launched:
        """Hold cards for a person until a time: a job whose workload only waits.

        It lives where every job lives, so it needs no sweeper: when its sleep
        ends it exits, and exited jobs hold nothing.
        """
        if not duration_s > 0:
            raise BadRequest(f"a reservation needs a positive duration, not {duration_s!r}")
        spec = JobSpec(
            run_id=new_run_id("rsv") if run_id is None else run_id,
            cards=cards,
            kind="reservation",
            owner=owner or default_owner(),
            expires_at=time.time() + duration_s,
            slice=slice,
        )
        return await self.launch(spec, hold_for_s=duration_s)

    async def extend(
        self, run_id: str, duration_s: float, *, longest_s: Optional[float] = None, by: Holder = NOBODY
    ) -> JobState:
        """Hold a live reservation ``duration_s`` longer than it would have; at
        most ``longest_s`` from now, when given (the node's longest reservation:
        extended again and again, one would otherwise never end).

        Done under the allocation lock, so that no allocation reads the node
        while the runtime moves the expiry (the docker runtime replaces the
        holding container): the cards are never free in between.
        """
        if not duration_s > 0:
            raise BadRequest(f"extend by a positive duration, not {duration_s!r}")
        async with self.lock.hold(by):
            live = [j for j in await self.runtime.ps() if j.key == run_id and j.live]
            if not live:
                raise JobNotFound(f"no running reservation has run id {run_id}")
            job = live[0]
            if job.kind != "reservation" or job.expires_at is None:
                raise Conflict(not_extended(run_id))
            now = time.time()
            until = max(job.expires_at, now) + duration_s
            if longest_s is not None and until - now > longest_s:
                held = f"{(until - now) / 86400:.1f} days"
                raise over(
                    f"extended by {duration_s:g} s, {run_id} would be held for {held} from now",
                    days(longest_s),
                    "TUNEPLANE_MAX_DURATION_DAYS",
                    f"{longest_s / 86400:g}",
                )
            return await self.runtime.extend(job.name, until)

    # -- ending jobs ----------------------------------------------------------

    async def release(self, run_id: Optional[str]) -> list[JobState]:
        """Remove the exited jobs of ``run_id`` (of every run id for None); a
        live one is left alone. Returns what was removed.

        Not needed on the normal path (an ended job already holds nothing); it
        clears records, mostly for the process runtime's state file.
        """
        removed = []
        for job in await self.runtime.ps():
            if run_id in (None, job.key) and not job.live:
                await self._remove(job)
                removed.append(job)
        return removed

    async def reclaim(self, run_id: Optional[str] = None) -> list[JobState]:
        """Remove exited jobs (all, or one run id's) and return what was removed.

        Never removes a live job: that would kill somebody's training without
        telling them. Asking for a live one by name explains how to stop it.
        """
        removed = await self.release(run_id)
        if removed or run_id is None:
            return removed
        live = [j for j in await self.runtime.ps() if j.key == run_id]
        if live:
            raise Conflict(f"{run_id} is still {live[0].status}; stop it first (tpnode-tui stop {run_id})")
        raise JobNotFound(f"no platform job has run id {run_id}")

    async def _remove(self, job: JobState) -> None:
        try:
            await self.runtime.remove(job.name)
        except JobNotFound:
            pass  # reclaimed by someone else meanwhile: the outcome is the same

    async def stop(self, run_id: str) -> JobState:
        """Stop the live job with this run id; its cards are free once it has ended."""
        for job in await self.runtime.ps():
            if job.key == run_id and job.live:
                await self.runtime.stop(job.name)
                return job
        raise no_running_job(run_id)


def _checked(spec: JobSpec) -> JobSpec:
    """``spec`` with its run id and what it asks for checked, before anything is read;
    a MIG slice is chosen by the allocator, never named by the caller."""
    check_run_id(spec.run_id)
    if spec.slice is None:
        if spec.cards <= 0:
            raise BadRequest(f"a job needs at least 1 card, not {spec.cards}")
        return spec
    check_profile(spec.slice)
    if spec.cards != 1:
        raise BadRequest(
            f"a job gets one MIG slice, not {spec.cards}: ask for one {spec.slice} slice, or for whole cards"
        )
    return replace(spec, slices=())


def default_owner() -> str:
    for var in ("SUDO_USER", "USER", "LOGNAME"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())
