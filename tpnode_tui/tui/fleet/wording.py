"""What the fleet view says: a node's row, the fleet's summary and header, a node's grid's header and banner.

Every string here came from Redis, which any node can write: names, series
and problems are escaped (``printable``) as they are worded, and every cell
is ``Text``, never markup.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from rich.cells import cell_len
from rich.text import Text

from tpnode_tui.fleet.record import (
    UP,
    FleetPicture,
    NodeRow,
    clock,
    seen_words,
    summary_words,
    unknown_now,
    unreadable_words,
)
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.badges import BADGES, symbol
from tpnode_tui.text.printable import printable
from tpnode_tui.text.render import format_duration
from tpnode_tui.tui.wording.cells import columns_that_fit, fit
from tpnode_tui.tui.wording.marks import DRAINED_TEXT

#: a card in a node's strip: its state's mark in its colour, the node grid's, and one of the fleet's own
STRIP: dict[str, tuple[str, str]] = {state: (symbol(state), colour) for state, (_, colour) in BADGES.items()}
STRIP["unknown"] = ("?", "#8a8a8a")
#: a card in a state this version does not know
OTHER = (symbol(""), "#8a8a8a")
LEGEND = ("free", "job", "reservation", "external", "unhealthy", "unverified", "drained", "unknown")
#: cards on one line of a node's strip, and lines at most: a larger node shows how many more
STRIP_WIDTH = 16
STRIP_LINES = 4
#: widest a node's name or series is drawn (they come from the nodes: any length)
NAME_WIDTH = 24
SERIES_WIDTH = 16
#: the card-memory threshold the detail pane uses for "memory in use" (the node's own is not published)
MEM_BUSY_MIB = 512

COLUMNS = (
    ("name", "NODE"),
    ("series", "SERIES"),
    ("strip", "CARDS"),
    ("free", "FREE"),
    ("window", "WINDOW"),
    ("unhealthy", "UNHEALTHY"),
    ("drained", "DRAINED"),
    ("intruders", "INTRUDED"),
    ("seen", "LAST SEEN"),
)


#: the columns left out, in this order, while the table is too narrow for all of them
#: whole (80 columns): a node's strip marks its unhealthy and drained cards too
LEFT_OUT_FIRST = ("series", "window", "drained", "unhealthy")


def columns_shown(rows: Iterable[Sequence[Text]], width: int, padding: int) -> tuple[str, ...]:
    """The keys of the columns a table ``width`` cells wide shows, each whole."""
    widths = {key: len(label) for key, label in COLUMNS}
    for cells in rows:
        for (key, _label), cell in zip(COLUMNS, cells):
            widths[key] = max(widths[key], max(cell_len(line) for line in cell.plain.split("\n")))
    return columns_that_fit(widths, [key for key, _label in COLUMNS], LEFT_OUT_FIRST, width, padding)


def strip(node: NodeRow) -> Text:
    """One cell per card, in index order, 16 to a line (card 0 top left)."""
    out = Text()
    shown = node.cards[: STRIP_WIDTH * STRIP_LINES]
    for n, card in enumerate(shown):
        if n and n % STRIP_WIDTH == 0:
            out.append("\n")
        glyph, colour = STRIP.get(card.state, OTHER)
        out.append(glyph, style=colour)
    if len(node.cards) > len(shown):
        out.append(f" +{len(node.cards) - len(shown)}", style="grey62")
    if not node.cards:
        out.append("no cards known", style="grey62")
    return out


def seen_text(node: NodeRow, now: float) -> Text:
    words = seen_words(node, now)
    if node.last_seen is None or node.status == UP:
        return Text(words, style="grey62")
    return Text(words, style="bold #ffb300" if node.status == "stale" else "bold #ef5350")


def _count(value: Optional[int], alarm: str = "") -> Text:
    if value is None:
        return Text("?", style="grey62")
    return Text(str(value), style=alarm if value and alarm else "")


def row_cells(node: NodeRow, now: float) -> tuple[Text, ...]:
    name_style = "bold" if node.status == UP else "bold #ef5350"
    free = (
        Text(f"{node.free}/{node.total}", style="bold #66bb6a" if node.free else "")
        if node.known
        else Text(f"?/{node.total}", style="grey62")
    )
    return (
        Text(fit(printable(node.name), NAME_WIDTH), style=name_style),
        Text(fit(printable(node.series), SERIES_WIDTH) or "-", style="grey62"),
        strip(node),
        free,
        _count(node.largest_free_window),
        _count(node.count("unhealthy"), "bold #ef5350"),
        _count(node.count("drained"), DRAINED_TEXT),
        _count(node.intruder_cards, "bold #ffb300"),
        seen_text(node, now),
    )


def legend() -> Text:
    out = Text()
    for state in LEGEND:
        glyph, colour = STRIP[state]
        out.append(glyph, style=colour)
        out.append(f" {state}  ", style="grey62")
    return out


def summary(fleet: Optional[FleetPicture], error: Optional[str], since: Optional[float]) -> Text:
    if error is not None:
        head, said = unreadable_words(printable(error), since, fleet)
        out = Text(head, style="bold #ef5350")
        out.append(printable(said), style="grey62")
        return out
    if fleet is None:
        return Text("reading the fleet…", style="grey62")
    out = Text(printable(summary_words(fleet)), style="bold")
    for problem in fleet.problems:
        out.append(f"\n{printable(problem)}", style="#ffb300")
    return out


def stale_row_cells(node: NodeRow, now: float) -> tuple[Text, ...]:
    """The row while nothing can be read now: every card unknown, none free."""
    return row_cells(unknown_now(node), now)[:-1] + (Text("unknown now", style="grey62"),)


def title(where: str) -> Text:
    """The header's start: the view's name, and what it shows (the Redis, or a node)."""
    head = Text()
    head.append(" tpnode-tui fleet ", style="bold white on #1e63c4")
    head.append(f" {printable(where)} ", style="bold")
    return head


def fleet_header(
    safe_url: str,
    fleet: Optional[FleetPicture],
    error: Optional[str],
    stale_since: Optional[float],
    now: float,
    filtered: Optional[tuple[str, int]] = None,
) -> Text:
    """Where the fleet is read from, how fresh the reading is, and the filter with
    how many nodes it shows (``filtered``: the filter's text and that count)."""
    head = title(safe_url)
    if error is not None:
        head.append(f" STALE since {clock(stale_since or 0)} ", style="bold white on #c62828")
    elif fleet is not None:
        age = now - fleet.read_at
        head.append("read just now" if age < 1 else f"read {format_duration(age)} ago", style="grey62")
    if filtered is not None:
        words, shown = filtered
        head.append(f" │ filter: {words!r} ({shown} shown)", style="bold #4fc3f7")
    head.append(" │ enter: a node's dashboard · g: its cards", style="grey62")
    return head


def node_header(name: str, node: Optional[NodeRow], snap: Optional[NodeSnapshot], now: float) -> Text:
    """A node's grid's header: its name, and what its last publication said and when it was read."""
    head = title(name)
    head.append("read-only, from its last publication", style="grey62")
    if snap is not None:
        head.append(f" │ {snap.probe.model_name or 'unknown cards'} · {snap.host}")
        taken = node.taken_at if node is not None and node.taken_at is not None else snap.taken_at
        head.append(f" │ read {format_duration(now - taken)} ago", style="grey62")
    return head


def node_down(node: Optional[NodeRow]) -> Optional[str]:
    """Why a node's grid is not its cards now (None while the node is up)."""
    if node is None:
        return "it no longer publishes to the fleet"
    return None if node.status == UP else node.problem


def node_banner(node: Optional[NodeRow], problem: str, now: float) -> Text:
    """What the banner over a node's grid says while the node is down: why, and that nothing on it counts as free."""
    what = seen_text(node, now).plain if node is not None else "gone"
    return Text(
        f"{what}: {printable(problem)}.\nIts cards are unknown now; shown as the last "
        "publication said, marked ?; none counts as free."
    )
