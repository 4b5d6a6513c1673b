"""Each MIG slice in exactly one state: decided from the jobs, one probe reading and its card's state.

The slices of a card held whole, drained or unhealthy share their card's
state; on a card in MIG mode each slice is judged on its own, and against the
slices it shares a GPU instance (and so memory) with. Each judgement is a
state and a reason code first, worded after (:meth:`_MigCard.words`), so what
is decided can be read apart from how it is said.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Optional, Sequence

from tpnode_tui.model.facts import CardFacts, ProbeReading, SliceFacts
from tpnode_tui.model.jobs import JobState, SliceRef
from tpnode_tui.model.occupancy import GpuOccupancy, SliceState
from tpnode_tui.model.states import SliceStateName
from tpnode_tui.text.render import format_mib

#: A compute instance's profile ("1c.3g.71gb"): one of several that share a GPU instance.
_COMPUTE_INSTANCE = re.compile(r"[0-9]+c\.")

#: (card, MIG uuid) -> the run ids of the live jobs that list that slice
Claims = Mapping[tuple[int, str], list[str]]

#: Why a slice on a card in MIG mode is not free, decided before it is worded.
#: Its own: the driver gave it no uuid; nothing about it could be read; a
#: process, or memory in use, on it.
NO_UUID, UNREADABLE, USED = "no uuid", "unreadable", "used"
#: Beside it: it shares its GPU instance with a slice held or in use; it is a
#: compute instance whose GPU instance cannot be told; a live job's slice on
#: its card is no longer reported; a process on its card is on no slice the
#: driver could tell; use from outside cannot be probed.
SHARED, INSTANCE_UNKNOWN, VANISHED, UNPLACED, BLIND = "shared", "instance unknown", "vanished", "unplaced", "blind"

#: the state each reason code puts a slice in
_STATE: dict[str, SliceStateName] = {
    NO_UUID: "unhealthy",
    UNREADABLE: "unhealthy",
    USED: "external",
    SHARED: "shared",
    INSTANCE_UNKNOWN: "unverified",
    VANISHED: "unverified",
    UNPLACED: "unverified",
    BLIND: "unverified",
}


def shares_gpu_instance(profile: Optional[str]) -> bool:
    """Whether ``profile`` names a compute instance that shares its GPU instance
    (and memory) with others ("1c.3g.71gb"), not a GPU instance of its own ("1g.18gb")."""
    return bool(profile and _COMPUTE_INSTANCE.match(profile))


def blind_reason(reading: ProbeReading) -> str:
    """Why a free card or slice is shown unverified while use from outside cannot be probed."""
    return reading.problem or "use from outside the platform cannot be probed"


def slice_claims(live: Iterable[JobState]) -> dict[tuple[int, str], list[str]]:
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

    A slice on a card held whole, drained or unhealthy shares its card's state;
    otherwise, first match wins: job or reservation, unhealthy, external, shared,
    unverified, free. The table of when each applies: see docs/architecture.md,
    section 'Cards in MIG mode, and their slices'.
    """
    kinds = {j.key: j.kind for j in live}
    claims = slice_claims(live)
    out: list[SliceState] = []
    for card in reading.cards:
        idx = card.index
        if not 0 <= idx < occ.total or not card.slices:
            continue
        if idx in occ.by_job or idx in occ.drained or idx in occ.unhealthy:
            out.extend(_card_wide(card, occ, kinds, claims))
            continue
        on = _MigCard(card, reading, kinds, claims, live, check_external=check_external, probe_ok=occ.external_probe_ok)
        out.extend(on.judge(mem_busy_mib))
    return tuple(out)


def _held(card: int, s: SliceFacts, kinds: Mapping[str, str], claims: Claims) -> Optional[SliceState]:
    """The slice as its job's or reservation's, when a live one lists it."""
    runs = claims.get((card, s.uuid)) if s.uuid else None
    if not runs:
        return None
    kind: SliceStateName = "reservation" if kinds.get(runs[0]) == "reservation" else "job"
    return SliceState(card, s.index, kind, s.uuid, s.profile, s.gpu_instance_id, run_id=runs[0])


def _card_wide(card: CardFacts, occ: GpuOccupancy, kinds: Mapping[str, str], claims: Claims) -> list[SliceState]:
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
            kind: SliceStateName = "reservation" if kinds.get(run_id) == "reservation" else "job"
            reason = f"held with the whole card by {run_id}"
            out.append(
                SliceState(idx, s.index, kind, s.uuid, s.profile, s.gpu_instance_id, run_id=run_id, reason=reason)
            )
        elif idx in occ.drained:
            out.append(_state(idx, s, "drained", occ.drained[idx]))
        else:
            out.append(_state(idx, s, "unhealthy", occ.unhealthy[idx]))
    return out


def _state(card: int, s: SliceFacts, state: SliceStateName, reason: Optional[str]) -> SliceState:
    return SliceState(card, s.index, state, s.uuid, s.profile, s.gpu_instance_id, reason=reason)


def _use_words(s: SliceFacts) -> str:
    """What uses a slice, from the driver's words: "pid 5151 uses it", "8.8 GiB in use, no process seen"."""
    if s.processes:
        pids = ", ".join(str(p.pid) for p in s.processes[:4]) + (", ..." if len(s.processes) > 4 else "")
        return f"pid {pids} {'uses' if len(s.processes) == 1 else 'use'} it"
    return f"{format_mib(s.memory_used_mib)} in use, no process seen"


def _unplaced(card: CardFacts) -> list[int]:
    """The pids on ``card`` that the driver put on none of its slices."""
    placed = {p.pid for s in card.slices or () for p in s.processes or ()}
    return [p.pid for p in card.processes or () if p.pid not in placed]


