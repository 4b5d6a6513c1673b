"""How a state is marked everywhere the dashboard shows one: its badge, and the colours of what needs attention.

One table, so a card's colour on its tile, in the detail pane, in the help's
legend and in the fleet's strips is the same (dashboard.tcss matches it).
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
STALE_BADGE = ("?", "#4a4a4a")

#: state -> a mark of one cell, where a state is shown without its word (the fleet's
#: strips, a MIG card's slices on its tile): its shape says the state as well as its
#: colour does, so free and drained (both greenish) and every pair are told apart
#: without colour too
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

#: text that must be dealt with: an unhealthy card, someone else's process on a held card
ERROR = "#ef5350"
#: text that needs attention: a problem on a card that keeps its state
WARNING = "#ffb300"
#: text about a drain, in the drained badge's colour made readable on a dark background
DRAINED_TEXT = "#4dd0e1"


def badge(state: str) -> tuple[str, str]:
    """A state's (badge text, colour); one this version does not know is named as it came, in grey."""
    return BADGES.get(state, (state.upper(), "grey30"))


def symbol(state: str) -> str:
    """A state's one-cell mark; one this version does not know is a dot."""
    return SYMBOLS.get(state, "·")
