"""The node's GPU allocator: which physical cards a job gets, never one in use.

Without Kubernetes' scheduler and device plugin nobody else prevents two jobs
landing on one card; both then go OOM or crawl, at random, depending on which
asked for memory first. Everything here exists to keep that from happening:

- Occupancy is read afresh on every decision from where the truth already
  lives (container labels or the state file for platform jobs, the driver for
  everything else). Nothing is cached, so a restart loses nothing and a stale
  table can never hand out a busy card.
- "Read occupancy, pick cards, create the job" runs under one lock that spans
  every process on the node (flock or a Redis lease), so the dashboard and a
  shell launching at the same moment never pick the same cards.
- A created job is already visible to every other reader (a docker container
  in state "created" holds its cards in ``ps``), so the lock is released
  before the slow part, starting it. A job that fails to start is removed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from tpnode_tui.config.settings import Settings
from tpnode_tui.core.belonging import classify
from tpnode_tui.core.cards import card_count, compute_occupancy
from tpnode_tui.core.display import card_views
from tpnode_tui.core.placement import choose
from tpnode_tui.core.slices import blind_reason, shares_gpu_instance
from tpnode_tui.host.procinfo import describe, name_containers
from tpnode_tui.locks import AllocationLock, check_allocation_safety, make_lock
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NeverFits, NoCapacity, TpnodeError
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import JobSpec, JobState, Launched, SliceRef, claims_overlap, holding_words
from tpnode_tui.model.occupancy import GpuOccupancy, SliceState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.validation import check_profile, check_run_id
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN, Drain, HolderInfo
from tpnode_tui.port.types import new_run_id
from tpnode_tui.state.drains import DrainStore
from tpnode_tui.text.render import cards_words, format_duration, show_command

if TYPE_CHECKING:
    from tpnode_tui.probes.base import Probe
    from tpnode_tui.runtimes.base import Runtime

log = logging.getLogger(__name__)

SeriesResolver = Callable[[str, str], str]

#: which of two readings of one process a card shows: the one that needs attention
_WORSE = {INTRUDER: 0, EXTERNAL: 1, UNKNOWN: 2, HOLDER: 3}

#: how long a job that met a later-fenced rival on its cards waits for that
#: rival to withdraw before withdrawing itself
FENCE_GRACE_S = 2.0


def raw_series(profile: str, gpu_name: str) -> str:
    """The series a node reports when nobody maps it: the raw name, lower-cased,
    so that "NVIDIA H200" and "nvidia h200" are one series to a strict comparison."""
    return (profile or gpu_name or "").strip().lower()


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
        self.drains = drains if drains is not None else DrainStore(settings.state_dir)
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
        total = card_count(self.settings.local_gpu_count, self._total, reading)
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
            profile = self.settings.cluster_profile
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
        jobs, reading, drains = await asyncio.gather(
            self.runtime.ps(), self.probe.read(), asyncio.to_thread(self.drains.read)
        )
        total = self._count(reading)
        occ = compute_occupancy(
            total,
            jobs,
            reading,
            mem_busy_mib=self.settings.mem_busy_mib,
            check_external=self.settings.check_external,
            check_health=self.settings.check_health,
            drains=drains,
        )
        return occ, reading, jobs, drains

    async def occupancy(self) -> GpuOccupancy:
        """Occupancy now, read afresh: a cached answer is how cards get handed out twice."""
        occ, _reading, _jobs = await self._read()
        return occ

    async def snapshot(self) -> NodeSnapshot:
        """Occupancy, per-card facts, holders and jobs, for display."""
        occ, reading, jobs, drains = await self._read_all()
        jobs = [_note_missing_slices(_note_missing_cards(j, occ.total), reading) for j in jobs]
        holders: dict[int, tuple[HolderInfo, ...]] = {}
        on_slices: dict[tuple[int, int], tuple[HolderInfo, ...]] = {}
        live = {j.key: j for j in jobs if j.live}
        held = {(st.card, st.index): st.run_id for st in occ.slices}

        def identify() -> None:
            # Each process is told apart against the job that holds its card, or
            # on a MIG card the slice it runs on: its own processes, or someone
            # else's (an intruder). A process on no slice the driver could tell
            # is told apart against the card's holder (nobody, on a MIG card).
            for card in reading.cards:
                whole = live.get(occ.by_job.get(card.index, ""))
                seen: dict[int, HolderInfo] = {}
                for s in card.slices or ():
                    if s.processes:
                        job = live.get(held.get((card.index, s.index)) or "") or whole
                        found = tuple(classify(describe(p), job, live.values()) for p in s.processes)
                        on_slices[(card.index, s.index)] = found
                        for h in found:  # on two slices: the card shows the worse of the two
                            if h.pid not in seen or _WORSE[h.belongs] < _WORSE[seen[h.pid].belongs]:
                                seen[h.pid] = h
                if card.processes:
                    holders[card.index] = tuple(
                        seen.get(p.pid) or classify(describe(p), whole, live.values()) for p in card.processes
                    )

        _, lock_state = await asyncio.gather(asyncio.to_thread(identify), self.lock.state())
        # Only a runtime that knows containers (docker) can name them.
        holders = await name_containers(holders, getattr(self.runtime, "containers", None))
        if on_slices:  # the names the card's list was given, on each slice's
            named = {h.pid: (h.container_name, h.container_image) for hs in holders.values() for h in hs}
            on_slices = {
                k: tuple(
                    replace(h, container_name=named[h.pid][0], container_image=named[h.pid][1]) if h.pid in named else h
                    for h in hs
                )
                for k, hs in on_slices.items()
            }
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
            allow_unverified=self.settings.allow_unverified,
            mem_busy_mib=self.settings.mem_busy_mib,
            lock=self.lock.description,
            lock_state=lock_state,
            explain=occ.explain(),
        )

    # -- allocation -----------------------------------------------------------

    def _pick(
        self,
        run_id: str,
        count: int,
        occ: GpuOccupancy,
        reading: Optional[ProbeReading] = None,
        placement: Optional[str] = None,
    ) -> list[int]:
        """Choose cards, with the lock held and occupancy just read: the free set
        that talks fastest on the reading's topology (as ``placement`` requires,
        if it does), else a consecutive run (see :func:`~tpnode_tui.core.placement.choose`).
        """
        if count > occ.total and occ.total > 0:
            raise NeverFits(
                f"{run_id} needs {cards_words(count)} and this node has {occ.total}: "
                "no amount of waiting will place it; ask for fewer cards"
            )
        cards = [c for c in (reading.cards if reading is not None else ()) if 0 <= c.index < occ.total]
        in_mig = [c.index for c in cards if c.mig_mode is True]
        to_split = [c.index for c in cards if c.mig_mode is False and c.mig_pending is True]
        split = len(in_mig) + len(to_split)
        if split and count > occ.total - split:
            # A card in MIG mode is never handed out whole, and waiting does not
            # make it whole: only an operator turning MIG off does.
            why = []
            if in_mig:
                why.append(f"{cards_words(in_mig)} {'is' if len(in_mig) == 1 else 'are'} in MIG mode")
            if to_split:
                why.append(
                    f"{cards_words(to_split)} {'is' if len(to_split) == 1 else 'are'} split into MIG "
                    f"slices at {'its' if len(to_split) == 1 else 'their'} next reset"
                )
            ask = (
                f"ask for a slice (launch --slice {example_profile(occ)})"
                if occ.slices
                else ("ask an operator to make MIG devices, or to turn MIG off")
            )
            if split == occ.total:
                raise NeverFits(f"{'; '.join(why)}: {ask}")
            raise NeverFits(
                f"{run_id} needs {cards_words(count)} whole and this node has {occ.total - split} "
                f"({'; '.join(why)}): ask for fewer cards, or {ask}"
            )
        if not occ.external_probe_ok and not self.settings.allow_unverified:
            raise NoCapacity(
                f"use from outside the platform cannot be probed, so no card can be checked "
                f"free ({occ.explain()}); no card is handed out until the probe works again, "
                "unless TUNEPLANE_ALLOW_UNVERIFIED=true hands out unverified cards anyway"
            )
        try:
            return choose(occ.free, count, reading.topology if reading is not None else None, placement)
        except NoCapacity as e:
            if placement is None:
                raise NoCapacity(f"need {cards_words(count)}, but {occ.explain()}") from None
            raise NoCapacity(f"need {cards_words(count)} {placement} ({e}), but {occ.explain()}") from None
        except NeverFits as e:
            raise NeverFits(f"{run_id}: {e}") from None

    def _pick_slice(
        self, run_id: str, profile: str, occ: GpuOccupancy, reading: ProbeReading, jobs: list[JobState]
    ) -> SliceState:
        """Choose a MIG slice of ``profile``, with the lock held and occupancy just read.

        Only an exact match: a 1g.18gb job is never put on a 2g.35gb slice. Of
        the free ones, the slice on the MIG card with the fewest free slices
        (so emptier cards stay empty, for bigger slices or to be made whole
        again), then the lowest card and slice index.
        """
        on_node = [st for st in occ.slices if st.profile == profile]
        if not on_node:
            unseen = [
                c.index
                for c in reading.cards
                if 0 <= c.index < occ.total and (c.mig_mode is None or (c.mig_mode is True and c.slices is None))
            ]
            counted: dict[str, list[int]] = {}
            for st in occ.slices:
                counted.setdefault(st.profile or "profile unknown", []).append(st.card)
            kinds = "; ".join(f"{len(cards)} of {p} ({cards_words(cards)})" for p, cards in sorted(counted.items()))
            if unseen:
                raise NoCapacity(
                    f"{run_id} asks for a {profile} MIG slice, and none can be seen: the MIG devices of "
                    f"{cards_words(unseen)} cannot be read now" + (f" (the others: {kinds})" if kinds else "")
                )
            if not occ.slices:
                split = [c.index for c in reading.cards if c.mig_mode]
                if not split:
                    raise NeverFits(
                        f"{run_id} asks for a {profile} MIG slice, but no card of this node is in "
                        "MIG mode: ask for whole cards (launch --cards N)"
                    )
                raise NeverFits(
                    f"{run_id} asks for a {profile} MIG slice, but {cards_words(split)} in MIG mode "
                    "has no MIG devices made: ask an operator to make some"
                )
            raise NeverFits(
                f"{run_id} asks for a {profile} MIG slice, and this node has none: its MIG slices "
                f"are {kinds}; ask for one of those, or ask an operator to make a {profile} instance"
            )
        allow = self.settings.allow_unverified
        if not occ.external_probe_ok and not allow:
            raise NoCapacity(
                f"use from outside the platform cannot be probed, so no slice can be checked free "
                f"({occ.explain()}); no slice is handed out until the probe works again, unless "
                "TUNEPLANE_ALLOW_UNVERIFIED=true hands out unverified ones anyway"
            )
        blind = blind_reason(reading)
        usable = [
            st for st in on_node if st.state == "free" or (allow and st.state == "unverified" and st.reason == blind)
        ]
        if not usable:
            owners = {j.key: j.owner for j in jobs if j.live}
            raise NoCapacity(
                f"no {profile} MIG slice is free: " + "; ".join(_slice_taken_words(st, owners) for st in on_node)
            )
        free_on: dict[int, int] = {}
        for st in occ.free_slices:
            free_on[st.card] = free_on.get(st.card, 0) + 1
        return min(usable, key=lambda st: (free_on.get(st.card, 0), st.card, st.index))

    async def launch(
        self,
        spec: JobSpec,
        *,
        hold_for_s: Optional[float] = None,
        admit: Optional[Callable[[list[JobState]], None]] = None,
    ) -> Launched:
        """Place and start a job: pick and create under the lock, start after it.

        A run id that already holds cards gets its job back unchanged when the
        request is the same (a retry); asked for differently, it is a Conflict
        naming the difference. A run id taken by an exited job is refused (its
        record would be overwritten).
        ``hold_for_s`` sets the expiry from the moment the cards are picked, so
        time spent waiting for the lock does not shorten a reservation.
        ``admit(jobs)`` is called under the lock with the jobs just read, before
        any card is picked: a rule that counts what people hold (a quota) is
        only sound there, and raising refuses the launch. Being called also
        says the launch is past the point of cancelling: until then it has
        picked nothing and cancelling it abandons it; from then on it picks
        cards and creates its job, and should be left to finish.
        """
        check_run_id(spec.run_id)
        if spec.slice is not None:
            check_profile(spec.slice)
            if spec.cards != 1:
                raise BadRequest(
                    f"a job gets one MIG slice, not {spec.cards}: ask for one {spec.slice} slice, or for whole cards"
                )
            spec = replace(spec, slices=())  # the allocator chooses it, below
        elif spec.cards <= 0:
            raise BadRequest(f"a job needs at least 1 card, not {spec.cards}")
        # In a thread: the process runtime checks as the caller, in a process
        # of theirs, which a hung home directory could keep for seconds.
        await asyncio.to_thread(self.runtime.check, spec)
        async with self.lock.hold() as hold:
            occ, reading, jobs = await self._read()
            if admit is not None:
                admit(jobs)
            mine = [j for j in jobs if j.key == spec.run_id]
            if live := [j for j in mine if j.live]:
                if live[0].status == "created":
                    raise Conflict(
                        f"{spec.run_id} is created but not started: another launch of it is "
                        "starting it now, or its launcher died. If it stays created, stop and "
                        f"reclaim it (tpnode-tui stop {spec.run_id}; tpnode-tui reclaim "
                        f"{spec.run_id}) before launching it again"
                    )
                expires_at = time.time() + hold_for_s if hold_for_s is not None else spec.expires_at
                if differences := request_differences(replace(spec, expires_at=expires_at), live[0]):
                    raise Conflict(
                        f"run id {spec.run_id} is taken by a {live[0].status} {live[0].kind} asked for "
                        f"differently: {'; '.join(differences)}. Stop it first (tpnode-tui stop "
                        f"{spec.run_id}) or choose another run id"
                    )
                return Launched(tuple(live[0].gpus), live[0], existing=True, slices=live[0].slices)
            if mine:
                raise Conflict(
                    f"run id {spec.run_id} belongs to an exited job that has not been "
                    f"reclaimed; reclaim it (tpnode-tui reclaim {spec.run_id}) or choose another"
                )
            if spec.slice is not None:
                chosen = self._pick_slice(spec.run_id, spec.slice, occ, reading, jobs)
                assert chosen.uuid is not None  # a slice without one is never free
                gpus: list[int] = []
                spec = replace(spec, slices=(SliceRef(chosen.card, chosen.uuid, chosen.profile or spec.slice),))
            else:
                gpus = self._pick(spec.run_id, spec.cards, occ, reading, spec.placement)
            if hold_for_s is not None:
                spec = replace(spec, expires_at=time.time() + hold_for_s)
            created = await self.runtime.create(replace(spec, fence=hold.fence), gpus)
        await self._check_fence(created, hold.fence, hold.lost())
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

    async def _check_fence(self, created: JobState, fence: int, lost: bool) -> None:
        """Make sure no other live job sits on our cards before ours starts.

        Two jobs can only meet on a card if the lock failed (a Redis lease
        expired while its holder stalled, a key cleared by hand). Every job
        carries the fencing number of the allocation that placed it. Meeting an
        earlier job (lower number, or placed by hand) we remove ours at once.
        Meeting a later one we give it a moment to remove itself, as it will
        when it checks; if it is still there it checked before ours existed and
        may be starting, so ours goes. Either way two jobs never start on one
        card. If the node cannot be read back, ours is removed too.
        """
        deadline = asyncio.get_running_loop().time() + FENCE_GRACE_S
        while True:
            try:
                jobs = await self.runtime.ps()
            except TpnodeError:
                await self._withdraw(created)
                raise
            rivals = [j for j in jobs if j.live and j.name != created.name and claims_overlap(j, created)]
            if not rivals:
                return
            earlier = [j for j in rivals if j.fence is None or j.fence < fence]
            if earlier or asyncio.get_running_loop().time() >= deadline:
                await self._withdraw(created)
                names = ", ".join(f"{j.run_id} ({j.holding})" for j in rivals)
                why = "the allocation lock was lost" if lost else "another allocation placed a job there"
                log.error("withdrew %s: %s meanwhile; %s", created.run_id, why, names)
                what = "cards were" if created.gpus or not created.slices else "its MIG slice was"
                raise NoCapacity(f"{what} taken meanwhile by {names} ({why}); try again")
            await asyncio.sleep(FENCE_GRACE_S / 10)

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

    async def extend(self, run_id: str, duration_s: float) -> JobState:
        """Hold a live reservation ``duration_s`` longer than it would have.

        Done under the allocation lock, so that no allocation reads the node
        while the runtime moves the expiry (the docker runtime replaces the
        holding container): the cards are never free in between.
        """
        if not duration_s > 0:
            raise BadRequest(f"extend by a positive duration, not {duration_s!r}")
        async with self.lock.hold():
            live = [j for j in await self.runtime.ps() if j.key == run_id and j.live]
            if not live:
                raise JobNotFound(f"no running reservation has run id {run_id}")
            job = live[0]
            if job.kind != "reservation" or job.expires_at is None:
                raise Conflict(f"{run_id} is a job, not a reservation: it ends when its command does")
            return await self.runtime.extend(job.name, max(job.expires_at, time.time()) + duration_s)

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
        raise JobNotFound(f"no running platform job has run id {run_id}")


def expiry_tolerance_s(duration_s: float) -> float:
    """How far a repeated reservation's expiry may lie from the existing one's
    and still be the same request: a minute, or a tenth of the duration.

    Asking again a few seconds or minutes later (a retry after a lost answer,
    a script run twice) moves the asked-for expiry by that much, while a
    different request differs by far more; a tenth scales with the length, so
    ``--for 1d`` repeated an hour later is the same and ``--for 1h`` is not ``--for 2h``.
    """
    return max(60.0, duration_s / 10)


def _image(name: Optional[str]) -> Optional[str]:
    """An image name as the engine reads it: no tag means ":latest"."""
    if not name or "@" in name or ":" in name.rsplit("/", 1)[-1]:
        return name
    return f"{name}:latest"


def request_differences(spec: JobSpec, job: JobState) -> list[str]:
    """How ``spec`` differs from what the live ``job`` with its run id was asked
    for, in plain words; empty when it is the same request.

    Compared: the kind, the card count, and for jobs the image and the command
    (a container's command as the engine reports it starts with the image's
    entrypoint, so there the asked-for command only has to end it); for
    reservations the expiry, within :func:`expiry_tolerance_s`. A reservation's
    own workload (a sleep) is the runtime's, not something anyone asked for.
    """
    found = []
    if spec.kind != job.kind:
        found.append(f"it is a {job.kind}, not a {spec.kind}")
    held = sorted({s.profile or "of a profile not recorded" for s in job.slices})
    if spec.slice is not None:
        if not job.slices:
            found.append(f"it holds {holding_words(job.gpus)}, not a {spec.slice} MIG slice")
        elif held != [spec.slice]:
            found.append(f"it holds a {', '.join(held)} MIG slice, not a {spec.slice} one")
    elif job.slices:
        found.append(f"it holds a {', '.join(held)} MIG slice, not {cards_words(spec.cards)}")
    elif spec.cards != len(job.gpus):
        found.append(f"it holds {cards_words(len(job.gpus))}, not {spec.cards}")
    if spec.kind != job.kind:
        return found
    if spec.kind == "reservation":
        if spec.expires_at is not None and job.expires_at is not None:
            now = time.time()
            if abs(spec.expires_at - job.expires_at) > expiry_tolerance_s(max(spec.expires_at - now, 0)):
                found.append(
                    f"it ends in {format_duration(round(job.expires_at - now))}, not "
                    f"{format_duration(round(spec.expires_at - now))}"
                )
        return found
    if spec.image is not None and _image(spec.image) != _image(job.image):
        found.append(f"its image is {job.image or 'none'}, not {spec.image}")
    if spec.command:
        asked, ran = spec.command, job.command
        same = ran == asked or (job.image is not None and ran[len(ran) - len(asked) :] == asked)
        if not same:
            found.append(f"its command is {show_command(ran) or 'none'}, not {show_command(asked)}")
    return found


def _note_missing_cards(job: JobState, total: int) -> JobState:
    """``job`` with a problem added when it names cards this node does not have.

    The runtime cannot know the card count, so a label naming card 99 reads
    there without complaint. Such a card holds nothing and is never offered,
    but whoever wrote it meant some real card, which may be in use unaccounted
    for: that has to be said. With no card count known nothing is claimed.
    """
    missing = sorted({i for i in (*job.gpus, *(ref.card for ref in job.slices)) if i >= total})
    if total <= 0 or not missing:
        return job
    problem = (
        f"names {cards_words(missing)}, which this node does not have (its cards are "
        f"0-{total - 1}); check the job's cards"
    )
    return replace(job, problems=job.problems + (problem,))


def example_profile(occ: GpuOccupancy) -> str:
    """The MIG profile to suggest to someone who asked for a whole card: a free
    one first, a GPU instance's own profile before a shared compute
    instance's, the most plentiful, then by name."""
    free = {s.profile for s in occ.free_slices}
    count: dict[str, int] = {}
    for s in occ.slices:
        if s.profile:
            count[s.profile] = count.get(s.profile, 0) + 1
    return min(count, key=lambda p: (p not in free, shares_gpu_instance(p), -count[p], p))


