"""What the dashboard asks around launch, stop and reclaim, and the words it answers with.

What a form's user needs to know before asking (how much is free now, as
the last reading saw it), what a refusal for lack of room offers (the
queue, and when a queued launch would start), and what is asked before a
job is ended or its record removed, naming exactly what is touched. The node
decides and words every refusal; these only lay out what it answered. Drain,
undrain and evict have theirs in tui/wording/operators.py.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tpnode_tui.model.errors import NoCapacity
from tpnode_tui.model.jobs import JobState, wanted_words
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.render import cards_words, ended_words


def capacity_line(snap: Optional[NodeSnapshot], stale_error: Optional[str]) -> str:
    """What the form's user needs to know before asking: how much is free now.
    ``stale_error``: why what is shown may be out of date (None while it is not)."""
    if snap is None and stale_error is not None:
        return f"The node could not be read yet ({stale_error}). The node reads it afresh."
    if snap is None:
        return "The node has not been read yet."
    if stale_error is not None:
        return "Free cards are unknown: the last reading failed. The node reads it afresh."
    occ = snap.occupancy
    free = occ.free
    cards = f" ({cards_words(free)})" if free else ""
    line = f"{len(free)} of {occ.total} cards free now{cards}"
    if occ.external_probe_ok:
        return line + "."
    if snap.allow_unverified:
        return (
            line + ", unverified: use from outside cannot be probed, and they are handed "
            "out anyway (TUNEPLANE_ALLOW_UNVERIFIED)."
        )
    return (
        f"Use from outside cannot be probed, so no card can be checked free ({len(free)} of "
        f"{occ.total} look free): a launch waits until the probe works again. Queued, it "
        "then starts by itself."
    )


def free_profiles(snap: Optional[NodeSnapshot]) -> str:
    """The MIG profiles a form may offer, with how many are free now
    ("1g.18gb x2, 2g.35gb, 3g.71gb none free"); empty on a node with no slices."""
    if snap is None or not snap.occupancy.slices:
        return ""
    counts: dict[str, int] = {}
    for s in snap.occupancy.slices:
        if s.profile:
            counts.setdefault(s.profile, 0)
    for s in snap.occupancy.free_slices:
        if s.profile:
            counts[s.profile] += 1
    return ", ".join(p if n == 1 else f"{p} x{n}" if n else f"{p} none free" for p, n in sorted(counts.items()))


def waits_for_probe(snap: Optional[NodeSnapshot]) -> bool:
    """Whether launches wait because use from outside cannot be probed, as the last reading saw it."""
    return snap is not None and not snap.occupancy.external_probe_ok and not snap.allow_unverified


def starts_when(snap: Optional[NodeSnapshot], cards: int, slice: Optional[str] = None) -> str:
    """When a queued launch of ``cards`` cards (or one MIG ``slice`` of that profile) starts by itself."""
    wanted = wanted_words(cards, slice)
    if waits_for_probe(snap):
        return f"once the probe works again and {wanted} can be checked free"
    return f"as soon as {wanted} {'is' if slice or cards == 1 else 'are'} free"


def capacity_words(error: NoCapacity) -> str:
    """The node's reason without the advice an agent words for the command
    line around it ("no capacity now: ...; not waiting for cards: try again
    later"): the dashboard offers the queue instead."""
    return str(error).removeprefix("no capacity now: ").removesuffix("; not waiting for cards: try again later")


def queue_question(
    error: NoCapacity, run_id: str, cards: int, snap: Optional[NodeSnapshot], slice: Optional[str] = None
) -> tuple[str, str]:
    """(title, body) of the offer to queue a launch the node has no room for now."""
    body = (
        f"{capacity_words(error)}.\n\nQueue {run_id}? It starts by itself "
        f"{starts_when(snap, cards, slice)}, after the launches queued before it."
    )
    title = "No card can be checked free now" if waits_for_probe(snap) else "No capacity now"
    return title, body


def stop_question(job: JobState, where: str) -> str:
    """``where``: what the job was chosen by ("On the selected card 3")."""
    return (
        f"{where}: {job.run_id} ({job.kind}, owner {job.owner or 'not recorded'}, "
        f"{job.holding}).\n\n"
        "Stop it? Its processes are ended; its cards are free once they have exited."
    )


def reclaim_question(exited: Sequence[JobState]) -> str:
    lines = []
    for job in exited:
        lines.append(f"  {job.run_id}  {ended_words(job, job.status)}")
    return "Remove the records of these exited jobs? Running jobs are never touched.\n\n" + "\n".join(lines)
