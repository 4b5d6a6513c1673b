"""From facts to decisions: platform jobs + one probe reading -> occupancy and card states.

Pure functions, so every rule about which card counts as held can be tested
without a driver, an engine or a clock, and so the allocator and the
dashboard can never disagree about a card: both are built from these.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Optional, Sequence

from tpnode_tui.model.facts import CardFacts, ProbeReading, SliceFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.occupancy import MIG_SPLIT, GpuOccupancy, SliceState
from tpnode_tui.model.views import INTRUDER, CardView, Drain, HolderInfo, SliceView
from tpnode_tui.text.render import clock_time, format_mib

#: A compute instance's profile ("1c.3g.71gb"): one of several that share a GPU instance.
_COMPUTE_INSTANCE = re.compile(r"[0-9]+c\.")


def shares_gpu_instance(profile: Optional[str]) -> bool:
    """Whether ``profile`` names a compute instance that shares its GPU instance
    (and memory) with others ("1c.3g.71gb"), not a GPU instance of its own ("1g.18gb")."""
    return bool(profile and _COMPUTE_INSTANCE.match(profile))


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
    - A card in MIG mode, or whose MIG mode changes at its next reset or cannot
      be read, is never handed out whole (``mig``); its slices are judged one
      by one (:func:`slice_states`). A live job's slice on a card that is no
      longer in MIG mode, or no longer reported, holds that card.
    """
    live = [j for j in jobs if j.live]
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

    external: set[int] = set()
    probe_ok = True
    if check_external:
        probe_ok = reading.external_probe_ok
        # A card in MIG mode is in use slice by slice, never as a whole: its own
        # memory used counts what MIG sets aside, and each slice says its own.
        external = {
            c.index
            for c in reading.cards
            if 0 <= c.index < total and c.index not in by_job and c.mig_mode is not True and c.in_use(mem_busy_mib)
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
        elif (
            facts is not None
            and reading.external_probe_ok
            and facts.memory_used_mib is None
            and facts.processes is None
        ):
            unhealthy[idx] = "; ".join(facts.health) or "nothing about this card could be read"

    drained = {idx: d.reason for idx, d in drains.items() if 0 <= idx < total and idx not in by_job}
    unhealthy = {idx: why for idx, why in unhealthy.items() if idx not in drained}
    mig: dict[int, str] = {}
    for c in reading.cards:
        idx = c.index
        if not 0 <= idx < total or idx in by_job or idx in drained or idx in unhealthy:
            continue
        if c.mig_mode is True or idx not in external:
            why = mig_words(c)
            if why is not None:
                mig[idx] = why
    occ = GpuOccupancy(
        total=total,
        by_job=by_job,
        external=frozenset(external - set(drained)),
        unhealthy=unhealthy,
        external_probe_ok=probe_ok,
        drained=drained,
        mig=mig,
    )
    return replace(
        occ, slices=slice_states(occ, live, reading, mem_busy_mib=mem_busy_mib, check_external=check_external)
    )


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


def blind_reason(reading: ProbeReading) -> str:
    """Why a free card or slice is shown unverified while use from outside cannot be probed."""
    return reading.problem or "use from outside the platform cannot be probed"


def _claims(live: Iterable[JobState]) -> dict[tuple[int, str], list[str]]:
    """(card, MIG uuid) -> the run ids of the live jobs that list that slice."""
    claims: dict[tuple[int, str], list[str]] = {}
    for job in live:
        for ref in job.slices:
            runs = claims.setdefault((ref.card, ref.uuid), [])
            if job.key not in runs:
                runs.append(job.key)
    return claims


def slice_states(
    occ: GpuOccupancy,
    live: Sequence[JobState],
    reading: ProbeReading,
    *,
    mem_busy_mib: int,
    check_external: bool = True,
) -> tuple[SliceState, ...]:
    """Each MIG slice the driver reports, in exactly one state.

    A slice on a card held whole, drained or unhealthy shares its card's state.
    On a card in MIG mode, in this order:

    - job or reservation: a live platform job lists its uuid;
    - unhealthy: the driver gave it no uuid (no job could be pointed at it),
      or nothing about it could be read while the rest could;
    - external: a process on it, or its memory in use that no sibling explains;
    - shared: a compute instance whose GPU instance (and so memory) it shares
      with a slice held or in use, named in the reason; a compute instance
      whose GPU instance cannot be told is unverified instead;
    - unverified: use from outside cannot be probed; or the card has a
      process the driver put on no slice, or a live job's slice the driver no
      longer reports (either may be on this one);
    - free.
    """
    kinds = {j.key: j.kind for j in live}
    claims = _claims(live)
    out: list[SliceState] = []
    for card in reading.cards:
        idx = card.index
        if not 0 <= idx < occ.total or not card.slices:
            continue
        if idx in occ.by_job or idx in occ.drained or idx in occ.unhealthy:
            out.extend(_card_wide(card, occ, kinds, claims))
            continue
        out.extend(_on_mig_card(card, occ, reading, kinds, claims, live, mem_busy_mib, check_external))
    return tuple(out)


def _held(
    card: int, s: SliceFacts, kinds: Mapping[str, str], claims: Mapping[tuple[int, str], list[str]]
) -> Optional[SliceState]:
    runs = claims.get((card, s.uuid)) if s.uuid else None
    if not runs:
        return None
    kind = "reservation" if kinds.get(runs[0]) == "reservation" else "job"
    return SliceState(card, s.index, kind, s.uuid, s.profile, s.gpu_instance_id, run_id=runs[0])


def _card_wide(
    card: CardFacts, occ: GpuOccupancy, kinds: Mapping[str, str], claims: Mapping[tuple[int, str], list[str]]
) -> list[SliceState]:
    """The slices of a card held whole, drained or unhealthy: each shares its card's state
    (a slice a job lists stays that job's)."""
    idx = card.index
    out = []
    for s in card.slices or ():
        held = _held(idx, s, kinds, claims)
        if held is not None:
            out.append(held)
        elif idx in occ.by_job:
            run_id = occ.by_job[idx]
            kind = "reservation" if kinds.get(run_id) == "reservation" else "job"
            out.append(
                SliceState(
                    idx,
                    s.index,
                    kind,
                    s.uuid,
                    s.profile,
                    s.gpu_instance_id,
                    run_id=run_id,
                    reason=f"held with the whole card by {run_id}",
                )
            )
        elif idx in occ.drained:
            out.append(
                SliceState(idx, s.index, "drained", s.uuid, s.profile, s.gpu_instance_id, reason=occ.drained[idx])
            )
        else:
            out.append(
                SliceState(idx, s.index, "unhealthy", s.uuid, s.profile, s.gpu_instance_id, reason=occ.unhealthy[idx])
            )
    return out


def _use_words(s: SliceFacts) -> str:
    """What uses a slice, from the driver's words: "pid 5151 uses it", "8.8 GiB in use, no process seen"."""
    if s.processes:
        pids = ", ".join(str(p.pid) for p in s.processes[:4]) + (", ..." if len(s.processes) > 4 else "")
        return f"pid {pids} {'uses' if len(s.processes) == 1 else 'use'} it"
    return f"{format_mib(s.memory_used_mib)} in use, no process seen"


def _on_mig_card(
    card: CardFacts,
    occ: GpuOccupancy,
    reading: ProbeReading,
    kinds: Mapping[str, str],
    claims: Mapping[tuple[int, str], list[str]],
    live: Sequence[JobState],
    mem_busy_mib: int,
    check_external: bool,
) -> list[SliceState]:
    idx = card.index
    slices = card.slices or ()
    states: dict[int, SliceState] = {}
    by_gi: dict[int, list[SliceFacts]] = {}
    for s in slices:
        if s.gpu_instance_id is not None:
            by_gi.setdefault(s.gpu_instance_id, []).append(s)

    def siblings(s: SliceFacts) -> list[SliceFacts]:
        if s.gpu_instance_id is None:
            return []
        return [o for o in by_gi.get(s.gpu_instance_id, []) if o.index != s.index]

    for s in slices:
        held = _held(idx, s, kinds, claims)
        if held is not None:
            states[s.index] = held
        elif s.uuid is None:
            states[s.index] = SliceState(
                idx,
                s.index,
                "unhealthy",
                None,
                s.profile,
                s.gpu_instance_id,
                reason=f"the driver gave no uuid for MIG device {s.index}, so no job can be pointed at it",
            )
        elif reading.external_probe_ok and s.memory_used_mib is None and s.processes is None:
            states[s.index] = SliceState(
                idx,
                s.index,
                "unhealthy",
                s.uuid,
                s.profile,
                s.gpu_instance_id,
                reason=f"nothing about MIG device {s.index} could be read",
            )
        elif check_external and s.processes:
            states[s.index] = SliceState(
                idx, s.index, "external", s.uuid, s.profile, s.gpu_instance_id, reason=_use_words(s)
            )
        elif check_external and s.in_use(mem_busy_mib):
            # Compute instances of one GPU instance read its memory alike: memory
            # used by a sibling's process, or by a sibling's job, is not this one's.
            explained = any(o.processes or _held(idx, o, kinds, claims) is not None for o in siblings(s))
            if not explained:
                states[s.index] = SliceState(
                    idx, s.index, "external", s.uuid, s.profile, s.gpu_instance_id, reason=_use_words(s)
                )

    placed = {p.pid for s in slices for p in s.processes or ()}
    unplaced = [p.pid for p in card.processes or () if p.pid not in placed] if check_external else []
    reported = {s.uuid for s in slices if s.uuid}
    vanished = [(j.key, ref) for j in live for ref in j.slices if ref.card == idx and ref.uuid not in reported]
    for s in slices:
        if s.index in states:
            continue
        busy = [
            o for o in siblings(s) if o.index in states and states[o.index].state in ("job", "reservation", "external")
        ]
        reason: Optional[str] = None
        state = "free"
        if busy:
            o = states[busy[0].index]
            by = f"held by {o.run_id}" if o.run_id else f"in use ({o.reason})"
            state, reason = (
                "shared",
                (
                    f"shares GPU instance {s.gpu_instance_id}'s memory with {o.words()}, "
                    f"{by}: not handed out while it is"
                ),
            )
        elif s.gpu_instance_id is None and shares_gpu_instance(s.profile):
            state, reason = (
                "unverified",
                (
                    f"a compute instance ({s.profile}) whose GPU instance cannot be told, "
                    "so whether the slices it shares memory with are in use is unknown"
                ),
            )
        elif vanished:
            run, ref = vanished[0]
            state, reason = (
                "unverified",
                (
                    f"{run} holds MIG device {ref.uuid}{f' ({ref.profile})' if ref.profile else ''} of card {idx}, "
                    f"which the driver no longer reports: no slice of card {idx} is handed out until it is found "
                    f"again or {run} ends (tpnode-tui stop {run})"
                ),
            )
        elif unplaced:
            pids = ", ".join(map(str, unplaced[:4]))
            state, reason = (
                "unverified",
                (f"pid {pids} on card {idx} is on no MIG device the driver could tell, so it may be on this one"),
            )
        elif not occ.external_probe_ok:
            state, reason = "unverified", blind_reason(reading)
        states[s.index] = SliceState(idx, s.index, state, s.uuid, s.profile, s.gpu_instance_id, reason=reason)
    return [states[s.index] for s in slices]


def card_views(
    occ: GpuOccupancy,
    reading: ProbeReading,
    jobs: Sequence[JobState],
    holders: Callable[[CardFacts], tuple[HolderInfo, ...]] = lambda _c: (),
    drains: Mapping[int, Drain] = {},
    slice_holders: Callable[[int, SliceFacts], tuple[HolderInfo, ...]] = lambda _c, _s: (),
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
    has one view per slice, each in the state :func:`slice_states` gave it,
    with its processes told apart against the slice's holder.
    """
    live_by_run = {j.key: j for j in jobs if j.live}
    slice_claims = _claims(live_by_run.values())
    vanished: dict[int, list[str]] = {}
    for job in live_by_run.values():
        for ref in job.slices:
            facts = reading.card(ref.card)
            if (
                facts is not None
                and facts.slices is not None
                and ref.uuid not in {x.uuid for x in facts.slices if x.uuid}
            ):
                where = "" if facts.mig_mode else f" (card {ref.card} is not in MIG mode)"
                vanished.setdefault(ref.card, []).append(
                    f"{job.key} holds MIG device {ref.uuid}{f' ({ref.profile})' if ref.profile else ''}, "
                    f"which the driver no longer reports{where}"
                )
    states = {(st.card, st.index): st for st in occ.slices}

    def slice_views(idx: int, facts: Optional[CardFacts]) -> tuple[SliceView, ...]:
        out = []
        for sf in (facts.slices or ()) if facts is not None else ():
            st = states.get((idx, sf.index))
            if st is None:
                continue
            job = live_by_run.get(st.run_id) if st.run_id else None
            hs = slice_holders(idx, sf) if sf.processes else ()
            notes = [intruder_words(h, idx, job, st.run_id or "", on=sf) for h in hs if h.belongs == INTRUDER]
            runs = slice_claims.get((idx, sf.uuid), []) if sf.uuid else []
            if len(runs) > 1:
                notes.append(f"{st.words()} is claimed by {len(runs)} jobs at once: {', '.join(runs)}")
            out.append(SliceView(idx, sf, st.state, st.run_id, job, hs, st.reason, "; ".join(notes) or None))
        return tuple(out)

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
        parts = slice_views(idx, facts)
        gone = vanished.get(idx, [])
        if idx in occ.by_job:
            run_id = occ.by_job[idx]
            holder = live_by_run.get(run_id)
            state = "reservation" if holder is not None and holder.kind == "reservation" else "job"
            notes = [intruder_words(h, idx, holder, run_id) for h in who if h.belongs == INTRUDER]
            cards_claimants = claimants.get(idx, [])
            if len(cards_claimants) > 1:
                # The failure this product exists to prevent: never show it as one job.
                notes.append(f"claimed by {len(cards_claimants)} jobs at once: {', '.join(cards_claimants)}")
            notes += gone
            if drain is not None:
                notes.append(f"drained: {drain.reason} (it is not handed out again when {run_id} ends)")
            if health:
                notes.append(health)
            views.append(
                CardView(
                    idx, state, facts, run_id, holder, who, warning="; ".join(notes) or None, drain=drain, slices=parts
                )
            )
        elif idx in occ.drained:
            views.append(
                CardView(
                    idx,
                    "drained",
                    facts,
                    holders=who,
                    reason=occ.drained[idx],
                    warning="; ".join(gone + ([health] if health else [])) or None,
                    drain=drain,
                    slices=parts,
                )
            )
        elif idx in occ.unhealthy:
            views.append(
                CardView(
                    idx,
                    "unhealthy",
                    facts,
                    holders=who,
                    reason=occ.unhealthy[idx],
                    warning="; ".join(gone) or None,
                    slices=parts,
                )
            )
        elif idx in occ.mig:
            notes = [v.warning for v in parts if v.warning] + gone
            if health:
                notes.append(health)
            views.append(
                CardView(
                    idx, "mig", facts, holders=who, reason=occ.mig[idx], warning="; ".join(notes) or None, slices=parts
                )
            )
        elif idx in occ.external:
            views.append(CardView(idx, "external", facts, holders=who, warning=health, slices=parts))
        elif not occ.external_probe_ok:
            views.append(
                CardView(
                    idx, "unverified", facts, holders=who, reason=blind_reason(reading), warning=health, slices=parts
                )
            )
        else:
            views.append(CardView(idx, "free", facts, holders=who, warning=health, slices=parts))
    return tuple(views)


def intruder_words(
    holder: HolderInfo,
    card: int,
    job: Optional[JobState],
    run_id: str,
    now: Optional[float] = None,
    on: Optional[SliceFacts] = None,
) -> str:
    """ "bob (pid 4242, python train.py, 30.0 GiB) is using card 1, reserved by alice until 14:00";
    on a slice (``on``): "... is using slice 3 (1g.18gb) of card 1, held by ..."."""
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
    where = f"card {card}" if on is None else f"slice {on.index} ({on.profile or 'profile unknown'}) of card {card}"
    return f"{who} ({', '.join(what)}) is using {where}, {held}"
