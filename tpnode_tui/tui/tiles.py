"""The card grid: one tile per physical card, updated in place every poll.

Tiles are created once per card and only their content and classes change
afterwards, so the grid does not flicker or lose the selection each second,
and a tile keeps its place on screen: operators learn "card 5 is bottom left".
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.binding import Binding
from textual.containers import Container
from textual.events import Click, Resize
from textual.message import Message
from textual.widget import Widget

from tpnode_tui.model.views import CardView, Drain
from tpnode_tui.text.render import NA, card_summary, format_duration, format_mib
from tpnode_tui.tui.redraw import same
from tpnode_tui.tui.sparks import Recent, spark_text, squeeze, window_words

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

#: text that must be dealt with: an unhealthy card, someone else's process on a held card
ERROR = "#ef5350"
#: text that needs attention: a problem on a card that keeps its state
WARNING = "#ffb300"
#: text about a drain, in the drained badge's colour made readable on a dark background
DRAINED_TEXT = "#4dd0e1"

#: content lines a tile needs to show its utilisation line too (dashboard.tcss gives
#: tiles that much room when the terminal is tall enough)
LINES_WITH_SPARK = 6

#: narrowest a tile may get before the grid drops a column
MIN_TILE_WIDTH = 28
MAX_COLUMNS = 4


def grid_columns(width: int) -> int:
    """Columns for a grid this wide: 4 on a 120-column terminal, fewer when narrow."""
    return max(1, min(MAX_COLUMNS, width // MIN_TILE_WIDTH))


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells, with "…" where it was cut.

    Cells, not characters: a wide character (a CJK user or process name, an
    emoji in a command line) takes two, and a line one cell too long wraps in
    a tile, pushing its last line out, or makes the jobs table scroll sideways.
    """
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…"


def _memory(used: Optional[int], total: Optional[int]) -> str:
    if used is None and total is None:
        return f"mem {NA}"
    u, t = format_mib(used), format_mib(total)
    if used is None:
        return f"{NA} / {t}"
    if u.endswith(" GiB") and t.endswith(" GiB"):
        return f"{u[:-4]}/{t}"
    return f"{u}/{t}"


def memory_bar(used: Optional[int], total: Optional[int], width: int, dim: bool) -> Text:
    label = _memory(used, total)
    bar_width = max(0, width - len(label) - 1)
    line = Text()
    if bar_width >= 3 and used is not None and total:
        share = min(1.0, max(0.0, used / total))
        filled = round(share * bar_width)
        colour = "#4caf50" if share < 0.5 else "#fbc02d" if share < 0.9 else "#e53935"
        line.append("█" * filled, style="grey50" if dim else colour)
        line.append("░" * (bar_width - filled), style="grey35")
        line.append(" ")
    elif bar_width >= 3:
        line.append("·" * bar_width + " ", style="grey35")
    line.append(label)
    return line


def short_profile(profile: Optional[str]) -> str:
    """A MIG profile as a tile has room for it: "1g.18gb" -> "1g", "1c.3g.71gb" -> "1c.3g"."""
    if not profile:
        return "?"
    return profile.rsplit(".", 1)[0] if profile.count(".") > 1 else profile.split(".", 1)[0]


def slice_strip(card: CardView, width: int, stale: bool) -> Text:
    """A MIG card's slices on one line, each its profile after a mark in its
    state's colour: what a tile shows in place of the card's utilisation,
    which the driver does not report in MIG mode."""
    line = Text()
    for n, piece in enumerate(card.slices):
        colour = "grey50" if stale else BADGES.get(piece.state, (piece.state, "grey30"))[1]
        mark, profile = ("■" if n == 0 else " ■"), short_profile(piece.facts.profile)
        room = width - (0 if n == len(card.slices) - 1 else 2)  # what is left must take " …"
        if cell_len(line.plain) + len(mark) + cell_len(profile) > room:
            line.append(" …", style="grey62")
            break
        line.append(mark, style=colour)
        line.append(profile, style="grey62" if stale else "")
    return line


def readings(card: CardView) -> str:
    f = card.facts
    util = f"{f.utilization_pct}%" if f and f.utilization_pct is not None else NA
    temp = f"{f.temperature_c if f and f.temperature_c is not None else NA}°C"
    power = f"{f'{f.power_w:.0f}' if f and f.power_w is not None else NA} W"
    return f"util {util}  {temp}  {power}"


def short_duration(seconds: float) -> str:
    """ "45m" under an hour, else as format_duration says it ("1h05m")."""
    return f"{max(0, int(seconds)) // 60}m" if seconds < 3600 else format_duration(seconds)


