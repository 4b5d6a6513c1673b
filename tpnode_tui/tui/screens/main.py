"""The main screen: the node's picture, the selection, and the keys that act on what is selected.

It draws what the dashboard knows and follows the node while it shows;
redraws wait while a dialog is open. The keys live here, beside the
selection: which are offered is the table of keys' to say
(tui/wording/keys.py), and each key that acts is one flow
(tui/screens/flows/) with this screen as its desk. Each part is compared
before it is redrawn (tui/widgets/redraw.py). See docs/architecture.md,
section 'The dashboard'.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Coroutine, Iterable, Mapping, Optional, TypeVar

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.events import DescendantFocus, Key
from textual.geometry import Size
from textual.reactive import var
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from tpnode_tui.model.errors import JobNotFound
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.render import env_lines
from tpnode_tui.tui.follow.history import Recent
from tpnode_tui.tui.follow.selection import Selection
from tpnode_tui.tui.follow.session import Session
from tpnode_tui.tui.screens.dialogs.usage import UsageScreen
from tpnode_tui.tui.screens.flows import demo, jobs, launches, operators, shells
from tpnode_tui.tui.terminal import suspended
from tpnode_tui.tui.widgets.detail import DetailPane
from tpnode_tui.tui.widgets.events import EventsPane
from tpnode_tui.tui.widgets.jobs import JobsTable
from tpnode_tui.tui.widgets.redraw import same, update
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import describe_card
from tpnode_tui.tui.wording.events import events_title
from tpnode_tui.tui.wording.header import PollState, banner_lines, header_text, no_cards_text, summary_text
from tpnode_tui.tui.wording.keys import ACTIONS, BY_NAME, SCREEN_BINDINGS, refusal

#: below this many rows the screen is laid out compactly; below the second, the
#: tiles and the detail pane have no room for the cards' history
SHORT_ROWS, HISTORY_ROWS = 32, 38

#: columns of the terminal the detail pane's text does not get: its border,
#: padding and scroll bar (dashboard.tcss)
DETAIL_FRAME = 5

Answer = TypeVar("Answer")


class MainScreen(Screen[None]):
    """The node's picture, and its keys. ``served``: where the node is served
    from, in words, and ``via`` the same in a word, for a short terminal;
    ``ready`` is called once its widgets are made, before it follows the node
    (so that the first reading, and the history fetched for it, have tiles to
    land on)."""

    #: every key but help and quit (the app's), as the table of keys describes it
    BINDINGS = SCREEN_BINDINGS

    #: a short terminal (80x24): no summary, the header's second line folded into
    #: its first, a one-line blind banner and a smaller detail pane (dashboard.tcss)
    short: var[bool] = var(False, toggle_class="-short")
    #: no room for the cards' history lines, on the tiles and in the detail pane
    lean: var[bool] = var(False, toggle_class="-lean")
    #: an eviction's dry run is on its way: evict is not offered until it answers
    evict_asking: var[bool] = var(False, bindings=True)

    def __init__(self, session: Session, *, served: str, via: str, ready: Callable[[], None]) -> None:
        super().__init__(id="_default")
        self.session = session
        self.served = served
        self.via = via
        self._ready = ready
        # This screen draws what the followers bring: each reading, a node lost, the log's entries.
        session.follower.on_reading = self.reading
        session.follower.on_lost = self.redraw
        session.node_log.changed = self.log_changed
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
        self.watch_short(self.short)
        self.query_one(DetailPane).border_title = "Selected card (enter to scroll, escape back)"
        self.query_one(JobsTable).border_title = "Jobs, reservations and launches not started yet"
        # Once a second: the header's age moves even between readings.
        self.set_interval(1.0, self._redraw_header)
        self.redraw()
        self._ready()
        self._follow_readings()
        history = self.session.history
        self.run_worker(history.follow(self), group="history", exclusive=True, exit_on_error=False)

    def on_screen_resume(self) -> None:
        self.redraw()  # a dialog closed: catch up with what came meanwhile

    # -- following the node --------------------------------------------------------

    def _follow_readings(self) -> None:
        follower = self.session.follower
        self.run_worker(follower.follow(), group="readings", exclusive=True, exit_on_error=False)

    def reading(self, first: bool) -> None:
        """A reading came: the first brings cards to fetch the history of, and a
        launch queued from here may have left the queue."""
        if first:
            self.session.history.wake()
        launches.follow_queued(self)
        self.redraw()

    # -- what is shown now ---------------------------------------------------------

    def _shown(self) -> bool:
        """Whether this screen shows, its widgets made; never while the app shuts down, when
        the once-a-second tick or a finishing poll may still come after its widgets are gone."""
        app = self.app
        return self.is_mounted and app.is_running and bool(app.screen_stack) and app.screen is self

    @property
    def poll_state(self) -> PollState:
        return self.session.follower.poll_state(readonly=self.session.readonly, served=self.served, via=self.via)

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
        snap = self.session.follower.snapshot
        return snap is not None and bool(snap.cards) and not self._lean()

    def _lay_out(self) -> None:
        self.short = self._short()
        self.lean = self._lean()

    def watch_short(self, short: bool) -> None:
        for grid in self.query(CardGrid):  # none before the screen is composed: on_mount sets it then
            grid.compact = short  # a line per card: every card shows

    def watch_lean(self, was: bool, lean: bool) -> None:
        if was and not lean:
            self.session.history.wake()  # the tiles have room for their lines now: fetch them

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
            follower = self.session.follower
            text = header_text(follower.snapshot, follower.clock(), self.poll_state, compact=self._short())
            update(self.query_one("#header", Static), text)

    def redraw(self) -> None:
        if not self._shown():
            return
        poll = self.poll_state
        snap = self.session.follower.snapshot
        self._redraw_header()
        self._redraw_banners(snap, poll)
        # Until a poll succeeds there is nothing to summarise and no card to detail.
        empty = snap is not None and snap.occupancy.total == 0
        self.query_one("#summary", Static).set_class(snap is None, "-hidden")
        self.query_one(DetailPane).set_class(snap is None or empty, "-hidden")
        if snap is None:
            return
        update(self.query_one("#summary", Static), summary_text(snap, poll))
        now, stale = self.session.follower.clock(), poll.stale_since is not None
        self._redraw_cards(snap, now, stale, empty)
        self._redraw_detail()
        jobs = self.query_one(JobsTable)
        jobs.stale = stale
        jobs.show(snap.jobs, snap.queue, now, snap.idle, snap.releases, snap.idle_held)
        self.redraw_log()
        # The footer is rebuilt, every key re-mounted, on each refresh_bindings:
        # done every poll, that was the largest part of an idle dashboard's CPU.
        if self._binding_states() != self._bindings_shown:
            self.refresh_bindings()

    def _redraw_banners(self, snap: Optional[NodeSnapshot], poll: PollState) -> None:
        """The stale and probe-blind banners; one that comes or goes takes or gives back the history's rows."""
        shown = dict(banner_lines(snap, poll, compact=self._short()))
        if bool(shown) != self._banners:
            self._banners = bool(shown)
            self._lay_out()
        for name in ("stale", "blind"):
            banner = self.query_one(f"#{name}-banner", Static)
            banner.set_class(name in shown, "-shown")
            if name in shown:
                update(banner, shown[name])

    def _redraw_cards(self, snap: NodeSnapshot, now: float, stale: bool, empty: bool) -> None:
        """The tiles, or what to say instead of an empty grid."""
        grid = self.query_one(CardGrid)
        no_cards = self.query_one("#no-cards", Static)
        no_cards.set_class(empty, "-shown")
        grid.set_class(empty, "-hidden")
        if empty:
            update(no_cards, no_cards_text(snap))
        grid.show(snap.cards, now, stale, snap.idle, snap.releases, snap.idle_held)

    def _binding_states(self) -> tuple[Optional[bool], ...]:
        now = self.selection()
        return tuple(action.offered(now) for action in ACTIONS if not action.on_app)

    def refresh_bindings(self) -> None:
        # The footer ignores a refresh while the terminal is not focused (or the
        # app not yet running): remember nothing then, so the next poll refreshes it.
        shown = self.app.is_running and self.app.app_focus
        self._bindings_shown = self._binding_states() if shown else None
        super().refresh_bindings()

    def _redraw_detail(self) -> None:
        pane = self.query_one(DetailPane)
        follower = self.session.follower
        card = self.selection().selected_card()
        snap = follower.snapshot
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
            run_id = card.run_id or ""
            text = describe_card(
                card,
                follower.clock(),
                snap.mem_busy_mib,
                follower.why_stale,
                env,
                width,
                releases_at=snap.releases.get(run_id) if card.state == "reservation" else None,
                held_since=snap.idle_held.get(run_id) if card.state == "job" else None,
                returns=snap.return_after_check,
                boot=snap.boot,
            )
        if not same(self._detail_shown, text):
            pane.show(text)
            self._detail_shown = text

    # -- the cards' last hour ----------------------------------------------------------

    def selected_index(self) -> int:
        return self.query_one(CardGrid).selected

    def history_wanted(self) -> bool:
        return self.wants_history and not self.session.follower.paused  # paused, the picture holds still

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
        card = self.selection().selected_card()
        if card is None or not self.app.screen_stack:
            return
        total = card.facts.memory_total_mib if card.facts is not None else None
        self.query_one(DetailPane).show_history(self.session.history.recent.get(card.index), total)

    # -- the node's log, in place of the jobs table ------------------------------------------

    def open_log(self, card: Optional[int]) -> None:
        """Follow the node's log (about ``card``, or every card) in the events pane,
        from an hour back; the pane keeps the newest EVENTS_KEPT entries."""
        node_log = self.session.node_log
        node_log.open(card)
        pane = self.query_one(EventsPane)
        pane.border_title = events_title(card)
        pane.show(node_log.entries, None)  # never the last card's entries under this title, even paused
        pane.add_class("-shown")
        table = self.query_one(JobsTable)
        if table.has_focus:
            pane.focus()
        table.add_class("-hidden")
        self.run_worker(node_log.follow(card), group="events", exclusive=True, exit_on_error=False)
        self.redraw_log()
        self.refresh_bindings()

    def close_log(self) -> None:
        self.workers.cancel_group(self, "events")
        self.session.node_log.close()
        pane = self.query_one(EventsPane)
        if pane.has_focus:
            self.query_one(CardGrid).focus()
        pane.remove_class("-shown")
        self.query_one(JobsTable).remove_class("-hidden")
        self.refresh_bindings()

    def log_changed(self, burst: bool) -> None:
        """Redraw the pane at once, or once for a burst of entries (the hour read at the start)."""
        if not burst:
            self.redraw_log()
        elif not self._log_due:
            self._log_due = True
            self.set_timer(0.1, self.redraw_log)

    def redraw_log(self) -> None:
        self._log_due = False
        log = self.session.node_log
        if not log.shown or self.session.follower.paused or not self._shown():
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
        """The detail pane follows the selection, the selected card's history is
        fetched, and the log, where it is kept to one card, follows it too."""
        if not self._alive(message.grid):
            return
        if self._shown() and self.session.follower.snapshot is not None:
            self._redraw_detail()
            self._redraw_history()
        self.session.history.wake()
        self.refresh_bindings()
        log = self.session.node_log
        if log.shown and log.card is not None and log.card != message.index:
            self.open_log(message.index)

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        """Following a job row in the table selects its first card, so s stops what is highlighted."""
        table = message.data_table
        if not self._alive(table):
            return
        job = self.selection().job_for_row()
        if job is not None and job.live and job.gpus and table.has_focus:
            self.query_one(CardGrid).select(job.gpus[0])
        self.refresh_bindings()

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        if self._alive(event.widget):
            self.refresh_bindings()

    def selection(self) -> Selection:
        """What the keys act on now, and the state they are offered in."""
        session, table = self.session, self.query_one(JobsTable)
        follower, log = session.follower, session.node_log
        return Selection(
            snapshot=follower.snapshot,
            you=follower.you,
            stale=follower.stale_since is not None,
            card_index=self.query_one(CardGrid).selected,
            row=table.selected_key() or "",
            jobs_focused=table.has_focus,
            readonly=session.readonly,
            paused=follower.paused,
            has_demo=session.demo is not None,
            log_shown=log.shown,
            log_card=log.card,
            evict_asking=self.evict_asking,
            shells=session.open_shell is not None,
        )

    # -- the keys -------------------------------------------------------------------------

    def on_key(self, event: Key) -> None:
        """A key not offered now (not in the footer) still says why it does nothing, in one line:
        the node's words where the node would refuse. One that is offered runs its binding."""
        why = refusal(event.key, self.selection())
        if why is not None:
            self.notify(why, severity="warning", timeout=8)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        """Whether a key shows and works now: the table of keys says when."""
        row = BY_NAME.get(action)
        return True if row is None else row.offered(self.selection())

    def system_commands(self) -> Iterable[SystemCommand]:
        """The command palette's entries for the keys offered now, in the table's order."""
        now = self.selection()
        for action in ACTIONS:
            if action.palette is not None and action.offered(now):
                title, help_ = action.palette
                where = self.app if action.on_app else self
                yield SystemCommand(title, help_, getattr(where, f"action_{action.name}"))

    async def ask(self, question: Screen[Answer]) -> Answer:
        """Open ``question`` and wait for its answer (a flow, from inside its worker)."""
        answer: Answer = await self.app.push_screen_wait(question)
        return answer

    def start(self, work: Coroutine[Any, Any, None], group: str) -> None:
        self.run_worker(work, group=group, exit_on_error=False)

    def suspended(self) -> ContextManager[None]:
        return suspended(self.app)

    # what changes the node: one flow each (tui/screens/flows/)

    def action_launch(self) -> None:
        launches.launch(self)

    def action_reserve(self) -> None:
        launches.reserve(self)

    def action_extend(self) -> None:
        jobs.extend(self)

    def action_stop(self) -> None:
        jobs.stop(self)

    def action_shell(self) -> None:
        shells.shell(self)

    def action_reclaim(self) -> None:
        jobs.reclaim(self)

    def action_cancel_launch(self) -> None:
        jobs.cancel(self)

    def action_drain(self) -> None:
        operators.drain(self)

    def action_undrain(self) -> None:
        operators.undrain(self)

    def action_check(self) -> None:
        operators.check(self)

    def action_evict(self) -> None:
        operators.evict(self)

    # what is shown

    def action_events(self) -> None:
        self.open_log(None)

    def action_hide_events(self) -> None:
        self.close_log()

    def action_events_card(self) -> None:
        card = self.selection().selected_card()
        if card is not None:
            self.open_log(card.index)

    def action_events_all(self) -> None:
        self.open_log(None)

    def action_usage(self) -> None:
        self.app.push_screen(UsageScreen(self.session.node, self.session.clock))

    def action_pause(self) -> None:
        """Stop following the node's readings: the picture holds still. The node
        is still read (by its agent, or by this process for the queue's sake)."""
        self.session.follower.paused = True
        self.workers.cancel_group(self, "readings")
        self.notify("Paused: the picture is not updated until you press p again.", timeout=4)
        self.redraw()

    def action_resume(self) -> None:
        self.session.follower.paused = False
        self.notify("Resumed.", timeout=3)
        self._follow_readings()  # once the paused follow has ended (NodeFollower.follow)
        self.redraw()

    # the demo's

    def action_demo_blind(self) -> None:
        demo.toggle_blind(self)

    def action_demo_external(self) -> None:
        demo.toggle_external(self)

    def action_demo_xid(self) -> None:
        demo.raise_xid(self)

    # moving about

    def action_focus_detail(self) -> None:
        self.query_one(DetailPane).focus()

    def action_focus_grid(self) -> None:
        self.query_one(CardGrid).focus()
