"""The card grid: one tile per physical card, updated in place every poll.

Tiles are created once per card and only their content and classes change
afterwards, so the grid does not flicker or lose the selection each second,
and a tile keeps its place on screen: operators learn "card 5 is bottom left".
"""
from __future__ import annotations

from typing import Optional

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.binding import Binding
from textual.containers import Container
from textual.events import Click, Resize
from textual.message import Message
from textual.widget import Widget

from ..model import CardView
from ..render import NA, card_summary, format_duration, format_mib
from .redraw import same

#: state -> (badge text, badge colour). The colours match the legend in the help screen.
BADGES: dict[str, tuple[str, str]] = {
    "free": ("FREE", "#2e7d32"),
    "job": ("JOB", "#1e63c4"),
    "reservation": ("RESERVED", "#9c27b0"),
    "external": ("EXTERNAL", "#e08600"),
    "unhealthy": ("UNHEALTHY", "#c62828"),
    "unverified": ("UNVERIFIED", "#6b6b6b"),
}
STALE_BADGE = ("?", "#4a4a4a")

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


def readings(card: CardView) -> str:
    f = card.facts
    util = f"{f.utilization_pct}%" if f and f.utilization_pct is not None else NA
    temp = f"{f.temperature_c if f and f.temperature_c is not None else NA}°C"
    power = f"{f'{f.power_w:.0f}' if f and f.power_w is not None else NA} W"
    return f"util {util}  {temp}  {power}"


def tile_note(card: CardView, now: float) -> tuple[str, str]:
    """The tile's last line and its style: what needs attention, or the job's time."""
    if card.state == "unhealthy":
        return "never handed out", "#ef5350"
    if card.warning:
        return f"! {card.warning}", "bold #ffb300"
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


def render_tile(card: CardView, width: int, now: float, stale: bool) -> Text:
    label, colour = STALE_BADGE if stale else BADGES.get(card.state, (card.state.upper(), "grey30"))
    head = Text()
    head.append(f"{card.index:<2} ", style="bold")
    head.append(f" {label} ", style=f"bold white on {colour}")

    summary = card_summary(card) or ("nothing holds it" if card.state == "free" else "")
    if stale:
        who = f"was {BADGES.get(card.state, (card.state,))[0].lower()}" + (f": {summary}" if summary else "")
        note, note_style = "unknown: the last poll failed", "grey62"
        summary_style = "grey62"
    else:
        who = summary
        note, note_style = tile_note(card, now)
        summary_style = {"free": "grey62", "unverified": "grey62", "unhealthy": "bold #ef5350"}.get(
            card.state, "bold")

    f = card.facts
    lines = [
        head,
        Text(fit(who, width), style=summary_style),
        memory_bar(f.memory_used_mib if f else None, f.memory_total_mib if f else None, width, stale),
        Text(fit(readings(card), width), style="grey62" if stale else ""),
        Text(fit(note, width), style=note_style),
    ]
    return Text("\n").join(lines)


class CardTile(Widget):
    """One card. Its state is a CSS class, so the border colour follows the state."""

    def __init__(self, card: CardView, **kwargs) -> None:
        super().__init__(id=f"card-{card.index}", classes=f"state-{card.state}", **kwargs)
        self.card = card
        self.now = 0.0
        self.stale = False
        #: the width and text last drawn: a poll that changes neither repaints nothing
        self._drawn: Optional[tuple[int, Text]] = None

    def _width(self) -> int:
        return self.content_region.width or self.size.width

    def show(self, card: CardView, now: float, stale: bool) -> None:
        if card.state != self.card.state:
            self.remove_class(f"state-{self.card.state}")
            self.add_class(f"state-{card.state}")
        self.card, self.now, self.stale = card, now, stale
        self.set_class(stale, "-stale")
        if self._drawn is None:
            self.refresh()
            return
        width, text = self._drawn
        if width != self._width() or not same(text, render_tile(card, width, now, stale)):
            self.refresh()

    def render(self) -> Text:
        width = self._width()
        text = render_tile(self.card, width, self.now, self.stale)
        self._drawn = (width, text)
        return text

    def on_click(self, event: Click) -> None:
        self.post_message(CardGrid.Picked(self.card.index))


class CardGrid(Container, can_focus=True):
    """The tiles, with the selection. Arrow keys and h/j/k move it.

    ``l`` is launch, not "right", by the lead's decision: the arrow key moves
    right, and opening a dialog by mistake is harmless.
    """

    BINDINGS = [
        Binding("left,h", "move(-1, 0)", "Move", show=False, id="move-left", tooltip="Select the card to the left"),
        Binding("right", "move(1, 0)", "Move", show=False, id="move-right", tooltip="Select the card to the right"),
        Binding("up,k", "move(0, -1)", "Move", show=False, id="move-up", tooltip="Select the card above"),
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

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tiles: list[CardTile] = []
        self.selected = 0
        self.columns = MAX_COLUMNS

    def on_resize(self, event: Resize) -> None:
        columns = grid_columns(event.size.width)
        if columns != self.columns:
            self.columns = columns
            self.styles.grid_size_columns = columns

    def show(self, cards: tuple[CardView, ...], now: float, stale: bool) -> None:
        """Update every tile in place; tiles are only built when the card count changes."""
        if len(cards) != len(self.tiles):
            self.remove_children()
            self.tiles = [CardTile(card) for card in cards]
            self.mount_all(self.tiles)
            if self.selected >= len(self.tiles):
                self.selected = 0
        for tile, card in zip(self.tiles, cards):
            tile.show(card, now, stale)
            tile.set_class(card.index == self.selected, "-selected")

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
