"""Whose each process on a card is: told apart against the job that holds where it runs.

Each process is told apart against the job that holds its card, or on a MIG
card the slice it runs on: its own processes, or someone else's (an
intruder). A process on no slice the driver could tell is told apart against
the card's holder (nobody, on a MIG card). Reads /proc for each pid, so it is
run in a thread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

from tpnode_tui.core.belonging import classify
from tpnode_tui.host.procinfo import describe
from tpnode_tui.model.facts import CardFacts, ProbeReading
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN, HolderInfo

#: which of two readings of one process a card shows: the one that needs attention
_WORSE = {INTRUDER: 0, EXTERNAL: 1, UNKNOWN: 2, HOLDER: 3}

#: card index -> the processes on it, each told apart
OnCards = dict[int, tuple[HolderInfo, ...]]
#: (card index, MIG device index) -> the processes on that slice, each told apart
OnSlices = dict[tuple[int, int], tuple[HolderInfo, ...]]


def identify(reading: ProbeReading, occ: GpuOccupancy, live: Mapping[str, JobState]) -> tuple[OnCards, OnSlices]:
    """Every process the driver lists, on each card and on each slice, told apart against its holder."""
    held = {(st.card, st.index): st.run_id for st in occ.slices}
    on_cards: OnCards = {}
    on_slices: OnSlices = {}
    for card in reading.cards:
        whole = live.get(occ.by_job.get(card.index, ""))
        seen: dict[int, HolderInfo] = {}
        for s in card.slices or ():
            if s.processes:
                job = live.get(held.get((card.index, s.index)) or "") or whole
                found = tuple(classify(describe(p), job, live.values()) for p in s.processes)
                on_slices[(card.index, s.index)] = found
                _keep_worse(seen, found)
        if card.processes:
            on_cards[card.index] = _on_card(card, seen, whole, live)
    return on_cards, on_slices


def _keep_worse(seen: dict[int, HolderInfo], found: tuple[HolderInfo, ...]) -> None:
    """A process on two slices: the card shows the worse of the two."""
    for h in found:
        if h.pid not in seen or _WORSE[h.belongs] < _WORSE[seen[h.pid].belongs]:
            seen[h.pid] = h


def _on_card(
    card: CardFacts, seen: Mapping[int, HolderInfo], whole: Optional[JobState], live: Mapping[str, JobState]
) -> tuple[HolderInfo, ...]:
    """The card's processes: as found on their slices, else against the card's holder."""
    return tuple(seen.get(p.pid) or classify(describe(p), whole, live.values()) for p in card.processes or ())


def name_on_slices(on_cards: OnCards, on_slices: OnSlices) -> OnSlices:
    """Each slice's processes with the container names and images their card's list was given."""
    named = {h.pid: (h.container_name, h.container_image) for hs in on_cards.values() for h in hs}
    return {
        k: tuple(
            replace(h, container_name=named[h.pid][0], container_image=named[h.pid][1]) if h.pid in named else h
            for h in hs
        )
        for k, hs in on_slices.items()
    }
