"""The allocator's decision for each card and MIG slice: exactly one state, and why.

Built afresh from one reading of the jobs and one of the driver
(:mod:`tpnode_tui.core.cards` and :mod:`tpnode_tui.core.slices`); a reading
that could be patched would become a second copy of the truth that slowly
drifts from the driver and the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tpnode_tui.model.states import SliceStateName
from tpnode_tui.model.words import cards_words

#: How a card split into MIG slices is said (``GpuOccupancy.mig``), the grid's
#: "MIG" meaning "split into slices: see them".
MIG_SPLIT = "split into"


@dataclass(frozen=True)
class SliceState:
    """One MIG slice as the allocator decides on it: exactly one state, and why."""

    card: int
    #: the MIG device's index on its card
    index: int
    state: SliceStateName
    uuid: Optional[str] = None
    profile: Optional[str] = None
    gpu_instance_id: Optional[int] = None
    #: the platform job holding it (held slices only)
    run_id: Optional[str] = None
    #: in plain words, why it is not free: what uses it (external), which slice it
    #: shares its memory with (shared), what is wrong (unhealthy, drained, unverified)
    reason: Optional[str] = None

    def words(self) -> str:
        """ "slice 3 (1g.18gb) of card 1"."""
        return f"slice {self.index} ({self.profile or 'profile unknown'}) of card {self.card}"


@dataclass(frozen=True)
class GpuOccupancy:
    """What is physically held at one moment, as the allocator decides on it."""

    total: int
    #: card index -> run id of the platform job that holds it
    by_job: dict[int, str] = field(default_factory=dict)
    #: which of those a reservation holds (a person's, for a while), not a job
    reserved: frozenset[int] = frozenset()
    #: cards in use by something the platform did not start
    external: frozenset[int] = frozenset()
    #: card index -> why it must not be handed out (never includes job-held cards:
    #: those were never free, so they are not deducted twice)
    unhealthy: dict[int, str] = field(default_factory=dict)
    #: False when use from outside could not be probed. Then ``external`` is empty
    #: and that does *not* mean nobody holds a card: the free count may be too high.
    external_probe_ok: bool = True
    #: card index -> why an operator or an XID took it out of service (never
    #: includes job-held cards, like ``unhealthy``; a drained card is never
    #: also listed as unhealthy or external)
    drained: dict[int, str] = field(default_factory=dict)
    #: card index -> why it is not handed out whole: it is split into MIG slices,
    #: its MIG mode changes at its next reset, or its MIG mode cannot be read
    #: (never includes job-held, drained or unhealthy cards, nor external ones
    #: that are whole)
    mig: dict[int, str] = field(default_factory=dict)
    #: every MIG slice the driver reports, in card and slice order, each in
    #: exactly one state; a job gets a free one, never a card in ``mig`` whole
    slices: tuple[SliceState, ...] = ()

    @property
    def busy(self) -> frozenset[int]:
        return (
            frozenset(self.by_job)
            | self.external
            | frozenset(self.unhealthy)
            | frozenset(self.drained)
            | frozenset(self.mig)
        )

    @property
    def free_slices(self) -> list[SliceState]:
        return [s for s in self.slices if s.state == "free"]

    @property
    def free(self) -> list[int]:
        busy = self.busy
        return [i for i in range(self.total) if i not in busy]

    def explain(self) -> str:
        """The occupancy in plain words, for refusals, the CLI and the dashboard."""
        parts = [f"{self.total} cards total, {len(self.free)} free", *self._held()]
        if self.external:
            parts.append(f"{len(self.external)} held by processes outside the platform ({cards_words(self.external)})")
        if self.unhealthy:
            # One entry per reason, not per card: a node whose driver lost every
            # card would otherwise repeat the same words for each of them.
            by_reason: dict[str, list[int]] = {}
            for i, reason in sorted(self.unhealthy.items()):
                by_reason.setdefault(reason, []).append(i)
            bad = "; ".join(f"{cards_words(cards)}: {r}" for r, cards in by_reason.items())
            parts.append(f"{len(self.unhealthy)} unhealthy ({bad})")
        if self.drained:
            parts.append(f"{len(self.drained)} drained ({cards_words(self.drained)})")
        if self.mig:
            # Cards split into slices are said in one breath with their slices;
            # any other reason (a mode pending a reset, or unknown) once per reason.
            split = sorted(i for i, why in self.mig.items() if why.startswith(MIG_SPLIT))
            if split or self.slices:
                parts.append(self._explain_slices(split))
            others: dict[str, list[int]] = {}
            for i, why in sorted(self.mig.items()):
                if i not in split:
                    others.setdefault(why, []).append(i)
            if others:
                said = "; ".join(f"{cards_words(cards)}: {why}" for why, cards in others.items())
                parts.append(f"{sum(map(len, others.values()))} not handed out whole ({said})")
        elif self.slices:
            parts.append(self._explain_slices([]))
        if not self.external_probe_ok:
            parts.append("cannot probe use from outside the platform, so the free count may be too high")
        return "; ".join(parts)

    def _held(self) -> list[str]:
        """ "2 held by platform jobs", "1 held by a reservation": what holds the held cards."""
        jobs, reserved = len(set(self.by_job) - self.reserved), len(self.reserved)
        said = []
        if jobs:
            said.append(f"{jobs} held by {'a platform job' if jobs == 1 else 'platform jobs'}")
        if reserved:
            said.append(f"{reserved} held by {'a reservation' if reserved == 1 else 'reservations'}")
        return said

    def _explain_slices(self, split: list[int]) -> str:
        """ "card 1 in MIG mode: 5 slices, 2 free (2g.35gb, 1g.18gb)": what the
        slices' own states are, each slice shows; the summary says what is free."""
        free = self.free_slices
        where = f"{cards_words(split)} in MIG mode" if split else "MIG"
        said = f"{where}: {len(self.slices)} slice{'s' if len(self.slices) != 1 else ''}, {len(free)} free"
        if free:
            by_card: dict[int, dict[str, int]] = {}
            for s in free:
                profiles = by_card.setdefault(s.card, {})
                profiles[s.profile or "profile unknown"] = profiles.get(s.profile or "profile unknown", 0) + 1
            many = len(by_card) > 1
            said += (
                " ("
                + "; ".join(
                    ", ".join(f"{p} x{n}" if n > 1 else p for p, n in profiles.items())
                    + (f" on card {c}" if many else "")
                    for c, profiles in sorted(by_card.items())
                )
                + ")"
            )
        return said
