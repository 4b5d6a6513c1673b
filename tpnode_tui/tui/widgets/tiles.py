"""The card grid: one tile per physical card, updated in place every poll.

Tiles are created once per card and only their content and classes change
afterwards, so the grid does not flicker or lose the selection each second,
and a tile keeps its place on screen: operators learn "card 5 is bottom left".
What a tile says is worded in tpnode_tui/tui/wording/tiles.py.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from rich.text import Text
from textual.binding import Binding
from textual.containers import Container
from textual.events import Click, Resize
from textual.message import Message
from textual.widget import Widget

from tpnode_tui.model.views import CardView
from tpnode_tui.tui.follow.history import Recent
from tpnode_tui.tui.widgets.redraw import same
from tpnode_tui.tui.wording.sparks import spark_text, squeeze, window_words
from tpnode_tui.tui.wording.tiles import render_tile

#: content lines a tile needs to show its utilisation line too (dashboard.tcss gives
#: tiles that much room when the terminal is tall enough)
LINES_WITH_SPARK = 6

#: narrowest a tile may get before the grid drops a column
MIN_TILE_WIDTH = 28
MAX_COLUMNS = 4


def grid_columns(width: int) -> int:
    """Columns for a grid this wide: 4 on a 120-column terminal, fewer when narrow."""
    return max(1, min(MAX_COLUMNS, width // MIN_TILE_WIDTH))


def spark_line(recent: Optional[Recent], width: int) -> Text:
    """The card's utilisation over its recent past, 0-100 %, and how long that is."""
    if recent is None or recent.empty:
        return Text("")
    words = " " + window_words(recent.span).removeprefix("last ")
    bars = squeeze(recent.utilization_pct, max(0, width - len(words)))
    return spark_text(bars, 100.0) + Text(words, style="grey50")


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
