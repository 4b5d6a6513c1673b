"""What the events pane says: the node's log, one row per entry, newest first.

Every entry quotes other people's words (process names, owners, reasons a
drain was given, the driver's text): entries arrive escaped
(tpnode_tui/tui/follow/log.py) and are drawn as ``Text``, never as markup.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from rich.table import Table
from rich.text import Text

from tpnode_tui.text.render import card_ranges, event_words
from tpnode_tui.tui.wording.cells import fit
from tpnode_tui.tui.wording.marks import DRAINED_TEXT, ERROR, PASSED_TEXT, WARNING
from tpnode_tui.tui.wording.times import clock_time

#: widest the user column is drawn (names come from anywhere)
USER_WIDTH = 12

#: how each kind of entry is coloured; an action's by its result
KIND_STYLE = {
    "xid": f"bold {ERROR}",
    "intruder": f"bold {ERROR}",
    "health": WARNING,
    "drain": f"bold {DRAINED_TEXT}",
    "undrain": DRAINED_TEXT,
    "evict": WARNING,
    "ended": "",
    "expiry": "",
}
#: a check's entry, by how it ended
CHECK_STYLE = {"passed": PASSED_TEXT, "failed": f"bold {ERROR}", "unknown": WARNING}


def _kind(entry: Mapping[str, Any]) -> tuple[str, str]:
    """What the entry is, in a word or two, and its style: an action is named
    by what was asked ("drain refused"), the rest by their kind."""
    kind = entry.get("kind")
    kind = kind if isinstance(kind, str) else "?"
    if kind == "action":
        action = entry.get("action")
        result = entry.get("result")
        name = action if isinstance(action, str) else "action"
        if isinstance(result, str) and result != "ok":
            return f"{name} {result}", "grey62"
        return name, "#4fc3f7"
    if kind in ("intruder", "health") and entry.get("state") in ("gone", "cleared"):
        return kind, "grey62"
    if kind == "check":
        return kind, CHECK_STYLE.get(str(entry.get("outcome")), WARNING)
    return kind, KIND_STYLE.get(kind, "")


def _cards(entry: Mapping[str, Any]) -> str:
    cards = entry.get("cards")
    if not isinstance(cards, list):
        return "-"
    indices = [c for c in cards if isinstance(c, int) and not isinstance(c, bool)]
    return card_ranges(indices) or "-"


def _user(entry: Mapping[str, Any]) -> str:
    user = entry.get("user")
    return fit(user, USER_WIDTH) if isinstance(user, str) and user else "-"


def _time(entry: Mapping[str, Any]) -> str:
    at = entry.get("time")
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        return clock_time(float(at))
    return "?"


def events_table(entries: Iterable[Mapping[str, Any]]) -> Table:
    """One row per entry, as given (newest first): time, kind, cards, user, what
    happened. The entries must already be escaped (``printable_view``)."""
    table = Table.grid(padding=(0, 1))
    for _ in range(4):
        table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for entry in entries:
        kind, style = _kind(entry)
        table.add_row(
            Text(_time(entry), style="grey62"),
            Text(kind, style=style),
            Text(_cards(entry)),
            Text(_user(entry), style="grey62"),
            Text(event_words(entry)),  # its cards are in their own column
        )
    return table


def events_title(card: Optional[int]) -> str:
    if card is None:
        return "The node's log, newest first: every card (f: the selected card only · e: the jobs table)"
    return f"The node's log, newest first: card {card} only (f: every card · e: the jobs table)"
