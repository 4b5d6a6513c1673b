"""Which whole cards, or which MIG slice, a launch gets, in the numbers of its device
files too; and each refusal in plain words.

Called with the allocation lock held and the occupancy just read. A refusal
says whether waiting can help: :class:`NeverFits` when nothing that ends on
this node would place the request (more cards than it has, cards in MIG
mode, a profile it has no slice of), :class:`NoCapacity` when it may fit
later, so a queued launch waits for the one and gives up on the other.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tpnode_tui.core.placement import choose
from tpnode_tui.core.slices import blind_reason, shares_gpu_instance
from tpnode_tui.model.errors import NeverFits, NoCapacity, TpnodeError
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import DeviceGrant, JobState, SliceMinors, SliceRef
from tpnode_tui.model.occupancy import GpuOccupancy, SliceState
from tpnode_tui.text.render import cards_words


def more_than_the_node(run_id: str, count: int, total: int) -> NeverFits:
    """The refusal of a request for more cards than the node has (``total``; 0: not known)."""
    has = f"this node has {total}" if total > 0 else "no node has that many"
    return NeverFits(
        f"{run_id} needs {cards_words(count)} and {has}: no amount of waiting will place it; ask for fewer cards"
    )


def pick_cards(
    run_id: str,
    count: int,
    occ: GpuOccupancy,
    reading: ProbeReading,
    placement: Optional[str],
    *,
    allow_unverified: bool,
) -> list[int]:
    """Choose ``count`` cards: the free set that talks fastest on the reading's
    topology (as ``placement`` requires, if it does), else a consecutive run
    (see :func:`~tpnode_tui.core.placement.choose`).

    Unverified cards (use from outside cannot be probed) are handed out only
    when ``allow_unverified`` says so.
    """
    if count > occ.total and occ.total > 0:
        raise more_than_the_node(run_id, count, occ.total)
    _refuse_split_cards(run_id, count, occ, reading)
    if not occ.external_probe_ok and not allow_unverified:
        raise NoCapacity(
            f"use from outside the platform cannot be probed, so no card can be checked "
            f"free ({occ.explain()}); no card is handed out until the probe works again, "
            "unless TUNEPLANE_ALLOW_UNVERIFIED=true hands out unverified cards anyway"
        )
    try:
        return choose(occ.free, count, reading.topology, placement, unknowable=reading.topology_unknowable)
    except NoCapacity as e:
        if placement is None:
            raise NoCapacity(f"need {cards_words(count)}, but {occ.explain()}") from None
        raise NoCapacity(f"need {cards_words(count)} {placement} ({e}), but {occ.explain()}") from None
    except NeverFits as e:
        raise NeverFits(f"{run_id}: {e}") from None


def _split_cards(occ: GpuOccupancy, reading: ProbeReading) -> tuple[list[int], list[int]]:
    """The cards in MIG mode, and those split into MIG slices at their next reset."""
    cards = [c for c in reading.cards if 0 <= c.index < occ.total]
    in_mig = [c.index for c in cards if c.mig_mode is True]
    to_split = [c.index for c in cards if c.mig_mode is False and c.mig_pending is True]
    return in_mig, to_split


def _refuse_split_cards(run_id: str, count: int, occ: GpuOccupancy, reading: ProbeReading) -> None:
    """Refuse ``count`` whole cards when the cards not split into MIG slices are fewer.

    A card in MIG mode is never handed out whole, and waiting does not make it
    whole: only an operator turning MIG off does.
    """
    in_mig, to_split = _split_cards(occ, reading)
    split = len(in_mig) + len(to_split)
    if not split or count <= occ.total - split:
        return
    why = _split_words(in_mig, to_split)
    if occ.slices:
        ask = f"ask for a slice (launch --slice {example_profile(occ)})"
    else:
        ask = "ask an operator to make MIG devices, or to turn MIG off"
    if split == occ.total:
        raise NeverFits(f"{why}: {ask}")
    raise NeverFits(
        f"{run_id} needs {cards_words(count)} whole and this node has {occ.total - split} ({why}): "
        f"ask for fewer cards, or {ask}"
    )


def _split_words(in_mig: list[int], to_split: list[int]) -> str:
    """ "cards 0-1 are in MIG mode; card 3 is split into MIG slices at its next reset"."""
    why = []
    if in_mig:
        why.append(f"{cards_words(in_mig)} {'is' if len(in_mig) == 1 else 'are'} in MIG mode")
    if to_split:
        why.append(
            f"{cards_words(to_split)} {'is' if len(to_split) == 1 else 'are'} split into MIG "
            f"slices at {'its' if len(to_split) == 1 else 'their'} next reset"
        )
    return "; ".join(why)


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


def pick_slice(
    run_id: str,
    profile: str,
    occ: GpuOccupancy,
    reading: ProbeReading,
    jobs: Sequence[JobState],
    *,
    allow_unverified: bool,
) -> SliceState:
    """Choose a MIG slice of ``profile``.

    Only an exact match: a 1g.18gb job is never put on a 2g.35gb slice. Of
    the free ones, the slice on the MIG card with the fewest free slices
    (so emptier cards stay empty, for bigger slices or to be made whole
    again), then the lowest card and slice index.
    """
    on_node = [st for st in occ.slices if st.profile == profile]
    if not on_node:
        raise _no_such_slice(run_id, profile, occ, reading)
    if not occ.external_probe_ok and not allow_unverified:
        raise NoCapacity(
            f"use from outside the platform cannot be probed, so no slice can be checked free "
            f"({occ.explain()}); no slice is handed out until the probe works again, unless "
            "TUNEPLANE_ALLOW_UNVERIFIED=true hands out unverified ones anyway"
        )
    blind = blind_reason(reading)
    usable = [
        st
        for st in on_node
        if st.state == "free" or (allow_unverified and st.state == "unverified" and st.reason == blind)
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


def _no_such_slice(run_id: str, profile: str, occ: GpuOccupancy, reading: ProbeReading) -> TpnodeError:
    """Why the node shows no slice of ``profile``: cards whose MIG devices cannot
    be read now (they may be later), no card in MIG mode, none with MIG devices
    made, or only slices of other profiles (none of which waiting changes)."""
    unseen = [
        c.index
        for c in reading.cards
        if 0 <= c.index < occ.total and (c.mig_mode is None or (c.mig_mode is True and c.slices is None))
    ]
    counted: dict[str, list[int]] = {}
    for st in occ.slices:
        counted.setdefault(st.profile or "profile unknown", []).append(st.card)
    kinds = "; ".join(f"{len(cards)} of {p} ({cards_words(cards)})" for p, cards in sorted(counted.items()))
    asks = f"{run_id} asks for a {profile} MIG slice"
    if unseen:
        return NoCapacity(
            f"{asks}, and none can be seen: the MIG devices of {cards_words(unseen)} cannot be read now"
            + (f" (the others: {kinds})" if kinds else "")
        )
    if occ.slices:
        return NeverFits(
            f"{asks}, and this node has none: its MIG slices are {kinds}; "
            f"ask for one of those, or ask an operator to make a {profile} instance"
        )
    split = [c.index for c in reading.cards if c.mig_mode]
    if not split:
        return NeverFits(f"{asks}, but no card of this node is in MIG mode: ask for whole cards (launch --cards N)")
    return NeverFits(
        f"{asks}, but {cards_words(split)} in MIG mode has no MIG devices made: ask an operator to make some"
    )


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


def _slice_minors(reading: ProbeReading, ref: SliceRef) -> tuple[Optional[SliceMinors], str]:
    """A slice in device numbers, or what of them the reading lacks."""
    card = reading.card(ref.card)
    if card is None or card.minor is None:
        return None, f"card {ref.card}'s device minor"
    found = next((s for s in card.slices or () if s.uuid == ref.uuid), None)
    if found is None or found.gpu_instance_id is None or found.compute_instance_id is None:
        return None, f"the GPU and compute instance ids of {ref.words()}"
    return SliceMinors(card.minor, found.gpu_instance_id, found.compute_instance_id), ""


def device_grant(reading: ProbeReading, gpus: Sequence[int], slices: Sequence[SliceRef]) -> DeviceGrant:
    """What a launch was given, in the numbers its device fence is made of, from the
    reading its cards or slice were picked from (under the same lock, so they are
    the numbers of the cards picked, not of a later reading).

    A number the reading did not give is never guessed (a card's index is not
    always its minor, and fencing a job to another card's file would keep it
    from its own): ``unknown`` names what is missing.
    """
    minors, parts, missing = [], [], []
    for index in gpus:
        card = reading.card(index)
        if card is None or card.minor is None:
            missing.append(f"card {index}'s device minor")
        else:
            minors.append(card.minor)
    for ref in slices:
        part, lacking = _slice_minors(reading, ref)
        if part is None:
            missing.append(lacking)
        else:
            parts.append(part)
    unknown = f"the {reading.source} probe did not read {' or '.join(missing)}" if missing else ""
    return DeviceGrant(cards=tuple(minors), slices=tuple(parts), unknown=unknown)
