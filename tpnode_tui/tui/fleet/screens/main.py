"""The fleet view's main screen: one row per node, a filter, and the ways into a node.

Rows are drawn from what the app's follower read, again at each read (the
app's ``reads``) and each second for the header's age, and only while this
screen shows: a node's grid over it draws itself, and this catches up when
it closes. A row is worded again only when what it shows changed, and only
the cells that changed are set, so an idle fleet repaints nothing.
"""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from tpnode_tui.fleet.follow import FleetFollower
from tpnode_tui.fleet.record import NodeRow
from tpnode_tui.text.printable import printable
from tpnode_tui.tui.fleet.screens.node import NodeScreen
from tpnode_tui.tui.fleet.ssh import DashboardOpener
from tpnode_tui.tui.fleet.wording import (
    COLUMNS,
    columns_shown,
    fleet_header,
    legend,
    row_cells,
    seen_text,
    stale_row_cells,
    summary,
)
from tpnode_tui.tui.terminal import suspended
from tpnode_tui.tui.widgets.redraw import update


class FleetTable(DataTable[Text]):
    """The nodes' table. Enter is the table's own key (it selects the row, and
    the screen opens that node's dashboard): declared here, so the footer
    shows it, where a binding of the screen's would be hidden by the table's."""

    BINDINGS = [
        Binding(
            "enter",
            "select_cursor",
            "Dashboard",
            id="dashboard",
            tooltip="The node's own dashboard, over SSH, as you: tpnode-tui --host NODE (q returns here)",
        )
    ]


