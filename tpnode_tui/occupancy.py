"""From facts to decisions: platform jobs + one probe reading -> occupancy and card states.

Pure functions, so every rule about which card counts as held can be tested
without a driver, an engine or a clock, and so the allocator and the
dashboard can never disagree about a card: both are built from these.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

from .model import CardFacts, CardView, GpuOccupancy, HolderInfo, JobState, ProbeReading


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
) -> GpuOccupancy:
    """Which cards are held, by whom, and which must not be handed out.

    - Only live jobs hold cards: an exited one is listed until reclaimed, but
      its memory went back to the driver when it ended.
    - External use is what the probe sees (a process, or memory in use) on a
      card no platform job holds.
    - An unhealthy card a job already holds is not deducted twice: it was never
      free. The card views still carry the warning.
    - A card the driver no longer reports, while it reports others, cannot be
      seen and so is never free.
    """
    by_job: dict[int, str] = {}
    for job in jobs:
        if not job.live:
            continue
        for idx in job.gpus:
            if 0 <= idx < total:
                by_job[idx] = job.key

    external: set[int] = set()
    probe_ok = True
    if check_external:
        probe_ok = reading.external_probe_ok
        external = {
            c.index
            for c in reading.cards
            if 0 <= c.index < total and c.index not in by_job and c.in_use(mem_busy_mib)
        }

    unhealthy: dict[int, str] = {}
    if check_health:
        unhealthy = {
            c.index: "; ".join(c.health)
            for c in reading.cards
            if c.health and 0 <= c.index < total and c.index not in by_job
        }
    # A card the driver did not report while it reported others (or reported
    # none, though it saw everything), or one it could learn nothing about
    # while it saw the rest (a lost GPU with health checks off), is a card
    # nobody can see: whatever else is switched off, it is never offered.
    for idx in range(total):
        if idx in by_job or idx in unhealthy:
            continue
        facts = reading.card(idx)
        if facts is None and (reading.cards or reading.external_probe_ok):
            unhealthy[idx] = f"not reported by the driver ({reading.source})"
        elif (facts is not None and reading.external_probe_ok
              and facts.memory_used_mib is None and facts.processes is None):
            unhealthy[idx] = "; ".join(facts.health) or "nothing about this card could be read"

    return GpuOccupancy(
        total=total,
        by_job=by_job,
        external=frozenset(external),
        unhealthy=unhealthy,
        external_probe_ok=probe_ok,
    )


def card_views(
    occ: GpuOccupancy,
    reading: ProbeReading,
    jobs: Sequence[JobState],
    holders: Callable[[CardFacts], tuple[HolderInfo, ...]] = lambda _c: (),
) -> tuple[CardView, ...]:
    """One view per card, in index order, in exactly one display state.

    A job's card stays "job" (or "reservation") when it is also unhealthy, and
    carries the health problem as a warning: the job is there, and its owner
    needs to know. A free card is shown as "unverified" when use from outside
    could not be probed, because "free" would be a claim nobody checked.
    """
    live_by_run = {j.key: j for j in jobs if j.live}
    claimants: dict[int, list[str]] = {}
    for job in jobs:
        if job.live:
            for idx in job.gpus:
                # One run id is one job, even while the docker runtime swaps
                # the container that holds a reservation it is extending.
                if job.key not in claimants.setdefault(idx, []):
                    claimants[idx].append(job.key)
    views = []
    for idx in range(occ.total):
        facts = reading.card(idx)
        who = holders(facts) if facts and facts.processes else ()
        health = "; ".join(facts.health) if facts and facts.health else None
        if facts is None and (reading.cards or reading.external_probe_ok):
            # Only a job's card gets here (a free one is unhealthy): the job is
            # still there, but its card can no longer be seen.
            health = f"not reported by the driver ({reading.source})"
        if idx in occ.by_job:
            run_id = occ.by_job[idx]
            holder = live_by_run.get(run_id)
            state = "reservation" if holder is not None and holder.kind == "reservation" else "job"
            warning = health
            if len(claimants[idx]) > 1:
                # The failure this product exists to prevent: never show it as one job.
                shared = f"claimed by {len(claimants[idx])} jobs at once: {', '.join(claimants[idx])}"
                warning = f"{shared}; {health}" if health else shared
            views.append(CardView(idx, state, facts, run_id, holder, who, warning=warning))
        elif idx in occ.unhealthy:
            views.append(CardView(idx, "unhealthy", facts, holders=who, reason=occ.unhealthy[idx]))
        elif idx in occ.external:
            views.append(CardView(idx, "external", facts, holders=who, warning=health))
        elif not occ.external_probe_ok:
            reason = reading.problem or "use from outside the platform cannot be probed"
            views.append(
                CardView(idx, "unverified", facts, holders=who, reason=reason, warning=health)
            )
        else:
            views.append(CardView(idx, "free", facts, holders=who, warning=health))
    return tuple(views)
