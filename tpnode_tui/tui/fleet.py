"""``tpnode-tui fleet``: every node that publishes to the fleet's Redis, one row each. It only reads.

A row is a node: its name and series, a strip with one coloured cell per card
(the node grid's colours), free of total, the widest run of consecutive free
cards, unhealthy, drained and intruded cards, and when it was last seen. A
node that stopped publishing, or whose publication cannot be read, or that two
agents claim, shows its cards as unknown and counts none as free. ``enter``
opens a node's card grid and detail pane from its published snapshot, with
no action on it.

Every string here came from Redis, which any node can write: names, series,
problems and snapshots are escaped (``printable``) as they arrive, and the
table is given ``Text`` cells, never markup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator, Callable, Optional, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from tpnode_tui.config.settings import SshTarget
from tpnode_tui.fleet.record import UNKNOWN, UP, FleetCard, FleetPicture, NodeRow, clock, summary_words
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.printable import printable, printable_view
from tpnode_tui.text.render import format_duration
from tpnode_tui.tui.widgets.detail import DetailPane
from tpnode_tui.tui.widgets.redraw import update
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import describe_card
from tpnode_tui.tui.wording.cells import fit
from tpnode_tui.tui.wording.marks import BADGES, DRAINED_TEXT

log = logging.getLogger("tpnode_tui.fleet")

#: a card's colour in a node's strip: the node grid's, and one of the fleet's own
STRIP: dict[str, tuple[str, str]] = {state: ("█", colour) for state, (_, colour) in BADGES.items()}
STRIP["unknown"] = ("?", "#8a8a8a")
#: a card in a state this version does not know
OTHER = ("█", "#4a4a4a")
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


class FleetSource(Protocol):
    """Where the fleet comes from: the Redis reader, or a test's stand-in."""

    safe_url: str

    async def read(self) -> FleetPicture: ...

    def notices(self) -> AsyncIterator[None]: ...

    async def close(self) -> None: ...


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
    if node.last_seen is None:
        return Text("never", style="grey62")
    if node.status == UP:
        age = now - node.last_seen
        return Text("just now" if age < 5 else f"{format_duration(age)} ago", style="grey62")
    if node.status == "unreachable":
        if node.seen_exactly:
            return Text(f"unreachable since {clock(node.last_seen)}", style="bold #ef5350")
        return Text(f"unreachable, seen {clock(node.last_seen)}", style="bold #ef5350")
    return Text(node.status, style="bold #ef5350" if node.status != "stale" else "bold #ffb300")


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
    if fleet is None and error is not None:
        return Text(f"Nothing read yet: {printable(error)}", style="bold #ef5350")
    if fleet is None:
        return Text("reading the fleet…", style="grey62")
    if error is not None:
        out = Text(f"Stale since {clock(since or 0)}: {printable(error)}. ", style="bold #ef5350")
        out.append(f"The last reading said: {printable(summary_words(fleet))}; no card counts as free.", style="grey62")
        return out
    out = Text(printable(summary_words(fleet)), style="bold")
    for problem in fleet.problems:
        out.append(f"\n{printable(problem)}", style="#ffb300")
    return out


def unknown_now(node: NodeRow) -> NodeRow:
    """The row while the fleet cannot be read: every card unknown, none free."""
    return replace(node, status="stale", cards=tuple(FleetCard(c.index, UNKNOWN) for c in node.cards))


