"""From facts to decisions: platform jobs + one probe reading -> occupancy and card states.

Pure functions, so every rule about which card counts as held can be tested
without a driver, an engine or a clock, and so the allocator and the
dashboard can never disagree about a card: both are built from these.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, Optional, Sequence

from .model import (
    INTRUDER,
    CardFacts,
    CardView,
    Drain,
    GpuOccupancy,
    HolderInfo,
    JobState,
    ProbeReading,
)
from .render import clock_time, format_mib


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

    - Only live jobs hold cards: an exited one is listed until reclaimed, but
      its memory went back to the driver when it ended.
    - External use is what the probe sees (a process, or memory in use) on a
      card no platform job holds.
    - An unhealthy card a job already holds is not deducted twice: it was never
      free. The card views still carry the warning.
    - A card the driver no longer reports, while it reports others, cannot be
      seen and so is never free.
    - A drained card is never free, whatever the driver says of it; a job
      already on it keeps it (the card counts as the job's until it ends).
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

    drained = {idx: d.reason for idx, d in drains.items() if 0 <= idx < total and idx not in by_job}
    return GpuOccupancy(
        total=total,
        by_job=by_job,
        external=frozenset(external - set(drained)),
        unhealthy={idx: why for idx, why in unhealthy.items() if idx not in drained},
        external_probe_ok=probe_ok,
        drained=drained,
    )


def card_views(
    occ: GpuOccupancy,
    reading: ProbeReading,
    jobs: Sequence[JobState],
    holders: Callable[[CardFacts], tuple[HolderInfo, ...]] = lambda _c: (),
    drains: Mapping[int, Drain] = {},
) -> tuple[CardView, ...]:
    """One view per card, in index order, in exactly one display state.

    A job's card stays "job" (or "reservation") when it is also unhealthy,
    drained or used by an intruder, and carries each as a warning: the job is
    there, and its owner needs to know. A drained card nobody holds is
    "drained", whatever else is true of it (its health problem is its
    warning). A free card is shown as "unverified" when use from outside
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
        drain = drains.get(idx)
        if facts is None and (reading.cards or reading.external_probe_ok):
            # Only a job's or a drained card gets here (a free one is unhealthy):
            # it is still held or drained, but it can no longer be seen.
            health = f"not reported by the driver ({reading.source})"
        if idx in occ.by_job:
            run_id = occ.by_job[idx]
            holder = live_by_run.get(run_id)
            state = "reservation" if holder is not None and holder.kind == "reservation" else "job"
            notes = [intruder_words(h, idx, holder, run_id) for h in who if h.belongs == INTRUDER]
            if len(claimants[idx]) > 1:
                # The failure this product exists to prevent: never show it as one job.
                notes.append(f"claimed by {len(claimants[idx])} jobs at once: {', '.join(claimants[idx])}")
            if drain is not None:
                notes.append(f"drained: {drain.reason} (it is not handed out again when {run_id} ends)")
            if health:
                notes.append(health)
            views.append(CardView(idx, state, facts, run_id, holder, who,
                                  warning="; ".join(notes) or None, drain=drain))
        elif idx in occ.drained:
            views.append(CardView(idx, "drained", facts, holders=who, reason=occ.drained[idx],
                                  warning=health, drain=drain))
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


def intruder_words(holder: HolderInfo, card: int, job: Optional[JobState], run_id: str,
                   now: Optional[float] = None) -> str:
    """"bob (pid 4242, python train.py, 30.0 GiB) is using card 1, reserved by alice until 14:00"."""
    who = holder.user or (f"uid {holder.uid}" if holder.uid is not None else "someone")
    what = [f"pid {holder.pid}"]
    if holder.command:
        command = holder.command if len(holder.command) <= 60 else holder.command[:57] + "..."
        what.append(command)
    if holder.container:
        name = holder.container_name or holder.container[:12]
        what.append(f"in container {name}")
    if holder.used_memory_mib is not None:
        what.append(format_mib(holder.used_memory_mib))
    owner = job.owner if job is not None and job.owner else None
    if job is not None and job.kind == "reservation":
        held = f"reserved by {owner or 'nobody recorded'}"
        if job.expires_at is not None:
            held += f" until {clock_time(job.expires_at, now if now is not None else time.time())}"
    else:
        held = f"held by {run_id}" + (f" of {owner}" if owner else "")
    return f"{who} ({', '.join(what)}) is using card {card}, {held}"
