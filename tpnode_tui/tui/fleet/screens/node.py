"""One node's card grid and detail pane, from its last publication. Read-only."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer, Static

from tpnode_tui.fleet.follow import FleetFollower
from tpnode_tui.tui.fleet.wording import MEM_BUSY_MIB, node_banner, node_down, node_header
from tpnode_tui.tui.screens.main import DETAIL_FRAME, SHORT_ROWS
from tpnode_tui.tui.widgets.detail import DetailPane
from tpnode_tui.tui.widgets.redraw import update
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import describe_card


class NodeScreen(Screen[None]):
    """One node's card grid and detail pane, from its publication, with no action
    on it. Drawn again at each read of the fleet, and each second (its age moves)."""

    BINDINGS = [
        Binding("escape,q", "close", "Back to the fleet", id="back"),
        Binding("enter", "focus_detail", "Detail", show=False),
    ]

    def __init__(self, name: str, follower: FleetFollower) -> None:
        super().__init__()
        self.node_name = name
        self.follower = follower

    def compose(self) -> ComposeResult:
        yield Static(id="node-header")
        yield Static(id="node-banner", classes="banner")
        yield CardGrid(id="node-grid")
        yield DetailPane(id="node-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DetailPane).border_title = "Selected card (from the node's last publication)"
        self.query_one(CardGrid).focus()
        self.show()
        self.watch(self.app, "reads", self.show, init=False)
        self.set_interval(1.0, self.show)

    def on_resize(self, event: Resize) -> None:
        """A line per card on a short terminal, as the node's own dashboard draws them: every card shows."""
        self.query_one(CardGrid).compact = event.size.height < SHORT_ROWS

    def action_close(self) -> None:
        self.app.pop_screen()

    def action_focus_detail(self) -> None:
        self.query_one(DetailPane).focus()

    def on_card_grid_selected(self, message: CardGrid.Selected) -> None:
        self.show()

    def show(self) -> None:
        if not self.is_current:
            return
        node = self.follower.node(self.node_name)
        snap = self.follower.shown_snapshot(self.node_name)
        now = self.follower.clock()
        update(self.query_one("#node-header", Static), node_header(self.node_name, node, snap, now))
        banner = self.query_one("#node-banner", Static)
        problem = node_down(node)
        banner.set_class(problem is not None, "-shown")
        if problem is not None:
            update(banner, node_banner(node, problem, now))
        grid = self.query_one(CardGrid)
        detail = self.query_one(DetailPane)
        grid.set_class(snap is None, "-hidden")
        detail.set_class(snap is None, "-hidden")
        if snap is None:
            return
        grid.show(snap.cards, now, problem is not None)
        if snap.cards:
            card = snap.cards[min(grid.selected, len(snap.cards) - 1)]
            stale = f"the node is {node.status if node else 'gone'}" if problem is not None else None
            width = self.size.width - DETAIL_FRAME  # each fact whole, under its own column
            detail.show(describe_card(card, now, MEM_BUSY_MIB, stale=stale, width=width))