class FleetScreen(Screen[None]):
    """Every node, one row each. ``open_dashboard`` runs a node's own dashboard
    while the app is suspended."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", id="filter", tooltip="Show only nodes whose name or series has this text"),
        Binding("g", "open", "Grid", id="open", tooltip="The node's cards, read-only, from its publication"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear-filter"),
    ]

    #: the filter's text: only the nodes whose name or series has it are shown
    filter: var[str] = var("", init=False)

    def __init__(self, follower: FleetFollower, open_dashboard: DashboardOpener) -> None:
        super().__init__(id="_default")
        self.follower = follower
        self.open_dashboard = open_dashboard
        #: row key -> the cells last shown, so an unchanged row is not touched
        self._shown: dict[str, tuple[Text, ...]] = {}
        #: node name -> (what its row depends on, the cells made from it)
        self._cells: dict[str, tuple[tuple[object, ...], tuple[Text, ...]]] = {}
        self._order: list[tuple[str, int]] = []
        #: the keys of the columns shown: those the table's width has room for, whole
        self._columns: tuple[str, ...] = ()

    # -- layout ---------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield Static(id="fleet-summary")
        yield Static(legend(), id="fleet-legend")
        # The cells' own colours win over the cursor's: a node's strip is its point.
        yield FleetTable(
            id="fleet-table", cursor_type="row", zebra_stripes=False, cursor_foreground_priority="renderable"
        )
        yield Input(placeholder="filter by name or series (enter to keep, escape to clear)", id="fleet-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.redraw()
        self.watch(self.app, "reads", self.redraw, init=False)
        self.set_interval(1.0, self._redraw_header)

    def on_screen_resume(self) -> None:
        self.redraw()  # a node's grid closed: catch up with the reads made meanwhile

    def on_resize(self) -> None:
        self.redraw()  # the columns the table has room for may change

    def watch_filter(self) -> None:
        self.redraw()

    # -- what is shown ----------------------------------------------------------

    def nodes_shown(self) -> list[NodeRow]:
        """The nodes whose name or series has the filter's text, in the fleet's order (all without one)."""
        return self.follower.nodes_matching(self.filter)

    def _redraw_header(self) -> None:
        if not self.is_current:
            return
        f = self.follower
        filtered = (self.filter, len(self.nodes_shown())) if self.filter else None
        head = fleet_header(f.source.safe_url, f.fleet, f.error, f.stale_since, f.clock(), filtered)
        update(self.query_one("#fleet-header", Static), head)

    def redraw(self) -> None:
        if not self.is_current:
            return
        self._redraw_header()
        f = self.follower
        update(self.query_one("#fleet-summary", Static), summary(f.fleet, f.error, f.stale_since))
        if f.fleet is not None and not f.stale:  # kept for the nodes there are: names come and go
            names = {node.name for node in f.fleet.nodes}
            self._cells = {n: c for n, c in self._cells.items() if n in names}
        now = f.clock()
        self._show_rows({node.name: self._row(node, now) for node in self.nodes_shown()})

    def _row(self, node: NodeRow, now: float) -> tuple[Text, ...]:
        """The node's cells, worded again only when what its row depends on changed."""
        stale = self.follower.stale
        key = (stale, node.status, node.total, node.series, node.cards, seen_text(node, now).plain)
        cached = self._cells.get(node.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        cells = stale_row_cells(node, now) if stale else row_cells(node, now)
        self._cells[node.name] = (key, cells)
        return cells

    def _show_rows(self, rows: dict[str, tuple[Text, ...]]) -> None:
        """Rebuild the table when the rows shown (or their heights) changed; else
        touch only the cells that did, so an idle fleet repaints nothing."""
        table = self.query_one(DataTable)
        order = [(name, len(cells[2].plain.split("\n"))) for name, cells in rows.items()]
        columns = columns_shown(rows.values(), table.scrollable_content_region.width, table.cell_padding)
        if order != self._order or columns != self._columns:
            selected = self._selected_name()
            table.clear(columns=columns != self._columns)
            if columns != self._columns:
                self._columns = columns
                for key, label in COLUMNS:
                    if key in columns:
                        table.add_column(label, key=key)
            for name, height in order:
                table.add_row(*self._shown_cells(rows[name]), key=name, height=height)
            self._order, self._shown = order, dict(rows)
            names = [name for name, _ in order]
            if selected in names:
                table.move_cursor(row=names.index(selected))
            return
        for name, cells in rows.items():
            old = self._shown.get(name)
            if old is cells:
                continue
            for (key, _), before, after in zip(COLUMNS, old or (), cells):
                if before != after and key in self._columns:
                    table.update_cell(name, key, after, update_width=True)
            self._shown[name] = cells

    def _shown_cells(self, cells: tuple[Text, ...]) -> tuple[Text, ...]:
        return tuple(cell for (key, _label), cell in zip(COLUMNS, cells) if key in self._columns)

    def _selected_name(self) -> Optional[str]:
        table = self.query_one(DataTable)
        if not self._order or table.cursor_row is None or not 0 <= table.cursor_row < len(self._order):
            return None
        return self._order[table.cursor_row][0]

    # -- keys -------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.add_class("-shown")
        box.value = self.filter
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value.strip()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("-shown")
        self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.remove_class("-shown")
        if self.filter:
            box.value = ""
            self.filter = ""
        self.query_one(DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_dashboard()

    def action_dashboard(self) -> None:
        """Its own dashboard, over SSH as whoever runs the fleet view: the node
        names that account, and says what it may do. Only an address its agent
        published, checked as a destination, is handed to ssh."""
        name = self._selected_name()
        if name is None:
            return
        node = self.follower.node(name)
        if node is None or node.ssh is None:
            self.notify(
                printable(
                    f"{name}: its agent published no SSH address, so its dashboard cannot be "
                    "opened from here; g shows its cards from its publication."
                ),
                title="No way in",
                severity="warning",
                markup=False,
            )
            return
        try:
            with suspended(self.app):  # the terminal goes to the node's dashboard
                code = self.open_dashboard(node.ssh)
        except Exception as e:  # a terminal that cannot be handed over: say so, keep the fleet
            self.notify(
                printable(f"{name}: its dashboard could not be opened here ({e})."),
                title="Dashboard",
                severity="error",
                markup=False,
            )
            return
        if code != 0:
            self.notify(
                printable(
                    f"{name} ({node.ssh}): its dashboard ended with exit code {code}, "
                    "for the reason it gave on the terminal."
                ),
                title="Dashboard",
                severity="error",
                timeout=12,
                markup=False,
            )

    def action_open(self) -> None:
        name = self._selected_name()
        if name is None:
            return
        if name not in self.follower.snapshots:
            node = self.follower.node(name)
            why = node.problem if node is not None and node.problem else "nothing it published can be read"
            # another node's words (its name, its problem): plain text, never markup
            self.notify(
                printable(f"{name}: no card grid to show: {why}."),
                title="Nothing to open",
                severity="warning",
                markup=False,
            )
            return
        self.app.push_screen(NodeScreen(name, self.follower))