def _note_missing_slices(job: JobState, reading: ProbeReading) -> JobState:
    """``job`` with a problem added for each MIG slice it lists that the driver
    does not report (destroyed, or its card reset or whole again): it still
    holds it, and its card, until it ends, and whoever looks needs to know why.
    A card whose MIG devices cannot be listed says nothing either way."""
    problems = []
    for ref in job.slices:
        card = reading.card(ref.card)
        if card is None or card.slices is None or any(s.uuid == ref.uuid for s in card.slices):
            continue
        what = f"MIG device {ref.uuid}" + (f" ({ref.profile})" if ref.profile else "")
        where = "" if card.mig_mode else f", and card {ref.card} is not in MIG mode now"
        problems.append(
            f"holds {what} of card {ref.card}, which the driver no longer reports{where}; "
            f"stop the job (tpnode-tui stop {job.key}) if it is gone"
        )
    return replace(job, problems=job.problems + tuple(problems)) if problems else job


def _slice_taken_words(st: SliceState, owners: dict[str, str]) -> str:
    """Why a slice is not free, for a refusal: "slice 3 (1g.18gb) of card 1 is held by nb of bob"."""
    if st.state in ("job", "reservation") and st.run_id:
        owner = owners.get(st.run_id)
        return f"{st.words()} is {'reserved' if st.state == 'reservation' else 'held'} by {st.run_id}" + (
            f" of {owner}" if owner else ""
        )
    if st.state == "external":
        return f"{st.words()} is in use outside the platform ({st.reason or 'in use'})"
    return f"{st.words()} is {st.state}" + (f": {st.reason}" if st.reason else "")


def default_owner() -> str:
    for var in ("SUDO_USER", "USER", "LOGNAME"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())
