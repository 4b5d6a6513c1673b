"""Each card and MIG slice as every client shows it: one display state, its reason and its warnings.

Built from the occupancy the allocator decided on (:mod:`tpnode_tui.core.cards`),
so the CLI, the dashboard and a refusal can never disagree about a card. The
display state is decided first (:func:`display_state`), then what is said
about the card is worded for that state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Mapping, Optional, Sequence

from tpnode_tui.core.slices import blind_reason, slice_claims
from tpnode_tui.model.facts import CardFacts, ProbeReading, SliceFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.states import CardStateName
from tpnode_tui.model.views import INTRUDER, CardView, Drain, HolderInfo, SliceView
from tpnode_tui.text.render import intruder_words

#: who is on a card (the card's facts -> its processes, each told apart)
CardHolders = Callable[[CardFacts], tuple[HolderInfo, ...]]
#: who is on a slice (card index, the slice's facts -> its processes)
SliceHolders = Callable[[int, SliceFacts], tuple[HolderInfo, ...]]


def card_views(
    occ: GpuOccupancy,
    reading: ProbeReading,
    jobs: Sequence[JobState],
    holders: CardHolders = lambda _c: (),
    drains: Mapping[int, Drain] = {},
    slice_holders: SliceHolders = lambda _c, _s: (),
) -> tuple[CardView, ...]:
    """One view per card, in index order, in exactly one display state.

    A job's card stays "job" (or "reservation") when it is also unhealthy,
    drained or used by an intruder, and carries each as a warning: the job is
    there, and its owner needs to know. A drained card nobody holds is
    "drained", whatever else is true of it (its health problem is its
    warning). A free card is shown as "unverified" when use from outside
    could not be probed, because "free" would be a claim nobody checked.

    A card not handed out whole because of MIG is "mig", its reason saying
    why ("split into 5 MIG slices: see them"); every card with MIG devices
    has one view per slice, each in the state
    :func:`~tpnode_tui.core.slices.slice_states` gave it, with its processes
    told apart against the slice's holder.
    """
    views = _Views(occ, reading, jobs, holders, drains, slice_holders)
    return tuple(views.card(idx) for idx in range(occ.total))


def display_state(occ: GpuOccupancy, idx: int, live: Mapping[str, JobState]) -> CardStateName:
    """Card ``idx``'s one display state: its holder's kind ("job" or
    "reservation"), else the first of drained, unhealthy, mig and external it
    is in, else "free", or "unverified" while use from outside cannot be probed."""
    if idx in occ.by_job:
        holder = live.get(occ.by_job[idx])
        return "reservation" if holder is not None and holder.kind == "reservation" else "job"
    if idx in occ.drained:
        return "drained"
    if idx in occ.unhealthy:
        return "unhealthy"
    if idx in occ.mig:
        return "mig"
    if idx in occ.external:
        return "external"
    return "free" if occ.external_probe_ok else "unverified"


def _claimants(jobs: Iterable[JobState]) -> dict[int, list[str]]:
    """Card index -> the run ids of every live job that lists it."""
    claimants: dict[int, list[str]] = {}
    for job in jobs:
        if job.live:
            for idx in job.gpus:
                # One run id is one job, even while the docker runtime swaps
                # the container that holds a reservation it is extending.
                if job.key not in claimants.setdefault(idx, []):
                    claimants[idx].append(job.key)
    return claimants


def _vanished(live: Iterable[JobState], reading: ProbeReading) -> dict[int, list[str]]:
    """Card index -> what each live job's slice the driver no longer reports on it
    (while it can list that card's MIG devices) is, in plain words."""
    vanished: dict[int, list[str]] = {}
    for job in live:
        for ref in job.slices:
            facts = reading.card(ref.card)
            if facts is None or facts.slices is None or ref.uuid in {x.uuid for x in facts.slices if x.uuid}:
                continue
            where = "" if facts.mig_mode else f" (card {ref.card} is not in MIG mode)"
            vanished.setdefault(ref.card, []).append(
                f"{job.key} holds MIG device {ref.uuid}{f' ({ref.profile})' if ref.profile else ''}, "
                f"which the driver no longer reports{where}"
            )
    return vanished


class _Views:
    """What every card's view is built from, read once for all the cards."""

    def __init__(
        self,
        occ: GpuOccupancy,
        reading: ProbeReading,
        jobs: Sequence[JobState],
        holders: CardHolders,
        drains: Mapping[int, Drain],
        slice_holders: SliceHolders,
    ) -> None:
        self.occ = occ
        self.reading = reading
        self.holders = holders
        self.drains = drains
        self.slice_holders = slice_holders
        self.live = {j.key: j for j in jobs if j.live}
        self.claims = slice_claims(self.live.values())
        self.claimants = _claimants(jobs)
        self.vanished = _vanished(self.live.values(), reading)
        self.states = {(st.card, st.index): st for st in occ.slices}

    def card(self, idx: int) -> CardView:
        facts = self.reading.card(idx)
        state = display_state(self.occ, idx, self.live)
        held = state in ("job", "reservation")
        run_id = self.occ.by_job[idx] if held else None
        view = CardView(
            idx,
            state,
            facts,
            run_id,
            self.live.get(run_id) if run_id is not None else None,
            holders=self.holders(facts) if facts and facts.processes else (),
            reason=self._reason(state, idx),
            drain=self.drains.get(idx) if held or state == "drained" else None,
            slices=self.slices(idx, facts),
        )
        return replace(view, warning=self._warning(view))

    def _reason(self, state: str, idx: int) -> Optional[str]:
        """Why a card is drained, unhealthy, not whole or unverified."""
        if state == "drained":
            return self.occ.drained[idx]
        if state == "unhealthy":
            return self.occ.unhealthy[idx]
        if state == "mig":
            return self.occ.mig[idx]
        return blind_reason(self.reading) if state == "unverified" else None

    def _warning(self, view: CardView) -> Optional[str]:
        """What is wrong on a card that keeps its state, in plain words."""
        idx, facts = view.index, view.facts
        health = "; ".join(facts.health) if facts and facts.health else None
        if facts is None and (self.reading.cards or self.reading.external_probe_ok):
            # Only a job's or a drained card gets here (a free one is unhealthy):
            # it is still held or drained, but it can no longer be seen.
            health = f"not reported by the driver ({self.reading.source})"
        gone = self.vanished.get(idx, [])
        said = [health] if health else []
        if view.state in ("job", "reservation"):
            notes = self._on_held(view) + gone
            if view.drain is not None:
                notes.append(f"drained: {view.drain.reason} (it is not handed out again when {view.run_id} ends)")
            notes += said
        elif view.state == "drained":
            notes = gone + said
        elif view.state == "unhealthy":
            notes = gone
        elif view.state == "mig":
            notes = [v.warning for v in view.slices if v.warning] + gone + said
        else:
            return health
        return "; ".join(notes) or None

    def _on_held(self, view: CardView) -> list[str]:
        """The intruders on a held card, and any other job claiming it."""
        run_id = view.run_id or ""
        notes = [intruder_words(h, view.index, view.job, run_id) for h in view.holders if h.belongs == INTRUDER]
        claimants = self.claimants.get(view.index, [])
        if len(claimants) > 1:
            # The failure this product exists to prevent: never show it as one job.
            notes.append(f"claimed by {len(claimants)} jobs at once: {', '.join(claimants)}")
        return notes

    def slices(self, idx: int, facts: Optional[CardFacts]) -> tuple[SliceView, ...]:
        """The card's slices as the occupancy decided on them, each with its processes and warnings."""
        out = []
        for sf in (facts.slices or ()) if facts is not None else ():
            st = self.states.get((idx, sf.index))
            if st is None:
                continue
            job = self.live.get(st.run_id) if st.run_id else None
            hs = self.slice_holders(idx, sf) if sf.processes else ()
            notes = [intruder_words(h, idx, job, st.run_id or "", on=sf) for h in hs if h.belongs == INTRUDER]
            runs = self.claims.get((idx, sf.uuid), []) if sf.uuid else []
            if len(runs) > 1:
                notes.append(f"{st.words()} is claimed by {len(runs)} jobs at once: {', '.join(runs)}")
            out.append(SliceView(idx, sf, st.state, st.run_id, job, hs, st.reason, "; ".join(notes) or None))
        return tuple(out)
