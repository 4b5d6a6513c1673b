"""The dashboard app: polls the allocator, shows the node, turns keys into allocator calls.

It holds no truth of its own. Every poll asks the allocator for a fresh
snapshot (the runtime's records and the driver, read now), and every action
goes through that same allocator and its lock, exactly as the CLI does, so a
dashboard and a shell can never hand out one card twice. The only state kept
here is presentation (the selection, a paused flag) and the launch queue,
which is a list of wishes, not of holdings.

Polling and allocating run in separate workers: a launch can wait on the
allocation lock for as long as another process holds it (forever while Redis
is down), and the operator must go on seeing the node, and why it waits,
meanwhile.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from ..allocator import GpuAllocator, Launched, default_owner, new_run_id
from ..model import (
    BadRequest,
    CardView,
    Conflict,
    JobNotFound,
    JobSpec,
    JobState,
    NoCapacity,
    NodeSnapshot,
    TpnodeError,
)
from ..printable import printable, printable_lines, printable_view
from ..render import cards_words
from .detail import DetailPane, describe_card
from .header import PollState, banner_lines, header_text, no_cards_text, summary_text
from .jobs import JOB_PREFIX, LAUNCH_PREFIX, JobsTable
from .queue import PLACING, QUEUED, WAITING, Cancel, LaunchQueue, Outcome
from .redraw import same, update
from .screens import ConfirmScreen, HelpScreen, LaunchScreen, ReserveRequest, ReserveScreen
from .tiles import CardGrid

log = logging.getLogger(__name__)

#: below this many rows the screen is laid out compactly
SHORT_ROWS = 32

#: actions that change jobs; all refused in read-only mode
NODE_ACTIONS = frozenset({"launch", "reserve", "stop", "reclaim", "cancel_launch"})

#: action -> (palette title, what it does); the palette lists the ones that apply now
PALETTE = {
    "launch": ("Launch a job", "Place a job on free cards (queue it if none are free)"),
    "reserve": ("Reserve cards", "Hold cards for a person for a while"),
    "stop": ("Stop the selected job",
             "Stop the job or reservation on the selected card, or in the highlighted jobs-table row"),
    "reclaim": ("Reclaim exited jobs", "Remove the records of jobs that have ended"),
    "cancel_launch": ("Cancel the selected launch",
                      "Cancel the launch selected in the jobs table: queued, or waiting for the allocation lock"),
    "pause": ("Pause polling", "Stop reading the node until resumed"),
    "resume": ("Resume polling", "Read the node again every interval"),
    "demo_blind": ("Demo: toggle probe-blind", "Pretend use from outside cannot be probed"),
    "demo_external": ("Demo: toggle outside use", "Put or remove an outside process on the selected card"),
    "help": ("Help: keys and card states", "Every key and every card state explained"),
}


class QuitScreen(ConfirmScreen):
    """The question asked before quitting drops queued launches."""


class DashboardScreen(Screen):
    """The main screen. Redraws are held back while a dialog is open (a grid
    changing under a form is distracting) and caught up when it closes."""

    def on_screen_resume(self) -> None:
        app = self.app
        if isinstance(app, NodeDashboard):
            app.redraw()


class NodeDashboard(App[int]):
    #: absolute, so that a subclass defined elsewhere (tests, screenshots) finds it too
    CSS_PATH = str(Path(__file__).with_name("dashboard.tcss"))
    TITLE = "tpnode-tui"

    BINDINGS = [
        Binding("l", "launch", "Launch", id="launch", tooltip="Launch a job on free cards"),
        Binding("v", "reserve", "Reserve", id="reserve", tooltip="Hold cards for a person for a while"),
        Binding("s", "stop", "Stop", id="stop",
                tooltip="Stop the selected card's job, or the highlighted row's (asks first)"),
        Binding("r", "reclaim", "Reclaim", id="reclaim", tooltip="Remove exited jobs (asks first)"),
        Binding("c", "cancel_launch", "Cancel launch", id="cancel-launch",
                tooltip="Cancel the launch selected in the jobs table (queued, or waiting for the lock)"),
        Binding("p", "pause", "Pause", id="pause", tooltip="Stop polling the node"),
        Binding("p", "resume", "Resume", id="resume", tooltip="Poll the node again"),
        Binding("b", "demo_blind", "Blind", id="demo-blind",
                tooltip="Demo: toggle 'use from outside cannot be probed'"),
        Binding("x", "demo_external", "Outside use", id="demo-external",
                tooltip="Demo: put or remove an outside process on the selected card"),
        Binding("enter", "focus_detail", "Detail", show=False, id="focus-detail",
                tooltip="Move into the detail pane"),
        Binding("escape", "focus_grid", "Grid", show=False, id="focus-grid", tooltip="Back to the card grid"),
        Binding("question_mark", "help", "Help", id="help", tooltip="Every key and card state explained"),
        Binding("q", "quit", "Quit", id="quit",
                tooltip="Leave the dashboard; jobs keep running, launches not started yet are dropped (asks first)"),
    ]

    def __init__(
        self,
        allocator: GpuAllocator,
        *,
        demo=None,
        readonly: bool = False,
        interval: float = 1.0,
        default_command: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.allocator = allocator
        self.demo = demo
        self.readonly = readonly
        self.interval = max(0.2, interval)
        self.default_command = default_command
        self.clock = clock
        self.snapshot: Optional[NodeSnapshot] = None
        self.queue = LaunchQueue(changed=self._launches_changed)
        self.polls = 0
        self._paused = False
        self._polling = False
        self._poll_again = False
        self._draining = False
        self._timer: Optional[Timer] = None
        self._stale_since: Optional[float] = None
        self._stale_error = ""
        #: what the footer and the detail pane were last given, so that a poll
        #: that changes nothing redraws neither (see tpnode_tui/tui/redraw.py)
        self._bindings_shown: Optional[tuple[Optional[bool], ...]] = None
        self._detail_shown: object = None
        #: the terminal's height as the last resize gave it (``self.size`` lags behind it)
        self._rows: Optional[int] = None

    # -- layout -----------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return DashboardScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="summary")
        yield Static(id="stale-banner", classes="banner")
        yield Static(id="blind-banner", classes="banner")
        yield Static(id="no-cards")
        yield CardGrid(id="grid")
        yield DetailPane(id="detail")
        yield JobsTable(id="jobs")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(CardGrid).focus()
        self.query_one(DetailPane).border_title = "Selected card (enter to scroll, escape back)"
        self.query_one(JobsTable).border_title = "Jobs, reservations and launches not started yet"
        self.set_interval(1.0, self._tick)
        self.redraw()
        if self.demo is not None:
            self.run_worker(self._open_demo(), group="demo", exit_on_error=False)
        self.poll_now()

    # -- polling ----------------------------------------------------------------

    def poll_now(self) -> None:
        """Poll at once, or right after the poll in flight: polls never overlap."""
        if self._polling:
            self._poll_again = True
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._polling = True
        self.run_worker(self._poll(), group="poll", exit_on_error=False)

    async def _poll(self) -> None:
        try:
            if await self._take_snapshot():
                self._start_drain()
        finally:
            self._polling = False
            again, self._poll_again = self._poll_again, False
            if not self._paused and self.is_running:
                self._timer = self.set_timer(0.01 if again else self.interval, self.poll_now)

    async def _take_snapshot(self) -> bool:
        try:
            snap = await self.allocator.snapshot()
        except Exception as e:  # a poll must never take the dashboard down
            if not isinstance(e, TpnodeError):
                log.warning("poll failed", exc_info=True)
            if self._stale_since is None:
                self._stale_since = self.clock()
            self._stale_error = str(e) or type(e).__name__
            self.polls += 1
            self.redraw()
            return False
        # The one place readings cross to the screen: every string in them
        # (process names, labels, owners, driver text) is escaped from here on.
        self.snapshot = printable_view(snap)
        self._stale_since = None
        self._stale_error = ""
        self.polls += 1
        self.redraw()
        return True

    def _start_drain(self) -> None:
        """Retry the queued launches, in their own worker and one round at a
        time: the queue's order is the order of the attempts, and a round that
        waits on the lock holds back only the queue, never the polls."""
        if self._draining or not len(self.queue) or self.readonly:
            return
        self._draining = True
        self.run_worker(self._drain_queue(), group="queue", exit_on_error=False)

    async def _drain_queue(self) -> None:
        try:
            outcomes = await self.queue.drain(self.allocator.launch, self.clock())
        finally:
            self._draining = False
        for outcome in outcomes:
            if outcome.launched is None:
                self.notify(f"{outcome.spec.run_id} left the queue: {outcome.error}",
                            title="Queued launch dropped", severity="error", timeout=12)
            else:
                self._report_outcome(outcome, "Queued launch started", "")
        if outcomes:
            self.poll_now()

    def _launches_changed(self) -> None:
        """A launch began, took the lock or ended: the jobs table lists it as it is
        now. Called from inside the launch, lock held: the redraw is only posted."""
        self.call_later(self.redraw)

    def _tick(self) -> None:
        """Once a second: the header's age and the lock's waiting line move even between polls."""
        self._redraw_header()

    @property
    def stale_since(self) -> Optional[float]:
        """Unix time of the first failed poll in the current run of failures; None while polls succeed."""
        return self._stale_since

    def _lock_line(self) -> Optional[str]:
        """What the allocation lock means for a launch now. This process's own
        wait comes first (it changes between polls); else who holds the lock, or
        that Redis cannot be reached, as the last snapshot found: a launch from
        here would wait, and the operator should know before pressing l. While
        an allocation of this dashboard holds the lock, the holder is itself."""
        lock = self.allocator.lock
        if lock.waiting:
            return printable(lock.waiting)
        if self.snapshot is None or lock.locked():
            return None
        return self.snapshot.lock_state

    @property
    def poll_state(self) -> PollState:
        return PollState(
            paused=self._paused,
            readonly=self.readonly,
            stale_since=self._stale_since,
            stale_error=self._stale_error,
            lock_waiting=self._lock_line(),
            unverified_allowed=self.allocator.settings.allow_unverified,
        )

    # -- drawing ----------------------------------------------------------------

    def _on_main_screen(self) -> bool:
        """Whether the main screen shows; never while the app shuts down, when the
        once-a-second tick or a finishing poll may still come after its widgets are gone."""
        return self.is_running and bool(self.screen_stack) and self.screen is self.screen_stack[0]

    def _redraw_header(self) -> None:
        if self._on_main_screen():
            text = header_text(self.snapshot, self.clock(), self.poll_state, compact=self._short())
            update(self.query_one("#header", Static), text)

    def _short(self) -> bool:
        return (self._rows if self._rows is not None else self.size.height) < SHORT_ROWS

    def on_resize(self, event: Resize) -> None:
        """A short terminal (80x24) drops the summary and the header's second
        line, shortens the blind banner, and shrinks the detail pane, so the jobs
        table stays on screen. The event's size, not ``self.size``: this handler
        runs before Textual's own, which is the one that updates ``self.size``."""
        self._rows = event.size.height
        self.screen_stack[0].set_class(self._short(), "-short")
        self.redraw()

    def redraw(self) -> None:
        if not self._on_main_screen():
            return
        now = self.clock()
        poll = self.poll_state
        snap = self.snapshot
        self._redraw_header()
        shown = dict(banner_lines(snap, poll, compact=self._short()))
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
        stale = self._stale_since is not None
        if empty:
            update(no_cards, no_cards_text(snap))
        grid.show(snap.cards, now, stale)
        self._redraw_detail()
        jobs = self.query_one(JobsTable)
        jobs.set_class(stale, "-stale")
        waiting = self.allocator.lock.waiting
        jobs.show(snap.jobs, self.queue.pending(), now, printable(waiting) if waiting else None)
        # The footer is rebuilt, every key re-mounted, on each refresh_bindings:
        # done every poll, that was the largest part of an idle dashboard's CPU.
        if self._binding_states() != self._bindings_shown:
            self.refresh_bindings()

    def _binding_states(self) -> tuple[Optional[bool], ...]:
        return tuple(self.check_action(b.action, ()) for b in self.BINDINGS)

    def refresh_bindings(self) -> None:
        # The footer ignores a refresh while the terminal is not focused (or the
        # app not yet running): remember nothing then, so the next poll refreshes it.
        shown = self.is_running and self.app_focus
        self._bindings_shown = self._binding_states() if shown else None
        super().refresh_bindings()

    def _redraw_detail(self) -> None:
        pane = self.query_one(DetailPane)
        card = self.selected_card()
        if card is None:
            text = no_cards_text(self.snapshot) if self.snapshot else Text("")
        else:
            stale = f"the last poll failed: {self._stale_error}" if self._stale_since is not None else None
            text = describe_card(card, self.clock(), self.allocator.settings.mem_busy_mib, stale)
        if not same(self._detail_shown, text):
            pane.show(text)
            self._detail_shown = text

    def _alive(self, widget: Widget) -> bool:
        """Messages still arrive while the app shuts down, after its widgets are gone."""
        return bool(self.screen_stack) and widget.is_attached

    def on_card_grid_selected(self, message: CardGrid.Selected) -> None:
        if not self._alive(message.grid):
            return
        if self._on_main_screen() and self.snapshot is not None:
            self._redraw_detail()
        self.refresh_bindings()

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        """Following a job row in the table selects its first card, so s stops what is highlighted."""
        table = message.data_table
        if not self._alive(table):
            return
        job = self._job_for_row()
        if job is not None and job.live and job.gpus and table.has_focus:
            self.query_one(CardGrid).select(job.gpus[0])
        self.refresh_bindings()

    def on_descendant_focus(self, event) -> None:
        if self._alive(event.widget):
            self.refresh_bindings()

    # -- what the keys act on -----------------------------------------------------

    def selected_card(self) -> Optional[CardView]:
        if self.snapshot is None:
            return None
        index = self.query_one(CardGrid).selected
        return next((c for c in self.snapshot.cards if c.index == index), None)

    def _job_for_row(self) -> Optional[JobState]:
        key = self.query_one(JobsTable).selected_key()
        if self.snapshot is None or not key or not key.startswith(JOB_PREFIX):
            return None
        name = key[len(JOB_PREFIX):]
        return next((j for j in self.snapshot.jobs if j.name == name), None)

    def stop_target(self) -> Optional[JobState]:
        """The live job the stop key acts on: the highlighted row while the jobs
        table has the focus, else the selected card's job."""
        if self._stale_since is not None:
            return None
        if self.query_one(JobsTable).has_focus:
            job = self._job_for_row()
            return job if job is not None and job.live else None
        card = self.selected_card()
        if card is None or card.job is None or not card.job.live:
            return None
        return card.job

    def exited_jobs(self) -> list[JobState]:
        return [j for j in self.snapshot.jobs if not j.live] if self.snapshot else []

    def selected_launch(self) -> Optional[str]:
        """The run id of the launch not started yet (queued or under way) highlighted in the jobs table."""
        table = self.query_one(JobsTable)
        key = table.selected_key()
        if not table.has_focus or not key or not key.startswith(LAUNCH_PREFIX):
            return None
        run_id = key[len(LAUNCH_PREFIX):]
        return run_id if any(p.spec.run_id == run_id for p in self.queue.pending()) else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        if action in NODE_ACTIONS and self.readonly:
            return False
        if action == "stop":
            return self.stop_target() is not None
        if action == "reclaim":
            return bool(self.exited_jobs()) and self._stale_since is None
        if action == "cancel_launch":
            return self.selected_launch() is not None
        if action == "pause":
            return not self._paused
        if action == "resume":
            return self._paused
        if action == "demo_blind":
            return self.demo is not None
        if action == "demo_external":
            return self.demo is not None and self.selected_card() is not None
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is not self.screen_stack[0]:
            return
        for action, (title, help_) in PALETTE.items():
            if self.check_action(action, ()):
                yield SystemCommand(title, help_, getattr(self, f"action_{action}"))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: Optional[float] = None, markup: bool = True) -> None:
        """Every notification as plain text, escaped: most messages quote an
        engine's, a driver's or another user's words, and in markup a stray
        "[/]" would fail to render and "[@click=...]" would be a button."""
        super().notify(printable_lines(message), title=printable(title), severity=severity,
                       timeout=timeout, markup=False)

    def _refused(self, what: str) -> bool:
        """The read-only guard inside each action, for calls that bypass the keys."""
        if self.readonly:
            self.notify(f"read-only dashboard: {what} is refused (started with --readonly)",
                        severity="warning")
        return self.readonly

    # -- actions ------------------------------------------------------------------

    def action_focus_detail(self) -> None:
        self.query_one(DetailPane).focus()

    def action_focus_grid(self) -> None:
        self.query_one(CardGrid).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(demo=self.demo is not None, readonly=self.readonly))

    async def action_quit(self) -> None:
        """Quit; with launches not started yet (queued, or under way), ask first,
        naming them: they live only in this dashboard, and whoever asked for them
        may be waiting."""
        pending = self.queue.pending()
        if not pending:
            self.exit()
            return
        if isinstance(self.screen, QuitScreen):
            return  # already asking
        state = {QUEUED: "queued", WAITING: "waiting for the allocation lock",
                 PLACING: "being placed now: stop and reclaim it if it shows up"}
        names = [f"{p.spec.run_id} ({state[p.state]})" for p in pending]
        many = len(names) > 1
        count = f"{len(names)} launch{'es' if many else ''} not started yet"
        jobs = ("The demo stops its own jobs." if self.demo is not None
                else "Running jobs and reservations keep running.")
        body = (f"{count} will be dropped: {', '.join(names)}.\n\nThey live only in this "
                f"dashboard; nothing else will start {'them' if many else 'it'}. {jobs}")
        self.push_screen(QuitScreen(f"Quit and drop {count}?", body, yes="Quit"),
                         lambda yes: self.exit() if yes else None)

    def action_pause(self) -> None:
        self._paused = True
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.notify("Polling paused: the grid is not updated until you press p again.", timeout=4)
        self.redraw()

    def action_resume(self) -> None:
        self._paused = False
        self.notify("Polling resumed.", timeout=3)
        self.poll_now()
        self.redraw()

    def _capacity_line(self) -> str:
        """What the form's user needs to know before asking: how much is free now."""
        if self.snapshot is None and self._stale_since is not None:
            return f"The node could not be read yet ({self._stale_error}). The allocator reads it afresh."
        if self.snapshot is None:
            return "The node has not been read yet."
        if self._stale_since is not None:
            return "Free cards are unknown: the last poll failed. The allocator reads the node afresh."
        occ = self.snapshot.occupancy
        free = occ.free
        cards = f" ({cards_words(free)})" if free else ""
        line = f"{len(free)} of {occ.total} cards free now{cards}"
        if occ.external_probe_ok:
            return line + "."
        if self.allocator.settings.allow_unverified:
            return (line + ", unverified: use from outside cannot be probed, and they are handed "
                    "out anyway (TUNEPLANE_ALLOW_UNVERIFIED).")
        return (f"Use from outside cannot be probed, so no card can be checked free ({len(free)} of "
                f"{occ.total} look free): a launch waits until the probe works again. Queued, it "
                "then starts by itself.")

    def _waits_for_probe(self) -> bool:
        """Whether launches wait because use from outside cannot be probed, as the last poll saw it."""
        snap = self.snapshot
        return (snap is not None and not snap.occupancy.external_probe_ok
                and not self.allocator.settings.allow_unverified)

    def _total(self) -> int:
        return self.snapshot.occupancy.total if self.snapshot else 0

    def action_launch(self) -> None:
        if self._refused("launching"):
            return
        screen = LaunchScreen(
            total=self._total(),
            docker=self.allocator.runtime.name == "docker",
            default_command=self.default_command,
            run_id=new_run_id(),
            owner=default_owner(),
            context=self._capacity_line(),
        )
        self.push_screen(screen, self._launch_chosen)

    def _launch_chosen(self, spec: Optional[JobSpec]) -> None:
        if spec is not None:
            self.run_worker(self._launch(spec), group="launch", exit_on_error=False)

    async def _launch(self, spec: JobSpec) -> None:
        """Launch from the dialog, listed in the jobs table (and cancellable) while under way."""
        try:
            outcome = await self.queue.attempt(spec, self.allocator.launch, self.clock())
        except BadRequest as e:
            self._failed("Launch refused", e)
            return
        if isinstance(outcome.error, NoCapacity) and not outcome.cancelled:
            body = (f"{outcome.error}.\n\nQueue {spec.run_id}? It starts by itself "
                    f"{self._starts_when(spec)}, after the launches queued before it.")
            title = "No card can be checked free now" if self._waits_for_probe() else "No capacity now"
            self.push_screen(ConfirmScreen(title, body, yes="Queue it"),
                             lambda yes: self._enqueue(spec) if yes else None)
            return
        self._report_outcome(outcome, "Launched", "Launch refused")

    def _report_outcome(self, outcome: Outcome, started: str, refused: str) -> None:
        """Say what became of a launch under way; an abandoned one was already
        spoken for by its cancel."""
        if outcome.abandoned:
            return
        if outcome.error is not None:
            if not (outcome.cancelled and isinstance(outcome.error, NoCapacity)):
                self._failed(refused, outcome.error)
        elif outcome.cancelled and not outcome.launched.existing:
            self.notify(f"{outcome.spec.run_id} was cancelled while its launch was under way, and it "
                        f"got {cards_words(outcome.launched.gpus)} anyway; stop it (s) if it "
                        "is not wanted.", title="Cancelled too late", severity="warning", timeout=12)
        else:
            self._report_launched(outcome.launched, started)
        self.poll_now()

    def _starts_when(self, spec: JobSpec) -> str:
        if self._waits_for_probe():
            return f"once the probe works again and {cards_words(spec.cards)} can be checked free"
        return f"as soon as {cards_words(spec.cards)} {'is' if spec.cards == 1 else 'are'} free"

    def _enqueue(self, spec: JobSpec) -> None:
        try:
            self.queue.add(spec, self.clock())
        except BadRequest as e:
            self.notify(str(e), severity="error")
            return
        self.notify(f"{spec.run_id} is queued (#{self.queue.position(spec.run_id)}); "
                    f"it starts {self._starts_when(spec)}.", title="Queued")
        self.redraw()

    def _report_launched(self, result: Launched, what: str) -> None:
        cards = cards_words(result.gpus)
        if result.existing:
            self.notify(f"{result.job.run_id} already holds {cards}; nothing new was started.",
                        title=what)
        else:
            self.notify(f"{result.job.run_id} got {cards}.", title=what)
        if result.warning:
            self.notify(result.warning, title="Unverified cards", severity="warning", timeout=12)

    def _failed(self, title: str, error: Exception) -> None:
        if not isinstance(error, TpnodeError):
            log.warning("%s", title, exc_info=error)
            message = f"{type(error).__name__}: {error}"
        else:
            message = str(error)
        self.notify(message, title=title, severity="error", timeout=12)

    def action_reserve(self) -> None:
        if self._refused("reserving"):
            return
        screen = ReserveScreen(total=self._total(), owner=default_owner(), run_id=new_run_id("rsv"),
                               context=self._capacity_line())
        self.push_screen(screen, self._reserve_chosen)

    def _reserve_chosen(self, request: Optional[ReserveRequest]) -> None:
        if request is not None:
            self.run_worker(self._reserve(request), group="launch", exit_on_error=False)

    async def _reserve(self, r: ReserveRequest) -> None:
        """A reservation is a launch too: listed, and cancellable, while under way."""
        async def reserve(_spec: JobSpec, locked) -> Launched:
            return await self.allocator.reserve(r.cards, r.duration_s, r.owner, r.run_id, locked=locked)

        shown = JobSpec(run_id=r.run_id, cards=r.cards, kind="reservation", owner=r.owner)
        try:
            outcome = await self.queue.attempt(shown, reserve, self.clock())
        except BadRequest as e:
            self._failed("Reservation refused", e)
            return
        self._report_outcome(outcome, f"Reserved for {r.owner}", "Reservation refused")

    def action_stop(self) -> None:
        if self._refused("stopping"):
            return
        job = self.stop_target()
        if job is None:
            self.notify(self._nothing_to_stop(), severity="warning")
            return
        if self.query_one(JobsTable).has_focus:
            where = "Highlighted in the jobs table"
        else:
            where = f"On the selected card {self.query_one(CardGrid).selected}"
        body = (f"{where}: {job.run_id} ({job.kind}, owner {job.owner or 'not recorded'}, "
                f"{cards_words(job.gpus)}).\n\n"
                "Stop it? Its processes are ended; its cards are free once they have exited.")
        self.push_screen(ConfirmScreen(f"Stop {job.run_id}?", body, yes="Stop it"),
                         lambda yes: self._stop_confirmed(job) if yes else None)

    def _nothing_to_stop(self) -> str:
        """Why s does nothing, worded by what is selected: a card, or a row of the jobs table."""
        if self._stale_since is not None:
            return "Nothing can be stopped while the last poll failed: which job runs where is unknown."
        table = self.query_one(JobsTable)
        if table.has_focus:
            key = table.selected_key() or ""
            if key.startswith(LAUNCH_PREFIX):
                return "The highlighted row is a launch not started yet, not a running job: c cancels it."
            job = self._job_for_row()
            if job is not None:
                return (f"The highlighted row, {job.run_id}, has already ended: nothing to stop "
                        "(r reclaims it).")
            return "The highlighted row is not a running job: nothing to stop."
        card = self.selected_card()
        if card is None:
            return "No card is selected: nothing to stop."
        return f"The selected card {card.index} holds no running job to stop."

    def _stop_confirmed(self, job: JobState) -> None:
        self.run_worker(self._stop(job), group="action", exit_on_error=False)

    async def _stop(self, job: JobState) -> None:
        try:
            await self.allocator.stop(job.run_id or job.name)
        except Exception as e:
            self._failed(f"Could not stop {job.run_id}", e)
            return
        self.notify(f"{job.run_id} stopped; it frees {cards_words(job.gpus)} once it has exited.",
                    title="Stopped")
        self.poll_now()

    def action_reclaim(self) -> None:
        if self._refused("reclaiming"):
            return
        exited = self.exited_jobs()
        if not exited:
            self.notify("Nothing to reclaim: no job has exited.")
            return
        lines = []
        for job in exited:
            code = "unknown" if job.exit_code is None else job.exit_code
            lines.append(f"  {job.run_id}  ({job.kind}, {job.status}, exit code {code})")
        body = ("Remove the records of these exited jobs? Running jobs are never touched.\n\n"
                + "\n".join(lines))
        self.push_screen(ConfirmScreen(f"Reclaim {len(exited)} exited job(s)?", body, yes="Reclaim"),
                         lambda yes: self._reclaim_confirmed(exited) if yes else None)

    def _reclaim_confirmed(self, jobs: list[JobState]) -> None:
        self.run_worker(self._reclaim(jobs), group="action", exit_on_error=False)

    async def _reclaim(self, jobs: list[JobState]) -> None:
        """Only the listed run ids, one by one: a job restarted since the list was
        shown is live again and is refused by the allocator, not removed."""
        removed, kept = [], []
        for run_id in dict.fromkeys(j.run_id or j.name for j in jobs):
            try:
                removed += [j.run_id for j in await self.allocator.reclaim(run_id)]
            except JobNotFound:
                pass  # reclaimed elsewhere meanwhile: the outcome is the same
            except Conflict as e:  # live again since the list was shown
                kept.append(str(e))
            except Exception as e:
                self._failed(f"Could not reclaim {run_id}", e)
        if removed:
            self.notify("Removed " + ", ".join(dict.fromkeys(removed)) + ".", title="Reclaimed")
        for why in kept:
            self.notify(f"Not removed: {why}", severity="warning", timeout=10)
        self.poll_now()

    def action_cancel_launch(self) -> None:
        if self._refused("cancelling"):
            return
        run_id = self.selected_launch()
        if run_id is None:
            self.notify("Select a queued or waiting launch in the jobs table first.", severity="warning")
            return
        done = self.queue.cancel(run_id)
        if done is Cancel.ABANDONED:
            self.notify(f"{run_id} is abandoned: it was still waiting for the allocation lock, so no "
                        "card was picked and nothing was started.", title="Cancelled")
        elif done is Cancel.TOO_LATE:
            self.notify(f"{run_id} already holds the allocation lock and is being placed: too late to "
                        "cancel. If it finds no room it is dropped; if it gets cards it starts, and "
                        "you can stop it (s).", title="Too late to cancel", severity="warning",
                        timeout=12)
        elif done is Cancel.DROPPED:
            self.notify(f"{run_id} is no longer queued.", title="Cancelled")
        self.redraw()

    def action_demo_blind(self) -> None:
        if self.demo is None:
            return
        blind = self.demo.toggle_blind()
        self.notify("Probe-blind: use from outside can no longer be seen." if blind
                    else "The probe sees use from outside again.", title="Demo", timeout=4)
        self.poll_now()

    def action_demo_external(self) -> None:
        card = self.selected_card()
        if self.demo is None or card is None:
            return
        on = self.demo.toggle_external(card.index)
        self.notify(f"An outside process now uses card {card.index}." if on
                    else f"Card {card.index} has no outside user any more.", title="Demo", timeout=4)
        self.poll_now()

    async def _open_demo(self) -> None:
        """Start the demo's job and reservation through the allocator, like any launch."""
        for spec in self.demo.opening_jobs():
            try:
                await self.allocator.launch(spec)
            except Exception as e:
                self._failed(f"Demo could not start {spec.run_id}", e)
        self.poll_now()


async def stop_demo_jobs(allocator: GpuAllocator) -> None:
    """The demo's jobs are its own (its own state dir): stop the live ones on quit."""
    try:
        jobs = await allocator.runtime.ps()
    except TpnodeError:
        log.warning("cannot list the demo's jobs to stop them", exc_info=True)
        return
    for job in jobs:
        if job.live:
            try:
                await allocator.stop(job.run_id or job.name)
            except TpnodeError:
                log.warning("could not stop demo job %s", job.run_id, exc_info=True)
