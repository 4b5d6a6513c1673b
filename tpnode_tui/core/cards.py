"""From facts to decisions: platform jobs + one probe reading -> which cards are held, and why.

Pure functions, so every rule about which card counts as held can be tested
without a driver, an engine or a clock, and so the allocator and the
dashboard can never disagree about a card: both are built from these.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Optional, Sequence

from tpnode_tui.core.slices import slice_states
from tpnode_tui.model.facts import CardFacts, ProbeReading
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.occupancy import MIG_SPLIT, GpuOccupancy
from tpnode_tui.model.views import Drain


def card_count(configured: int, seen: Optional[int], reading: ProbeReading) -> int:
    """How many cards the node has: a configured count wins (probing can fail
    inside a container); otherwise the most of what a probe found before
    (``seen``) and what this reading found. A reading that lost a card, or
    found none, never lowers it: the card stays, shown as not reported."""
    return configured or max(seen or 0, reading.count or 0)


def compute_occupancy(
    total: int,
    jobs: Iterable[JobState],
    reading: ProbeReading,
    *,
    mem_busy_mib: int,
    check_external: bool = True,
    check_health: bool = True,
    drains: Mapping[int, Drain] = {},
) -> GpuOccupancy:
    """Which cards are held, by whom, and which must not be handed out.

    Only live jobs hold cards; external use is what the probe sees on a card no
    job holds; a held card is never deducted twice; a card the driver stopped
    reporting, a drained card and a card in MIG mode are never free (a job
    already on one keeps it). See docs/architecture.md, sections 'One look at
    the node' and 'Cards in MIG mode, and their slices'.
    """
    live = [j for j in jobs if j.live]
    by_job = _held_cards(total, live, reading)
    external = _used_from_outside(total, reading, by_job, mem_busy_mib) if check_external else set()
    unhealthy = _unhealthy(total, reading, by_job) if check_health else {}
    unhealthy.update(_unseen(total, reading, set(by_job) | set(unhealthy)))
    drained = {idx: d.reason for idx, d in drains.items() if 0 <= idx < total and idx not in by_job}
    unhealthy = {idx: why for idx, why in unhealthy.items() if idx not in drained}
    mig = _not_whole(total, reading, set(by_job) | set(drained) | set(unhealthy), external)
    reservations = {j.key for j in live if j.kind == "reservation"}
    occ = GpuOccupancy(
        total=total,
        by_job=by_job,
        reserved=frozenset(idx for idx, key in by_job.items() if key in reservations),
        external=frozenset(external - set(drained)),
        unhealthy=unhealthy,
        external_probe_ok=reading.external_probe_ok if check_external else True,
        drained=drained,
        mig=mig,
    )
    return replace(
        occ, slices=slice_states(occ, live, reading, mem_busy_mib=mem_busy_mib, check_external=check_external)
    )


def _held_cards(total: int, live: Sequence[JobState], reading: ProbeReading) -> dict[int, str]:
    """Card index -> the run id of the live job that holds it: its own cards,
    and the card of each slice it lists that is not split now."""
    by_job: dict[int, str] = {}
    for job in live:
        for idx in job.gpus:
            if 0 <= idx < total:
                by_job[idx] = job.key
    for job in live:
        for ref in job.slices:
            facts = reading.card(ref.card)
            split = facts is not None and facts.mig_mode is True
            if 0 <= ref.card < total and ref.card not in by_job and not split:
                # Its slice cannot be on a card that is whole (or unseen) now:
                # the job still holds it, and so that card, until it ends.
                by_job[ref.card] = job.key
    return by_job


def _used_from_outside(total: int, reading: ProbeReading, by_job: Mapping[int, str], mem_busy_mib: int) -> set[int]:
    """The whole cards no job holds that the probe sees in use."""
    # A card in MIG mode is in use slice by slice, never as a whole: its own
    # memory used counts what MIG sets aside, and each slice says its own.
    return {
        c.index
        for c in reading.cards
        if 0 <= c.index < total and c.index not in by_job and c.mig_mode is not True and c.in_use(mem_busy_mib)
    }


def _unhealthy(total: int, reading: ProbeReading, by_job: Mapping[int, str]) -> dict[int, str]:
    """The cards no job holds whose driver reports a health problem, and what it says."""
    return {
        c.index: "; ".join(c.health)
        for c in reading.cards
        if c.health and 0 <= c.index < total and c.index not in by_job
    }


def _unseen(total: int, reading: ProbeReading, known: set[int]) -> dict[int, str]:
    """The cards (not in ``known``) nobody can see, and why.

    A card the driver did not report while it reported others (or reported
    none, though it saw everything), or one it could learn nothing about
    while it saw the rest (a lost GPU with health checks off), is a card
    nobody can see: whatever else is switched off, it is never offered.
    """
    unseen: dict[int, str] = {}
    for idx in range(total):
        if idx in known:
            continue
        facts = reading.card(idx)
        if facts is None and (reading.cards or reading.external_probe_ok):
            unseen[idx] = f"not reported by the driver ({reading.source})"
        elif (
            facts is not None
            and reading.external_probe_ok
            and facts.memory_used_mib is None
            and facts.processes is None
        ):
            unseen[idx] = "; ".join(facts.health) or "nothing about this card could be read"
    return unseen


def _not_whole(total: int, reading: ProbeReading, decided: set[int], external: set[int]) -> dict[int, str]:
    """The cards not handed out whole because of MIG (none already held, drained
    or unhealthy, nor whole and used from outside), and why."""
    mig: dict[int, str] = {}
    for c in reading.cards:
        if not 0 <= c.index < total or c.index in decided:
            continue
        if c.mig_mode is True or c.index not in external:
            why = mig_words(c)
            if why is not None:
                mig[c.index] = why
    return mig


def mig_words(card: CardFacts) -> Optional[str]:
    """Why ``card`` is not handed out whole because of MIG, in plain words; None when it may be."""
    if card.mig_mode is None:
        return (
            "its MIG mode cannot be read, so whether it is whole or split into MIG slices is "
            "unknown: neither it nor a slice of it is handed out"
        )
    if card.mig_mode is False:
        if card.mig_pending:
            return (
                "MIG mode is pending: it is split into MIG slices at its next reset, and not handed out whole meanwhile"
            )
        return None
    then = "; whole again at its next reset" if card.mig_pending is False else ""
    if card.slices is None:
        return f"in MIG mode, and its MIG devices cannot be listed: none is handed out{then}"
    if not card.slices:
        return (
            "in MIG mode with no MIG devices made: nothing to hand out until an operator makes some "
            f"(nvidia-smi mig -cgi PROFILES -C) or turns MIG off{then}"
        )
    n = len(card.slices)
    return f"{MIG_SPLIT} {n} MIG slice{'s' if n != 1 else ''}: see them{then}"