def drain_note(drain: Drain, now: float) -> str:
    """ "by ana, 2h00m ago", "by XID 79, 5m00s ago" (the badge says drained)."""
    by = f"XID {drain.xid}" if drain.source == "xid" and drain.xid is not None else drain.by
    return f"by {by}, {format_duration(now - drain.at)} ago"


def tile_note(card: CardView, now: float) -> tuple[str, str]:
    """The tile's last line and its style: what needs attention, or the job's time.
    Someone else's process on a held card is in the error colour: the card's
    holder is losing memory and speed to it now."""
    if card.state == "unhealthy":
        return "never handed out", ERROR
    if card.intruders and card.warning:
        return f"! {card.warning}", f"bold {ERROR}"
    if card.warning:
        return f"! {card.warning}", f"bold {WARNING}"
    if card.state == "drained" and card.drain is not None:
        return drain_note(card.drain, now), DRAINED_TEXT
    job = card.job
    if card.state == "reservation" and job and job.expires_at:
        left = job.expires_at - now
        return ("ends in " + format_duration(left)) if left > 0 else "expired, ending", ""
    if card.state == "job" and job and job.started_at:
        return f"up {format_duration(now - job.started_at)}", ""
    if card.state == "external":
        return "outside the platform", "#ffb300"
    if card.state == "unverified":
        return "outside use not probed", "grey62"
    return "", ""


def spark_line(recent: Optional[Recent], width: int) -> Text:
    """The card's utilisation over its recent past, 0-100 %, and how long that is."""
    if recent is None or recent.empty:
        return Text("")
    words = " " + window_words(recent.span).removeprefix("last ")
    bars = squeeze(recent.utilization_pct, max(0, width - len(words)))
    return spark_text(bars, 100.0) + Text(words, style="grey50")


def render_tile(
    card: CardView,
    width: int,
    now: float,
    stale: bool,
    idle_since: Optional[float] = None,
    spark: Optional[Text] = None,
) -> Text:
    """``idle_since``: the card's reservation has not been used since then;
    ``spark``: the utilisation line, where the tile has room for it."""
    label, colour = STALE_BADGE if stale else BADGES.get(card.state, (card.state.upper(), "grey30"))
    head = Text()
    head.append(f"{card.index:<2} ", style="bold")
    head.append(f" {label} ", style=f"bold white on {colour}")
    if idle_since is not None and not stale:
        # on one line whatever the width: a wrapped head would push the tile's last line
        # (an intruder's name, say) out of its fixed height
        mark = f" idle {short_duration(now - idle_since)}"
        if len(head) + len(mark) > width:
            mark = " idle"
        if len(head) + len(mark) <= width:
            head.append(mark, style=f"bold {WARNING}")
    head.truncate(width)

    summary = card_summary(card) or ("nothing holds it" if card.state == "free" else "")
    if stale:
        who = f"was {BADGES.get(card.state, (card.state,))[0].lower()}" + (f": {summary}" if summary else "")
        # the banner says why: polls failing, or the node's agent not answering
        note, note_style = "unknown until read again", "grey62"
        summary_style = "grey62"
    else:
        who = summary
        note, note_style = tile_note(card, now)
        summary_style = {
            "free": "grey62",
            "unverified": "grey62",
            "unhealthy": f"bold {ERROR}",
            "drained": f"bold {DRAINED_TEXT}",
        }.get(card.state, "bold")

    f = card.facts
    lines = [
        head,
        Text(fit(who, width), style=summary_style),
        memory_bar(f.memory_used_mib if f else None, f.memory_total_mib if f else None, width, stale),
        slice_strip(card, width, stale)
        if card.slices
        else Text(fit(readings(card), width), style="grey62" if stale else ""),
    ]
    if spark is not None:
        lines.append(Text(spark.plain, style="grey50") if stale else spark)
    lines.append(Text(fit(note, width), style=note_style))
    return Text("\n").join(lines)


