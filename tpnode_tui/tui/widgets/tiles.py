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
from textual.reactive import reactive, var
from textual.widget import Widget

from tpnode_tui.model.views import CardView
from tpnode_tui.tui.follow.history import Recent
from tpnode_tui.tui.wording.sparks import spark_text, squeeze, window_words
from tpnode_tui.tui.wording.tiles import moves_with_time, render_line, render_tile

#: content lines a tile needs to show its utilisation line too (dashboard.tcss gives
#: tiles that much room when the terminal is tall enough)
LINES_WITH_SPARK = 6
#: fewer content lines than this: the tile is one line (a short terminal's compact grid)
LINES_OF_A_TILE = 3

#: narrowest a tile may get before the grid drops a column; a compact one (a line)
MIN_TILE_WIDTH = 28
MIN_LINE_WIDTH = 38
MAX_COLUMNS = 4


def grid_columns(width: int, compact: bool = False) -> int:
    """Columns for a grid this wide: 4 on a 120-column terminal, fewer when narrow;
    compact (a line per card), 2 on an 80-column terminal."""
    return max(1, min(MAX_COLUMNS, width // (MIN_LINE_WIDTH if compact else MIN_TILE_WIDTH)))


def spark_line(recent: Optional[Recent], width: int) -> Text:
    """The card's utilisation over its recent past, 0-100 %, and how long that is."""
    if recent is None or recent.empty:
        return Text("")
    words = " " + window_words(recent.span).removeprefix("last ")
    bars = squeeze(recent.utilization_pct, max(0, width - len(words)))
    return spark_text(bars, 100.0) + Text(words, style="grey50")


class CardTile(Widget):
    """One card. Its state, whether it is selected and whether it is stale are CSS
    classes (so the border follows them), set by reactives. Its text is a reactive
    too, worded again at every poll: one that reads and is marked the same as the
    last repaints nothing (a tile's base style is always plain, so ``==``, which
    compares the characters and their spans, is the whole comparison)."""

    #: what the tile says, as last worded for its size
    text: reactive[Text] = reactive(Text)
    selected: var[bool] = var(False, toggle_class="-selected")
    stale: var[bool] = var(False, toggle_class="-stale")
    #: the card's state: its ``state-`` class
    state: var[str] = var("", init=False)

    def __init__(self, card: CardView, **kwargs: Any) -> None:
        super().__init__(id=f"card-{card.index}", **kwargs)
        self.card = card
        self.state = card.state
        self.now = 0.0
        self.idle_since: Optional[float] = None
        #: when the node releases the card's reservation unless used; since when its job is idle-held
        self.releases_at: Optional[float] = None
        self.held_since: Optional[float] = None
        #: the card's history as last fetched
        self.recent: Optional[Recent] = None
        #: the size the text was last worded for: (width, lines)
        self._worded_for: Optional[tuple[int, int]] = None
        #: the utilisation line for (history, width), drawn once per fetch and width
        self._spark: Optional[tuple[Optional[Recent], int, Text]] = None
        #: what :meth:`show` last worded the text from: an idle poll brings the same
        #: card again, and wording it anew was most of an idle dashboard's redraw
        self._worded_from: Optional[tuple[object, ...]] = None

    def watch_state(self, was: str, state: str) -> None:
        self.remove_class(f"state-{was}")
        self.add_class(f"state-{state}")

    def _fit(self) -> tuple[int, int]:
        """The width and lines the text has: a line for the utilisation (not on a
        short terminal), or one line in all (a compact grid)."""
        return self.content_region.width or self.size.width, self.content_region.height or self.size.height

    def _spark_line(self, width: int) -> Text:
        if self._spark is None or self._spark[0] is not self.recent or self._spark[1] != width:
            self._spark = (self.recent, width, spark_line(self.recent, width))
        return self._spark[2]

    def _words(self, fit: tuple[int, int]) -> Text:
        width, lines = fit
        if lines < LINES_OF_A_TILE:
            return render_line(
                self.card,
                width,
                self.now,
                self.stale,
                self.idle_since,
                releases_at=self.releases_at,
                held_since=self.held_since,
            )
        spark = self._spark_line(width) if lines >= LINES_WITH_SPARK else None
        return render_tile(
            self.card,
            width,
            self.now,
            self.stale,
            self.idle_since,
            spark,
            releases_at=self.releases_at,
            held_since=self.held_since,
        )

    def _reword(self) -> None:
        self._worded_for = self._fit()
        self.text = self._words(self._worded_for)

    def show(
        self,
        card: CardView,
        now: float,
        stale: bool,
        idle_since: Optional[float] = None,
        releases_at: Optional[float] = None,
        held_since: Optional[float] = None,
    ) -> None:
        self.card, self.now, self.idle_since = card, now, idle_since
        self.releases_at, self.held_since = releases_at, held_since
        self.state = card.state
        self.stale = stale
        facts = (card, stale, idle_since, releases_at, held_since)
        if facts == self._worded_from and not moves_with_time(card, idle_since, releases_at, held_since):
            return  # worded from these very facts, none of its words moving with the clock: the same text
        self._worded_from = facts
        self._reword()

    def show_history(self, recent: Recent) -> None:
        self.recent = recent
        self._reword()

    def render(self) -> Text:
        fit = self._fit()
        if fit != self._worded_for:  # laid out anew since it was worded (a resize, a shorter terminal)
            self._worded_for = fit
            self.set_reactive(CardTile.text, self._words(fit))
        return self.text

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

    #: the selected card: its tile is marked
    selected: var[int] = var(0, init=False)
    #: tiles on a line, as many as the grid's width has room for
    columns: var[int] = var(MAX_COLUMNS, init=False)
    #: a line per card, so that every card shows on a short terminal (dashboard.tcss)
    compact: var[bool] = var(False, toggle_class="-compact")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tiles: list[CardTile] = []

    def watch_selected(self, index: int) -> None:
        for tile in self.tiles:
            tile.selected = tile.card.index == index

    def watch_columns(self, columns: int) -> None:
        self.styles.grid_size_columns = columns

    def on_resize(self, event: Resize) -> None:
        self.columns = grid_columns(event.size.width, self.compact)

    def watch_compact(self, compact: bool) -> None:
        self.columns = grid_columns(self.size.width, compact)

    def show(
        self,
        cards: tuple[CardView, ...],
        now: float,
        stale: bool,
        idle: Mapping[str, float] = {},
        releases: Mapping[str, float] = {},
        idle_held: Mapping[str, float] = {},
    ) -> None:
        """Update every tile in place; tiles are only built when the card count
        changes. ``idle``: reservations' run ids -> unused since; ``releases``:
        -> released then unless used; ``idle_held``: jobs' run ids -> idle-held since."""
        if len(cards) != len(self.tiles):
            self.remove_children()
            self.tiles = [CardTile(card) for card in cards]
            self.mount_all(self.tiles)
            if self.selected >= len(self.tiles):
                self.selected = 0
        for tile, card in zip(self.tiles, cards):
            reserved = card.state == "reservation" and card.run_id
            since = idle.get(card.run_id) if reserved and card.run_id else None
            releases_at = releases.get(card.run_id) if reserved and card.run_id else None
            held = idle_held.get(card.run_id) if card.state == "job" and card.run_id else None
            tile.show(card, now, stale, since, releases_at, held)
            tile.selected = card.index == self.selected

    def show_history(self, history: Mapping[int, Recent]) -> None:
        """Each card's utilisation line, from the node's history as last fetched."""
        for tile in self.tiles:
            if tile.card.index in history:
                tile.show_history(history[tile.card.index])

    def select(self, index: int) -> None:
        """Select the card at ``index`` (kept within the grid), bring it into view,
        and say so (also when it was selected already: a click asks for its detail)."""
        if not self.tiles:
            return
        self.selected = index = max(0, min(len(self.tiles) - 1, index))
        self.scroll_to_widget(self.tiles[index], animate=False)
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