class NodeScreen(Screen[None]):
    """One node's card grid and detail pane, from its publication. Read-only."""

    BINDINGS = [
        Binding("escape,q", "close", "Back to the fleet", id="back"),
        Binding("enter", "focus_detail", "Detail", show=False),
    ]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.node_name = name

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

    def action_close(self) -> None:
        app = self.app
        app.pop_screen()
        if isinstance(app, FleetApp):
            app.redraw()

    def action_focus_detail(self) -> None:
        self.query_one(DetailPane).focus()

    def on_card_grid_selected(self, message: CardGrid.Selected) -> None:
        self.show()

    def show(self) -> None:
        app = self.app
        assert isinstance(app, FleetApp)
        node = app.node(self.node_name)
        snap = app.shown_snapshot(self.node_name)
        now = app.clock()
        head = Text()
        head.append(" tpnode-tui fleet ", style="bold white on #1e63c4")
        head.append(f" {printable(self.node_name)} ", style="bold")
        head.append("read-only, from its last publication", style="grey62")
        if snap is not None:
            head.append(f" │ {snap.probe.model_name or 'unknown cards'} · {snap.host}")
            taken = node.taken_at if node is not None and node.taken_at is not None else snap.taken_at
            head.append(f" │ read {format_duration(now - taken)} ago", style="grey62")
        update(self.query_one("#node-header", Static), head)
        banner = self.query_one("#node-banner", Static)
        problem = (
            None
            if node is not None and node.status == UP
            else (node.problem if node is not None else "it no longer publishes to the fleet")
        )
        down = problem is not None
        banner.set_class(down, "-shown")
        if problem is not None:
            what = seen_text(node, now).plain if node is not None else "gone"
            update(
                banner,
                Text(
                    f"{what}: {printable(problem)}.\nIts cards are unknown now; shown as the last "
                    "publication said, marked ?; none counts as free."
                ),
            )
        grid = self.query_one(CardGrid)
        detail = self.query_one(DetailPane)
        grid.set_class(snap is None, "-hidden")
        detail.set_class(snap is None, "-hidden")
        if snap is None:
            return
        grid.show(snap.cards, now, down)
        if snap.cards:
            card = snap.cards[min(grid.selected, len(snap.cards) - 1)]
            detail.show(
                describe_card(
                    card, now, MEM_BUSY_MIB, stale=f"the node is {node.status if node else 'gone'}" if down else None
                )
            )