class CardTile(Widget):
    """One card. Its state is a CSS class, so the border colour follows the state."""

    def __init__(self, card: CardView, **kwargs: Any) -> None:
        super().__init__(id=f"card-{card.index}", classes=f"state-{card.state}", **kwargs)
        self.card = card
        self.now = 0.0
        self.stale = False
        self.idle_since: Optional[float] = None
        #: the card's history as last fetched
        self.recent: Optional[Recent] = None
        #: the width and text last drawn: a poll that changes neither repaints nothing
        self._drawn: Optional[tuple[int, Text]] = None
        #: the utilisation line for (history, width), drawn once per fetch and width
        self._spark: Optional[tuple[Optional[Recent], int, Text]] = None

    def _width(self) -> int:
        return self.content_region.width or self.size.width

    def _spark_line(self, width: int) -> Optional[Text]:
        """Only where the tile has a line for it (not on a short terminal)."""
        if (self.content_region.height or self.size.height) < LINES_WITH_SPARK:
            return None
        if self._spark is None or self._spark[0] is not self.recent or self._spark[1] != width:
            self._spark = (self.recent, width, spark_line(self.recent, width))
        return self._spark[2]

    def _text(self, width: int) -> Text:
        return render_tile(self.card, width, self.now, self.stale, self.idle_since, self._spark_line(width))

    def show(self, card: CardView, now: float, stale: bool, idle_since: Optional[float] = None) -> None:
        if card.state != self.card.state:
            self.remove_class(f"state-{self.card.state}")
            self.add_class(f"state-{card.state}")
        self.card, self.now, self.stale, self.idle_since = card, now, stale, idle_since
        self.set_class(stale, "-stale")
        self._redraw()

    def show_history(self, recent: Recent) -> None:
        self.recent = recent
        self._redraw()

    def _redraw(self) -> None:
        if self._drawn is None:
            self.refresh()
            return
        width, text = self._drawn
        if width != self._width() or not same(text, self._text(width)):
            self.refresh()

    def render(self) -> Text:
        width = self._width()
        text = self._text(width)
        self._drawn = (width, text)
        return text

    def on_click(self, event: Click) -> None:
        self.post_message(CardGrid.Picked(self.card.index))


class CardGrid(Container, can_focus=True):
    """The tiles, with the selection. Arrow keys, h and j move it.

    ``l`` is launch, not "right", and ``k`` is evict, not "up": the arrow
    keys move right and up, and either key opens a dialog that asks first,
    so pressing one by mistake is harmless.
    """

    BINDINGS = [
        Binding("left,h", "move(-1, 0)", "Move", show=False, id="move-left", tooltip="Select the card to the left"),
        Binding("right", "move(1, 0)", "Move", show=False, id="move-right", tooltip="Select the card to the right"),
        Binding("up", "move(0, -1)", "Move", show=False, id="move-up", tooltip="Select the card above"),
        Binding("down,j", "move(0, 1)", "Move", show=False, id="move-down", tooltip="Select the card below"),
    ]

    class Selected(Message):
        def __init__(self, grid: CardGrid, index: int) -> None:
            super().__init__()
            self.grid = grid
            self.index = index

    class Picked(Message):
        """A tile was clicked."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tiles: list[CardTile] = []
        self.selected = 0
        self.columns = MAX_COLUMNS

    def on_resize(self, event: Resize) -> None:
        columns = grid_columns(event.size.width)
        if columns != self.columns:
            self.columns = columns
            self.styles.grid_size_columns = columns

    def show(self, cards: tuple[CardView, ...], now: float, stale: bool, idle: Mapping[str, float] = {}) -> None:
        """Update every tile in place; tiles are only built when the card count
        changes. ``idle``: reservations' run ids -> unused since."""
        if len(cards) != len(self.tiles):
            self.remove_children()
            self.tiles = [CardTile(card) for card in cards]
            self.mount_all(self.tiles)
            if self.selected >= len(self.tiles):
                self.selected = 0
        for tile, card in zip(self.tiles, cards):
            since = idle.get(card.run_id) if card.state == "reservation" and card.run_id else None
            tile.show(card, now, stale, since)
            tile.set_class(card.index == self.selected, "-selected")

    def show_history(self, history: Mapping[int, Recent]) -> None:
        """Each card's utilisation line, from the node's history as last fetched."""
        for tile in self.tiles:
            if tile.card.index in history:
                tile.show_history(history[tile.card.index])

    def select(self, index: int) -> None:
        if not self.tiles:
            return
        index = max(0, min(len(self.tiles) - 1, index))
        if index != self.selected and self.selected < len(self.tiles):
            self.tiles[self.selected].remove_class("-selected")
        self.selected = index
        tile = self.tiles[index]
        tile.add_class("-selected")
        self.scroll_to_widget(tile, animate=False)
        self.post_message(self.Selected(self, index))

    def action_move(self, dx: int, dy: int) -> None:
        if not self.tiles:
            return
        target = self.selected + dx + dy * self.columns
        if 0 <= target < len(self.tiles):
            self.select(target)

    def on_card_grid_picked(self, message: Picked) -> None:
        self.focus()
        self.select(message.index)
