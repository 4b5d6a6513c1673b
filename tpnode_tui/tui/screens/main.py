"""The main screen: the node's picture, laid out and redrawn.

The header (where the data comes from, how fresh, who you are), the banners
over the grid, the summary, one tile per card, the selected card's detail,
and the jobs table or, in its place, the node's log. It draws what the
dashboard knows (the followers' state, the cards' history as fetched) and
asks the node nothing. Redraws are held back while a dialog is open (a grid
changing under a form is distracting) and caught up when it closes.

Every poll sets the header, the summary, the detail pane and every tile,
mostly to what they already show, so each part is compared before it is
given anything (tpnode_tui/tui/widgets/redraw.py), and the footer is rebuilt only
when a key's state changed.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.events import DescendantFocus
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from tpnode_tui.model.errors import JobNotFound
from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.model.views import CardView
from tpnode_tui.text.render import env_lines
from tpnode_tui.tui.follow.history import HistoryFollower, Recent
from tpnode_tui.tui.follow.log import LogFollower
from tpnode_tui.tui.follow.readings import NodeFollower
from tpnode_tui.tui.widgets.detail import DetailPane
from tpnode_tui.tui.widgets.events import EventsPane
from tpnode_tui.tui.widgets.jobs import JobsTable
from tpnode_tui.tui.widgets.redraw import same, update
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import describe_card
from tpnode_tui.tui.wording.events import events_title
from tpnode_tui.tui.wording.header import PollState, banner_lines, header_text, no_cards_text, summary_text
from tpnode_tui.tui.wording.jobs import JOB_PREFIX, LAUNCH_PREFIX, WAITING
from tpnode_tui.tui.wording.keys import ACTIONS

#: below this many rows the screen is laid out compactly; below the second, the
#: tiles and the detail pane have no room for the cards' history
SHORT_ROWS, HISTORY_ROWS = 32, 38

#: columns of the terminal the detail pane's text does not get: its border,
#: padding and scroll bar (dashboard.tcss)
DETAIL_FRAME = 5


class MainScreen(Screen[None]):
    """The node's picture. ``served``: where the node is served from, in words,
    and ``via`` the same in a word, for a short terminal; ``ready`` is called
    once its widgets are made (the app follows the node from then on, so that
    the first reading, and the history fetched for it, have tiles to land on)."""

    def __init__(
        self,
        *,
        follower: NodeFollower,
        node_log: LogFollower,
        history: HistoryFollower,
        readonly: bool,
        served: str,
        via: str,
        ready: Callable[[], None],
    ) -> None:
        super().__init__(id="_default")
        self.follower = follower
        self.node_log = node_log
        self.history = history
        self.readonly = readonly
        self.served = served
        self.via = via
        self._ready = ready
        #: what the footer and the detail pane were last given, so that a reading
        #: that changes nothing redraws neither (see tpnode_tui/tui/widgets/redraw.py)
        self._bindings_shown: Optional[tuple[Optional[bool], ...]] = None
        self._detail_shown: object = None
        #: the terminal's size as the last resize gave it (``self.size`` lags behind it)
        self._rows: Optional[int] = None
        self._cols: Optional[int] = None
        #: whether a banner (stale, probe-blind) takes rows over the grid
        self._banners = False
        #: the log's (problem, version) last drawn, and whether a redraw of it is due
        self._log_drawn: Optional[tuple[Optional[str], int]] = None
        self._log_due = False

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="summary")
        yield Static(id="stale-banner", classes="banner")
        yield Static(id="blind-banner", classes="banner")
        yield Static(id="no-cards")
        yield CardGrid(id="grid")
        yield DetailPane(id="detail", history=True)
        yield JobsTable(id="jobs")
        yield EventsPane(id="events")
        # Compact, and without the palette's key (ctrl+p still opens it; the help
        # says so): an operator's keys, the log's and the demo's fit 120 columns.
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(CardGrid).focus()
        self.query_one(DetailPane).border_title = "Selected card (enter to scroll, escape back)"
        self.query_one(JobsTable).border_title = "Jobs, reservations and launches not started yet"
        # Once a second: the header's age moves even between readings.
        self.set_interval(1.0, self._redraw_header)
        self.redraw()
        self._ready()

    def on_screen_resume(self) -> None:
        self.redraw()  # a dialog closed: catch up with what came meanwhile

    # -- what is shown now ---------------------------------------------------------

    def _shown(self) -> bool:
        """Whether this screen shows, its widgets made; never while the app shuts down, when
        the once-a-second tick or a finishing poll may still come after its widgets are gone."""
        app = self.app
        return self.is_mounted and app.is_running and bool(app.screen_stack) and app.screen is self

    @property
    def poll_state(self) -> PollState:
        follower, snap = self.follower, self.follower.snapshot
        return PollState(
            paused=follower.paused,
            readonly=self.readonly,
            stale_since=follower.stale_since,
            stale_error=follower.stale_error,
            agent_gone=follower.gone_since is not None and follower.gone_agent,
            lock_waiting=self._lock_line(),
            unverified_allowed=snap is not None and snap.allow_unverified,
            you=follower.you,
            served=self.served,
            via=self.via,
        )

    def _lock_line(self) -> Optional[str]:
        """What the allocation lock means for a launch now: what a launch under
        way waits for, else who holds the lock or that Redis cannot be reached,
        as the node found it: a launch would wait, and the operator should know
        before pressing l."""
        snap = self.follower.snapshot
        if snap is None:
            return None
        waiting = next((q.waiting_for for q in snap.queue if q.state == WAITING and q.waiting_for), None)
        return waiting or snap.lock_state

    # -- layout --------------------------------------------------------------------

    def _short(self) -> bool:
        return (self._rows if self._rows is not None else self.app.size.height) < SHORT_ROWS

    def _lean(self) -> bool:
        """Too few rows for the history's lines (on the tiles and in the detail
        pane): a terminal under HISTORY_ROWS, or one whose rows a banner takes."""
        rows = self._rows if self._rows is not None else self.app.size.height
        return rows < HISTORY_ROWS or self._banners

    @property
    def wants_history(self) -> bool:
        """Whether there are cards and a line on screen shows their history:
        while not, none is fetched."""
        snap = self.follower.snapshot
        return snap is not None and bool(snap.cards) and not self._lean()

    def _lay_out(self) -> None:
        lean = self.has_class("-lean")
        self.set_class(self._short(), "-short")
        self.set_class(self._lean(), "-lean")
        if lean and not self._lean():
            self.history.wake()  # the tiles have room for their lines now: fetch them

    def terminal_resized(self, size: Size) -> None:
        """A short terminal (80x24) drops the summary and the header's second
        line, shortens the blind banner, and shrinks the detail pane, so the jobs
        table stays on screen; below HISTORY_ROWS, or with a banner over the
        grid, the tiles and the detail pane leave out the cards' history. The
        app hands on its resize as it comes, before Textual's own handler
        updates its size, and while a dialog is open too."""
        self._rows = size.height
        self._cols = size.width
        self._lay_out()
        self.redraw()

    # -- drawing -------------------------------------------------------------------

    def _redraw_header(self) -> None:
        if self._shown():
            text = header_text(self.follower.snapshot, self.follower.clock(), self.poll_state, compact=self._short())
            update(self.query_one("#header", Static), text)

    def redraw(self) -> None:
        if not self._shown():
            return
        now = self.follower.clock()
        poll = self.poll_state
        snap = self.follower.snapshot
        self._redraw_header()
        shown = dict(banner_lines(snap, poll, compact=self._short()))
        if bool(shown) != self._banners:
            self._banners = bool(shown)
            self._lay_out()
        for name in ("stale", "blind"):
            banner = self.query_one(f"#{name}-banner", Static)
            banner.set_class(name in shown, "-shown")
            if name in shown:
                update(banner, shown[name])
        # Until a poll succeeds there is nothing to summarise and no card to detail.
        empty = snap is not None and snap.occupancy.total == 0
        self.query_one("#summary", Static).set_class(snap is None, "-hidden")
        self.query_one(DetailPane).set_class(snap is None or empty, "-hidden")
        if snap is None:
            return
        update(self.query_one("#summary", Static), summary_text(snap, poll))
        grid = self.query_one(CardGrid)
        no_cards = self.query_one("#no-cards", Static)
        no_cards.set_class(empty, "-shown")
        grid.set_class(empty, "-hidden")
        stale = self.follower.stale_since is not None
        if empty:
            update(no_cards, no_cards_text(snap))
        grid.show(snap.cards, now, stale, snap.idle)
        self._redraw_detail()
        jobs = self.query_one(JobsTable)
        jobs.set_class(stale, "-stale")
        jobs.show(snap.jobs, snap.queue, now, snap.idle)
        self.redraw_log()
        # The footer is rebuilt, every key re-mounted, on each refresh_bindings:
        # done every poll, that was the largest part of an idle dashboard's CPU.
        if self._binding_states() != self._bindings_shown:
            self.app.refresh_bindings()

    def _binding_states(self) -> tuple[Optional[bool], ...]:
        return tuple(self.app.check_action(action.name, ()) for action in ACTIONS)

    def refresh_bindings(self) -> None:
        # The footer ignores a refresh while the terminal is not focused (or the
        # app not yet running): remember nothing then, so the next poll refreshes it.
        shown = self.app.is_running and self.app.app_focus
        self._bindings_shown = self._binding_states() if shown else None
        super().refresh_bindings()

    def _redraw_detail(self) -> None:
        pane = self.query_one(DetailPane)
        card = self.selected_card()
        snap = self.follower.snapshot
        if card is None or snap is None:
            text = no_cards_text(snap) if snap else Text("")
        else:
            env: list[str] = []
            if card.job is not None and card.job.live:
                try:
                    env = env_lines(snap, card.job.key)
                except JobNotFound:
                    pass
            width = (self._cols if self._cols is not None else self.app.size.width) - DETAIL_FRAME
            text = describe_card(card, self.follower.clock(), snap.mem_busy_mib, self.follower.why_stale, env, width)
        if not same(self._detail_shown, text):
            pane.show(text)
            self._detail_shown = text

    # -- the cards' last hour ----------------------------------------------------------

    def selected_index(self) -> int:
        return self.query_one(CardGrid).selected

    def history_wanted(self) -> bool:
        return self.wants_history and not self.follower.paused  # paused, the picture holds still

    def tiles_have_room(self) -> bool:
        return not self._lean()

    def show_history(self, fetched: Mapping[int, Recent]) -> None:
        if not self.app.is_running or not self.app.screen_stack:
            return  # shutting down: the widgets are gone
        self.query_one(CardGrid).show_history(fetched)
        self._redraw_history()

    def _redraw_history(self) -> None:
        """The selected card's lines, from its history as last fetched (with every
        card's, for the tiles, or on its own when it was selected)."""
        card = self.selected_card()
        if card is None or not self.app.screen_stack:
            return
        total = card.facts.memory_total_mib if card.facts is not None else None
        self.query_one(DetailPane).show_history(self.history.recent.get(card.index), total)

    # -- the node's log, in place of the jobs table ------------------------------------------

    def show_log(self, card: Optional[int]) -> None:
        pane = self.query_one(EventsPane)
        pane.border_title = events_title(card)
        pane.show(self.node_log.entries, None)  # never the last card's entries under this title, even paused
        pane.add_class("-shown")
        table = self.query_one(JobsTable)
        if table.has_focus:
            pane.focus()
        table.add_class("-hidden")

    def hide_log(self) -> None:
        pane = self.query_one(EventsPane)
        if pane.has_focus:
            self.query_one(CardGrid).focus()
        pane.remove_class("-shown")
        self.query_one(JobsTable).remove_class("-hidden")

    def log_changed(self, burst: bool) -> None:
        """Redraw the pane at once, or once for a burst of entries (the hour read at the start)."""
        if not burst:
            self.redraw_log()
        elif not self._log_due:
            self._log_due = True
            self.set_timer(0.1, self.redraw_log)

    def redraw_log(self) -> None:
        self._log_due = False
        log = self.node_log
        if not log.shown or self.follower.paused or not self._shown():
            return
        drawn = (log.problem, log.version)
        if drawn == self._log_drawn:
            return
        self._log_drawn = drawn
        self.query_one(EventsPane).show(log.entries, log.problem)

    # -- the selection -------------------------------------------------------------------

    def _alive(self, widget: Widget) -> bool:
        """Messages still arrive while the app shuts down, after its widgets are gone."""
        return bool(self.app.screen_stack) and widget.is_attached

    def on_card_grid_selected(self, message: CardGrid.Selected) -> None:
        """The detail pane follows the selection, and the selected card's history is fetched.
        (The app follows it with the log, where the log is kept to one card.)"""
        if not self._alive(message.grid):
            return
        if self._shown() and self.follower.snapshot is not None:
            self._redraw_detail()
            self._redraw_history()
        self.history.wake()
        self.app.refresh_bindings()

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        """Following a job row in the table selects its first card, so s stops what is highlighted."""
        table = message.data_table
        if not self._alive(table):
            return
        job = self.job_for_row()
        if job is not None and job.live and job.gpus and table.has_focus:
            self.query_one(CardGrid).select(job.gpus[0])
        self.app.refresh_bindings()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        if self._alive(event.widget):
            self.app.refresh_bindings()

    def selected_card(self) -> Optional[CardView]:
        snap = self.follower.snapshot
        if snap is None:
            return None
        index = self.query_one(CardGrid).selected
        return next((c for c in snap.cards if c.index == index), None)

    @property
    def jobs_focused(self) -> bool:
        """Whether the keys act on the jobs table's highlighted row (else on the selected card)."""
        return self.query_one(JobsTable).has_focus

    def selected_row(self) -> str:
        """The jobs table's highlighted row's key ("" for none)."""
        return self.query_one(JobsTable).selected_key() or ""

    def job_for_row(self) -> Optional[JobState]:
        key = self.selected_row()
        snap = self.follower.snapshot
        if snap is None or not key.startswith(JOB_PREFIX):
            return None
        name = key[len(JOB_PREFIX) :]
        return next((j for j in snap.jobs if j.name == name), None)

    def selected_launch(self) -> Optional[QueuedLaunch]:
        """The launch not started yet (queued or under way) highlighted in the jobs table."""
        key = self.selected_row()
        snap = self.follower.snapshot
        if snap is None or not self.jobs_focused or not key.startswith(LAUNCH_PREFIX):
            return None
        run_id = key[len(LAUNCH_PREFIX) :]
        return next((q for q in snap.queue if q.run_id == run_id), None)
