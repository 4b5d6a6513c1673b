"""What is said over a node's cards, in words: how many are free, which are intruded, and the banners
(what is shown is out of date; use from outside cannot be probed).

An operator must never mistake an old reading for a current one, nor a free
count that cannot be checked for a true one; the dashboard and the web page
say both in the same words.
"""

from __future__ import annotations

from typing import Optional

from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.render import cards_words


def free_words(snap: NodeSnapshot, stale: bool) -> str:
    """ "3/8 free", unknown while stale ("?/8 free"), and said unverified while probe-blind."""
    occ = snap.occupancy
    if stale:
        return f"?/{occ.total} free"
    if not occ.external_probe_ok:
        return f"{len(occ.free)}/{occ.total} free, unverified"
    return f"{len(occ.free)}/{occ.total} free"


def intruder_summary(snap: NodeSnapshot) -> str:
    """ "1 with an intruder (card 3)": cards someone other than their holder uses ("" for none)."""
    cards = snap.intruder_cards
    if not cards:
        return ""
    return f"{len(cards)} with {'an intruder' if len(cards) == 1 else 'intruders'} ({cards_words(cards)})"


def stale_banner(read: bool, since: str, why: str, agent_gone: bool) -> str:
    """Why what is shown may be out of date (since the moment ``since`` says), and what
    is shown meanwhile: ``read``, whether anything was read before; ``agent_gone``,
    the node's agent stopped answering (rather than its polls failing)."""
    if agent_gone:
        then = (
            "Showing the last good reading, marked ?; no card counts as free"
            if read
            else "Nothing has been read yet, so no card is shown"
        )
        return (
            f"agent not answering since {since}: {why}\n"
            f"{then}, and nothing can be done until it answers; it reconnects by itself."
        )
    if not read:
        return (
            f"the node cannot be read (since {since}): {why}\n"
            "Nothing has been read yet, so no card is shown; it retries by itself."
        )
    return (
        f"stale since {since}: {why}\n"
        "Showing the last good reading, marked ?; no card counts as free until a poll "
        "succeeds again (it retries by itself)."
    )


def blind_banner(snap: Optional[NodeSnapshot], unverified_allowed: bool, compact: bool) -> Optional[str]:
    """Use from outside cannot be probed: why, and what it means for launches (None while it can);
    ``compact`` keeps the explanation to one short line."""
    if snap is None or snap.occupancy.external_probe_ok or not snap.occupancy.total:
        return None
    why = snap.probe.problem or "use from outside the platform cannot be probed"
    if compact:
        then = "handed out anyway" if unverified_allowed else "launches wait for the probe"
        explain = f"Free cards show as UNVERIFIED; {then}."
    else:
        then = (
            "they are handed out anyway (TUNEPLANE_ALLOW_UNVERIFIED)"
            if unverified_allowed
            else "launches wait until the probe works again (queued ones then start by themselves)"
        )
        explain = (
            "Cards may be in use by processes outside the platform that cannot be seen (the "
            f"free count may be too high): free cards show as UNVERIFIED, and {then}."
        )
    return f"PROBE-BLIND: {why}.\n{explain}"