def _vanished(card: CardFacts, live: Sequence[JobState]) -> list[tuple[str, SliceRef]]:
    """(run id, slice) for each live job's slice of ``card`` that the driver no longer reports."""
    reported = {s.uuid for s in card.slices or () if s.uuid}
    return [(j.key, ref) for j in live for ref in j.slices if ref.card == card.index and ref.uuid not in reported]


class _MigCard:
    """One card in MIG mode whose slices are judged one by one: what judging a
    slice needs to know of its siblings, its card and the live jobs."""

    def __init__(
        self,
        card: CardFacts,
        reading: ProbeReading,
        kinds: Mapping[str, str],
        claims: Claims,
        live: Sequence[JobState],
        *,
        check_external: bool,
        probe_ok: bool,
    ) -> None:
        self.card = card
        self.reading = reading
        self.slices = card.slices or ()
        self.kinds = kinds
        self.claims = claims
        self.check_external = check_external
        #: whether use from outside was probed (always, when it is not checked)
        self.probe_ok = probe_ok
        self.by_gi: dict[int, list[SliceFacts]] = {}
        for s in self.slices:
            if s.gpu_instance_id is not None:
                self.by_gi.setdefault(s.gpu_instance_id, []).append(s)
        #: pids on the card that the driver put on no slice
        self.unplaced = _unplaced(card) if check_external else []
        #: the live jobs' slices of this card the driver no longer reports
        self.vanished = _vanished(card, live)
        #: the slices judged so far, by index
        self.states: dict[int, SliceState] = {}

    def judge(self, mem_busy_mib: int) -> list[SliceState]:
        """Every slice's state: first what each is on its own (held, broken,
        used), then the rest against those (shared, unverified or free)."""
        idx = self.card.index
        for s in self.slices:
            held = _held(idx, s, self.kinds, self.claims)
            if held is not None:
                self.states[s.index] = held
            elif (code := self.own_use(s, mem_busy_mib)) is not None:
                self.states[s.index] = _state(idx, s, _STATE[code], self.words(code, s))
        for s in self.slices:
            if s.index not in self.states:
                code = self.beside(s)
                state: SliceStateName = "free" if code is None else _STATE[code]
                self.states[s.index] = _state(idx, s, state, None if code is None else self.words(code, s))
        return [self.states[s.index] for s in self.slices]

    def siblings(self, s: SliceFacts) -> list[SliceFacts]:
        """The other compute instances of ``s``'s GPU instance."""
        if s.gpu_instance_id is None:
            return []
        return [o for o in self.by_gi.get(s.gpu_instance_id, []) if o.index != s.index]

    def own_use(self, s: SliceFacts, mem_busy_mib: int) -> Optional[str]:
        """Why an unheld slice is not free on its own account (NO_UUID, UNREADABLE, USED); None if nothing."""
        if s.uuid is None:
            return NO_UUID
        if self.reading.external_probe_ok and s.memory_used_mib is None and s.processes is None:
            return UNREADABLE
        if not self.check_external:
            return None
        if s.processes:
            return USED
        if s.in_use(mem_busy_mib):
            # Compute instances of one GPU instance read its memory alike: memory
            # used by a sibling's process, or by a sibling's job, is not this one's.
            explained = any(
                o.processes or _held(self.card.index, o, self.kinds, self.claims) is not None for o in self.siblings(s)
            )
            return None if explained else USED
        return None

    def busy_sibling(self, s: SliceFacts) -> Optional[SliceState]:
        """The first sibling of ``s`` that is held or in use, as judged."""
        for o in self.siblings(s):
            st = self.states.get(o.index)
            if st is not None and st.state in ("job", "reservation", "external"):
                return st
        return None

    def beside(self, s: SliceFacts) -> Optional[str]:
        """Why a slice free on its own account is not offered, from what is beside
        it (SHARED, INSTANCE_UNKNOWN, VANISHED, UNPLACED, BLIND); None when it is free."""
        if self.busy_sibling(s) is not None:
            return SHARED
        if s.gpu_instance_id is None and shares_gpu_instance(s.profile):
            return INSTANCE_UNKNOWN
        if self.vanished:
            return VANISHED
        if self.unplaced:
            return UNPLACED
        if not self.probe_ok:
            return BLIND
        return None

    def words(self, code: str, s: SliceFacts) -> str:
        """The reason ``code`` for slice ``s``, in plain words."""
        idx = self.card.index
        if code == NO_UUID:
            return f"the driver gave no uuid for MIG device {s.index}, so no job can be pointed at it"
        if code == UNREADABLE:
            return f"nothing about MIG device {s.index} could be read"
        if code == USED:
            return _use_words(s)
        if code == SHARED:
            o = self.busy_sibling(s)
            assert o is not None
            by = f"held by {o.run_id}" if o.run_id else f"in use ({o.reason})"
            return (
                f"shares GPU instance {s.gpu_instance_id}'s memory with {o.words()}, {by}: not handed out while it is"
            )
        if code == INSTANCE_UNKNOWN:
            return (
                f"a compute instance ({s.profile}) whose GPU instance cannot be told, "
                "so whether the slices it shares memory with are in use is unknown"
            )
        if code == VANISHED:
            run, ref = self.vanished[0]
            return (
                f"{run} holds MIG device {ref.uuid}{f' ({ref.profile})' if ref.profile else ''} of card {idx}, "
                f"which the driver no longer reports: no slice of card {idx} is handed out until it is found "
                f"again or {run} ends (tpnode-tui stop {run})"
            )
        if code == UNPLACED:
            pids = ", ".join(map(str, self.unplaced[:4]))
            return f"pid {pids} on card {idx} is on no MIG device the driver could tell, so it may be on this one"
        return blind_reason(self.reading)