def run_over_ssh(target: SshTarget) -> tuple[int, str]:
    """The node's own dashboard, ``tpnode-tui --host TARGET``, on this terminal
    until it is quit: its exit code and the last line it wrote on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "--host", str(target)], stderr=subprocess.PIPE, text=True, errors="replace"
    )
    said = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, said[-1] if said else ""


#: what opens a node's dashboard: the SSH target; returns (exit code, what it said last)
DashboardOpener = Callable[[SshTarget], tuple[int, str]]


class FleetApp(App[int]):
    CSS_PATH = str(Path(__file__).with_name("dashboard.tcss"))
    TITLE = "tpnode-tui fleet"

    BINDINGS = [
        Binding("slash", "filter", "Filter", id="filter", tooltip="Show only nodes whose name or series has this text"),
        Binding(
            "enter",
            "dashboard",
            "Dashboard",
            id="dashboard",
            tooltip="The node's own dashboard, over SSH, as you: tpnode-tui --host NODE (q returns here)",
        ),
        Binding("g", "open", "Grid", id="open", tooltip="The node's cards, read-only, from its publication"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear-filter"),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    def __init__(
        self,
        source: FleetSource,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        open_dashboard: DashboardOpener = run_over_ssh,
    ) -> None:
        """``open_dashboard`` runs a node's dashboard while this one is suspended."""
        super().__init__()
        self.source = source
        self.open_dashboard = open_dashboard
        self.interval = max(0.2, interval)
        self.clock = clock
        self.fleet: Optional[FleetPicture] = None
        self.reads = 0
        self.filter = ""
        self._error: Optional[str] = None
        self._stale_since: Optional[float] = None
        self._wake = asyncio.Event()
        #: node name -> the last snapshot it published, for its grid once it goes down
        self._snapshots: dict[str, NodeSnapshot] = {}
        #: row key -> the cells last shown, so an unchanged row is not touched
        self._shown: dict[str, tuple[Text, ...]] = {}
        #: node name -> (what its row depends on, the cells made from it)
        self._cells: dict[str, tuple[tuple[object, ...], tuple[Text, ...]]] = {}
        self._order: list[tuple[str, int]] = []
        self._printable: Optional[tuple[NodeSnapshot, NodeSnapshot]] = None

    # -- layout ---------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield Static(id="fleet-summary")
        yield Static(legend(), id="fleet-legend")
        # The cells' own colours win over the cursor's: a node's strip is its point.
        yield DataTable(
            id="fleet-table", cursor_type="row", zebra_stripes=False, cursor_foreground_priority="renderable"
        )
        yield Input(placeholder="filter by name or series (enter to keep, escape to clear)", id="fleet-filter")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()
        self.redraw()
        self.run_worker(self._read_loop(), group="read", exit_on_error=False)
        self.run_worker(self._notice_loop(), group="notices", exit_on_error=False)
        self.set_interval(1.0, self._redraw_header)

    # -- reading ----------------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            self._wake.clear()
            await self.read_now()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            await asyncio.sleep(0.2)  # a burst of notices is answered by one read

    async def _notice_loop(self) -> None:
        """Read again as soon as a node publishes; the timer still reads every
        interval, because a node that dies sends no notice."""
        while True:
            try:
                async for _ in self.source.notices():
                    self._wake.set()
            except Exception as e:  # the timer reads on; notices are only a shortcut
                if not isinstance(e, TpnodeError):
                    log.warning("the fleet's notices could not be followed", exc_info=True)
            await asyncio.sleep(self.interval)

    async def read_now(self) -> None:
        try:
            fleet = await self.source.read()
        except Exception as e:  # whatever it was, the view goes stale (no card free), never frozen as it was
            if not isinstance(e, TpnodeError):
                log.warning("the fleet could not be read", exc_info=True)
            self._error = str(e) or type(e).__name__
            if self._stale_since is None:
                self._stale_since = self.clock()
        else:
            self.fleet = fleet
            self._error = None
            self._stale_since = None
            # Kept for the nodes there are: names come and go (anyone can write to Redis)
            names = {node.name for node in fleet.nodes}
            self._snapshots = {n: s for n, s in self._snapshots.items() if n in names}
            self._cells = {n: c for n, c in self._cells.items() if n in names}
            for node in self.fleet.nodes:
                if node.snapshot is not None:
                    self._snapshots[node.name] = node.snapshot
        self.reads += 1
        self.redraw()

    # -- what is shown ----------------------------------------------------------

    def node(self, name: str) -> Optional[NodeRow]:
        if self.fleet is None or self._error is not None:
            return None
        return next((n for n in self.fleet.nodes if n.name == name), None)

    def last_snapshot(self, name: str) -> Optional[NodeSnapshot]:
        return self._snapshots.get(name)

    def shown_snapshot(self, name: str) -> Optional[NodeSnapshot]:
        """The node's last snapshot as the screen may show it: every string in it,
        from whoever wrote to the fleet's Redis, escaped (as the dashboard does it)."""
        snap = self._snapshots.get(name)
        if snap is None:
            return None
        if self._printable is None or self._printable[0] is not snap:
            self._printable = (snap, printable_view(snap))
        return self._printable[1]

    def nodes_shown(self) -> list[NodeRow]:
        """The nodes whose name or series has the filter's text, in the fleet's order (all without one)."""
        if self.fleet is None:
            return []
        words = self.filter.lower()
        return [n for n in self.fleet.nodes if not words or words in n.name.lower() or words in n.series.lower()]

    def _redraw_header(self) -> None:
        if not self.is_running:
            return
        if isinstance(self.screen, NodeScreen):
            self.screen.show()  # its age moves on between reads too
        if self.screen is not self.screen_stack[0]:
            return
        head = Text()
        head.append(" tpnode-tui fleet ", style="bold white on #1e63c4")
        head.append(f" {printable(self.source.safe_url)} ", style="bold")
        if self._error is not None:
            head.append(f" STALE since {clock(self._stale_since or 0)} ", style="bold white on #c62828")
        elif self.fleet is not None:
            age = self.clock() - self.fleet.read_at
            head.append("read just now" if age < 1 else f"read {format_duration(age)} ago", style="grey62")
        if self.filter:
            head.append(f" │ filter: {self.filter!r} ({len(self.nodes_shown())} shown)", style="bold #4fc3f7")
        head.append(" │ read-only: enter shows a node's cards", style="grey62")
        update(self.query_one("#fleet-header", Static), head)

    def redraw(self) -> None:
        if not self.is_running:
            return
        if isinstance(self.screen, NodeScreen):
            self.screen.show()
        if self.screen is not self.screen_stack[0]:
            return
        self._redraw_header()
        update(self.query_one("#fleet-summary", Static), summary(self.fleet, self._error, self._stale_since))
        now = self.clock()
        stale = self._error is not None
        rows = {}
        for node in self.nodes_shown():
            # What a row shows depends on these alone: an unchanged row is not drawn again.
            key = (stale, node.status, node.total, node.series, node.cards, seen_text(node, now).plain)
            cached = self._cells.get(node.name)
            if cached is not None and cached[0] == key:
                rows[node.name] = cached[1]
                continue
            if stale:  # nothing read now: every card unknown, none free
                cells = row_cells(unknown_now(node), now)[:-1] + (Text("unknown now", style="grey62"),)
            else:
                cells = row_cells(node, now)
            self._cells[node.name] = (key, cells)
            rows[node.name] = cells
        self._show_rows(rows)

    def _show_rows(self, rows: dict[str, tuple[Text, ...]]) -> None:
        """Rebuild the table when the rows shown (or their heights) changed; else
        touch only the cells that did, so an idle fleet repaints nothing."""
        table = self.query_one(DataTable)
        order = [(name, len(cells[2].plain.split("\n"))) for name, cells in rows.items()]
        if order != self._order:
            selected = self._selected_name()
            table.clear()
            for name, height in order:
                table.add_row(*rows[name], key=name, height=height)
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
                if before != after:
                    table.update_cell(name, key, after, update_width=True)
            self._shown[name] = cells

    def _selected_name(self) -> Optional[str]:
        table = self.query_one(DataTable)
        if not self._order or table.cursor_row is None or not 0 <= table.cursor_row < len(self._order):
            return None
        return self._order[table.cursor_row][0]

    # -- keys -------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The fleet's own keys work on the fleet's table, not over a node's grid."""
        if action in ("filter", "open", "dashboard", "clear_filter") and isinstance(self.screen, NodeScreen):
            return False
        return True

    def action_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.add_class("-shown")
        box.value = self.filter
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter = event.value.strip()
        self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("-shown")
        self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#fleet-filter", Input)
        box.remove_class("-shown")
        if self.filter:
            box.value = ""
            self.filter = ""
            self.redraw()
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
        node = self.node(name)
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
            # the terminal goes to the node's dashboard; headless (tests) there is none to hand over
            with contextlib.nullcontext() if self.is_headless else self.suspend():
                code, said = self.open_dashboard(node.ssh)
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
                    f"{name} ({node.ssh}): its dashboard ended with exit code {code}" + (f": {said}" if said else ".")
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
        if self.last_snapshot(name) is None:
            node = self.node(name)
            why = node.problem if node is not None and node.problem else "nothing it published can be read"
            # another node's words (its name, its problem): plain text, never markup
            self.notify(
                printable(f"{name}: no card grid to show: {why}."),
                title="Nothing to open",
                severity="warning",
                markup=False,
            )
            return
        self.push_screen(NodeScreen(name))


async def _run(source: FleetSource, interval: float) -> int:
    app = FleetApp(source, interval=interval)
    try:
        await app.run_async()
    finally:
        await source.close()
    return app.return_code or 0


def run_fleet_view(url: str, safe_url: str, interval: float) -> int:
    from tpnode_tui.fleet.reader import FleetReader
    from tpnode_tui.tui import _logging_off_the_terminal

    with _logging_off_the_terminal(False):
        return asyncio.run(_run(FleetReader(url, safe_url), interval))
