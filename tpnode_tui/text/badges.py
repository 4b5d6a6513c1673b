"""Each card's and slice's state as every picture of the node marks it: its badge's word and colour, and what it means.

One table for the dashboard (its tiles, detail pane, help and the fleet's
strips; dashboard.tcss matches it) and the web page, so a state reads and
looks the same wherever it is shown.
"""

from __future__ import annotations

#: state -> (badge text, badge colour). The colours match the legend in the help screen.
BADGES: dict[str, tuple[str, str]] = {
    "free": ("FREE", "#2e7d32"),
    "job": ("JOB", "#1e63c4"),
    "reservation": ("RESERVED", "#9c27b0"),
    "external": ("EXTERNAL", "#e08600"),
    "unhealthy": ("UNHEALTHY", "#c62828"),
    "unverified": ("UNVERIFIED", "#6b6b6b"),
    "drained": ("DRAINED", "#00838f"),
    # a card split into MIG slices: each slice has one of the states above, or "shared"
    "mig": ("MIG", "#5c6bc0"),
    "shared": ("SHARED", "#8d6e63"),
}
#: a card whose state is not known now (the node not read lately): it was something, and may not be now
STALE_BADGE = ("?", "#4a4a4a")

#: state -> a mark of one cell, beside its word or where a state is shown without
#: it (the fleet's strips, a MIG card's slices on its tile): its shape says the
#: state as well as its colour does, so free and drained (both greenish) and every
#: pair are told apart without colour too
SYMBOLS: dict[str, str] = {
    "free": "○",
    "job": "●",
    "reservation": "◆",
    "external": "▲",
    "unhealthy": "✕",
    "unverified": "◌",
    "drained": "⊘",
    "mig": "▦",
    "shared": "◐",
}

#: each state in a few words, for the detail pane and the page's legend
STATE_MEANING = {
    "free": "nothing holds it",
    "job": "held by a platform job",
    "reservation": "held by a reservation",
    "external": "in use by something the platform did not start",
    "unhealthy": "must not be handed out",
    "unverified": "free as far as the platform knows, but use from outside cannot be probed",
    "drained": "taken out of service until it is put back",
    "mig": "split into MIG slices: each is handed out on its own (below)",
    "shared": "its GPU instance's memory is in use through a sibling compute instance",
}


def badge(state: str) -> tuple[str, str]:
    """A state's (badge text, colour); one this version does not know is named as it came, in grey."""
    return BADGES.get(state, (state.upper(), "grey30"))


def symbol(state: str) -> str:
    """A state's one-cell mark; one this version does not know is a dot."""
    return SYMBOLS.get(state, "·")
