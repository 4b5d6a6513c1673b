"""The dashboard app: shows the node as it reads, turns keys into calls on the node.

It holds no truth of its own and talks to nothing but a :class:`Node`: the
readings arrive from ``node.views()`` (the node's service polls, once for
every reader), and every action is one call on the node, checked there
against who asks, exactly as the CLI's are, so a dashboard and a shell can
never hand out one card twice. The queue and the launches under way are the
node's too, listed in each snapshot. The only state kept here is
presentation (the selection, a paused flag) and which of the launches this
dashboard asked for, so that it can say what became of them.

The app keeps what is app-wide: the node, the keys (tui/actions.py), and the
workers. What the node says is followed by plain objects (tui/follow.py), the
launches asked for are tracked by another (tui/launches.py), and the main
screen lays out and draws the picture (tui/screens/main.py). Readings and
actions run in separate workers: a launch can wait on the allocation lock for
as long as another process holds it (forever while Redis is down), and the
operator must go on seeing the node, and why it waits, meanwhile. An action
that asks first runs as one worker from the question to the answer
(``push_screen_wait``), so what it asks and what it then does read in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from textual import work
from textual.app import App, SystemCommand
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.screen import Screen

from tpnode_tui.model.errors import Conflict, JobNotFound, NoCapacity, NotAllowed, TpnodeError
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, Drain, Evicted, EvictReport
from tpnode_tui.port.node import Node
from tpnode_tui.port.types import AgentUnavailable, LaunchRequest, LaunchResult, You, is_owner, new_run_id
from tpnode_tui.text.printable import printable, printable_lines, printable_view
from tpnode_tui.text.render import format_duration
from tpnode_tui.tui.follow.history import HistoryFollower
from tpnode_tui.tui.follow.launches import LaunchTracker, LeftQueue, Refused, Started, left_queue_notice
from tpnode_tui.tui.follow.log import LogFollower
from tpnode_tui.tui.follow.readings import RECONNECT_FIRST_S, RECONNECT_MOST_S, NodeFollower
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.drain import DrainScreen
from tpnode_tui.tui.screens.dialogs.extend import ExtendScreen
from tpnode_tui.tui.screens.dialogs.help import HelpScreen
from tpnode_tui.tui.screens.dialogs.launch import LaunchScreen
from tpnode_tui.tui.screens.dialogs.quit import QuitScreen
from tpnode_tui.tui.screens.dialogs.reserve import ReserveScreen
from tpnode_tui.tui.screens.main import MainScreen
from tpnode_tui.tui.widgets.detail import DetailPane
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.jobs import WAITING
from tpnode_tui.tui.wording.keys import ACTIONS, BINDINGS, BY_NAME
from tpnode_tui.tui.wording.operators import (
    NOT_GONE,
    drain_context,
    evict_question,
    evicting_words,
    fates,
    kill_question,
    undrain_question,
)
from tpnode_tui.tui.wording.questions import (
    capacity_line,
    free_profiles,
    nothing_to_stop,
    queue_question,
    reclaim_question,
    starts_when,
    stop_question,
)

if TYPE_CHECKING:  # the demo's scene, with its allocator, loads only with the demo
    from tpnode_tui.demo.scene import DemoScene

log = logging.getLogger(__name__)


def served_from(node: Node, demo: bool = False) -> str:
    """Where the node is served from, for the header."""
    if node.via == "local" and demo:
        return "demo node, served in-process"
    return node.where


class NodeDashboard(App[int]):
    #: absolute, so that a subclass defined elsewhere (tests, screenshots) finds it too
    CSS_PATH = str(Path(__file__).with_name("dashboard.tcss"))
    TITLE = "tpnode-tui"

    #: every key, as the table of actions describes it
    BINDINGS = BINDINGS

    def __init__(
        self,
        node: Node,
        *,
        demo: Optional[DemoScene] = None,
        readonly: bool = False,
        default_command: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
        reconnect_s: tuple[float, float] = (RECONNECT_FIRST_S, RECONNECT_MOST_S),
    ) -> None:
        super().__init__()
        self.node = node
        self.demo = demo
        self.readonly = readonly
        self.default_command = default_command
        self.clock = clock
        #: the node's readings as they come, and how fresh what is shown is
        self.follower = NodeFollower(
            node, clock=clock, reconnect_s=reconnect_s, on_reading=self._read, on_lost=self._lost
        )
        #: the node's log, while the events pane shows it
        self.node_log = LogFollower(node, reconnect_s=reconnect_s, changed=self._log_changed)
        #: each card's last hour, as last fetched
        self.history = HistoryFollower(node, clock=clock)
        #: the launches this dashboard asked for, to say what became of them
        self.launches = LaunchTracker()
        #: the node's picture, laid out and redrawn: the default screen
        self.main = MainScreen(
            follower=self.follower,
            node_log=self.node_log,
            history=self.history,
            readonly=readonly,
            served=served_from(node, demo is not None),
            via="agent" if node.via == "agent" else "in-process",
            ready=self._follow,
        )
        #: a dry run for evict is out: its question is on its way, a second would double it
        self.evict_asking = False

    def get_default_screen(self) -> Screen[Any]:
        return self.main

    def _follow(self) -> None:
        """Follow the node, its cards' history and the demo, once the main screen's widgets are made."""
        if self.demo is not None:
            self.run_worker(self._open_demo(), group="demo", exit_on_error=False)
        self._follow_node()
        self.run_worker(self.history.follow(self.main), group="history", exclusive=True, exit_on_error=False)

    def on_resize(self, event: Resize) -> None:
        self.main.terminal_resized(event.size)

    @property
    def agent(self) -> bool:
        """Whether the node is served by its agent (which keeps the queue), not by this process."""
        return self.node.via == "agent"

    # -- what the node says ----------------------------------------------------------

    @property
    def snapshot(self) -> Optional[NodeSnapshot]:
        """The last reading's snapshot, escaped (None until one was made)."""
        return self.follower.snapshot

    @property
    def you(self) -> Optional[You]:
        """Who the node says is asking."""
        return self.follower.you

    @property
    def readings(self) -> int:
        """Readings received (each poll the node makes, and each change to its queue)."""
        return self.follower.readings

    @property
    def stale_since(self) -> Optional[float]:
        """Unix time since when what is shown may be out of date (polls failing, or
        the node's agent gone); None while readings come and succeed."""
        return self.follower.stale_since

    def _follow_node(self) -> None:
        self.run_worker(self.follower.follow(), group="readings", exclusive=True, exit_on_error=False)

    def _read(self, first: bool) -> None:
        if first:
            self.history.wake()  # the first reading: now there are cards to fetch the history of
        self._follow_queued()
        self.main.redraw()

    def _lost(self) -> None:
        self.main.redraw()

    def _follow_queued(self) -> None:
        """Say when a launch queued from here has left the queue: started (it
        shows as a job), or dropped or cancelled elsewhere (the node's log says why)."""
        if self.snapshot is None:
            return
        for outcome in self.launches.follow(self.snapshot, self.readings):
            if isinstance(outcome, Started):
                self.notify(f"{outcome.run_id} got {outcome.holding}.", title="Queued launch started")
            else:
                self.run_worker(self._left_queue(outcome), group="queued", exit_on_error=False)

    async def _left_queue(self, left: LeftQueue) -> None:
        try:
            entries, _everyone = await self.node.audit(max(60.0, self.clock() - left.queued_at + 60))
        except TpnodeError as e:
            self.notify(
                f"{left.run_id} is no longer queued, and the node's log cannot be read to say why: {e}",
                title="Queued launch",
                severity="warning",
                timeout=12,
            )
            return
        notice = left_queue_notice(left.run_id, entries)
        self.notify(notice.message, title=notice.title, severity=notice.severity, timeout=notice.timeout)

    # -- the node's log ---------------------------------------------------------------

    def _show_events(self, card: Optional[int]) -> None:
        """Follow the node's log (about ``card``, or every card) in the events pane,
        from an hour back; the pane keeps the newest EVENTS_KEPT entries."""
        self.node_log.open(card)
        self.main.show_log(card)
        self.run_worker(self.node_log.follow(card), group="events", exclusive=True, exit_on_error=False)
        self.main.redraw_log()
        self.refresh_bindings()

    def _hide_events(self) -> None:
        self.workers.cancel_group(self, "events")
        self.node_log.close()
        self.main.hide_log()
        self.refresh_bindings()

    def _log_changed(self, burst: bool) -> None:
        self.main.log_changed(burst)

    def on_card_grid_selected(self, message: CardGrid.Selected) -> None:
        """Kept to one card, the log follows the selection (the main screen draws the rest)."""
        log_card = self.node_log.card
        if message.grid.is_attached and self.node_log.shown and log_card is not None and log_card != message.index:
            self._show_events(message.index)

    # -- what the keys act on, and whether they are offered ---------------------------------

    def selected_card(self) -> Optional[CardView]:
        return self.main.selected_card()

    def stop_target(self) -> Optional[JobState]:
        """The live job the stop and extend keys act on: the highlighted row while
        the jobs table has the focus, else the selected card's job."""
        if self.stale:
            return None
        if self.main.jobs_focused:
            job = self.main.job_for_row()
            return job if job is not None and job.live else None
        card = self.selected_card()
        if card is None or card.job is None or not card.job.live:
            return None
        return card.job

    def extend_target(self) -> Optional[JobState]:
        job = self.stop_target()
        return job if job is not None and job.kind == "reservation" and job.expires_at else None

    def mine(self, owner_uid: Optional[int], owner: str) -> bool:
        """Whether the node would let the caller end or change what ``owner``
        holds: theirs (by uid where recorded, else by name), or anyone's for an
        operator. Only to offer keys; the node decides, and says why not."""
        you = self.you
        return you is not None and (you.operator or is_owner(owner_uid, owner, you.uid, you.user))

    def exited_jobs(self) -> list[JobState]:
        """The exited jobs the caller may reclaim: their own, or all for an operator."""
        if self.snapshot is None:
            return []
        return [j for j in self.snapshot.jobs if not j.live and self.mine(j.uid, j.owner)]

    def selected_launch(self) -> Optional[QueuedLaunch]:
        """The launch not started yet (queued or under way) highlighted in the jobs table."""
        return self.main.selected_launch()

    def triage_card(self) -> Optional[CardView]:
        """The card drain, undrain and evict act on: the selected one, while the
        node answers and is read (an operator acts on what is there now)."""
        return None if self.stale else self.selected_card()

    @property
    def operator(self) -> bool:
        """Whether the node says the person at the dashboard operates it."""
        return self.you is not None and self.you.operator

    @property
    def paused(self) -> bool:
        return self.follower.paused

    @property
    def stale(self) -> bool:
        return self.stale_since is not None

    @property
    def has_demo(self) -> bool:
        return self.demo is not None

    @property
    def log_shown(self) -> bool:
        return self.node_log.shown

    @property
    def log_card(self) -> Optional[int]:
        return self.node_log.card

    def check_action(self, action: str, parameters: tuple[object, ...]) -> Optional[bool]:
        """Whether a key shows and works now: the table of actions says when."""
        row = BY_NAME.get(action)
        return True if row is None else row.offered(self)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is not self.main:
            return
        for action in ACTIONS:
            if action.palette is not None and action.offered(self):
                title, help_ = action.palette
                yield SystemCommand(title, help_, getattr(self, f"action_{action.name}"))

    # -- saying things ------------------------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: Optional[float] = None,
        markup: bool = True,
    ) -> None:
        """Every notification as plain text, escaped: most messages quote an
        engine's, a driver's or another user's words, and in markup a stray
        "[/]" would fail to render and "[@click=...]" would be a button."""
        super().notify(
            printable_lines(message), title=printable(title), severity=severity, timeout=timeout, markup=False
        )

    def _failed(self, title: str, error: BaseException) -> None:
        if not isinstance(error, TpnodeError):
            log.warning("%s", title, exc_info=error)
            message = f"{type(error).__name__}: {error}"
        else:
            message = str(error)
        self.notify(message, title=title, severity="error", timeout=12)

    def _refused(self, what: str) -> bool:
        """The guard inside each action, for calls that bypass the keys: a
        read-only dashboard, or a node that is not answering, does nothing."""
        if self.readonly:
            self.notify(f"read-only dashboard: {what} is refused (started with --readonly)", severity="warning")
            return True
        not_answering = self.follower.not_answering(what)
        if not_answering is not None:
            self.notify(not_answering, title="Not answering", severity="warning", timeout=10)
            return True
        return False

    def _not_operator(self, what: str) -> bool:
        """The node refuses anyway; this only spares a question that cannot end well
        (an action called from the palette after the person's role changed)."""
        if self.operator:
            return False
        self.notify(f"only an operator of this node may {what} (the header says who you are)", severity="warning")
        return True

    # -- moving about, help, pause, quit ------------------------------------------------------

    def action_focus_detail(self) -> None:
        self.query_one(DetailPane).focus()

    def action_focus_grid(self) -> None:
        self.query_one(CardGrid).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(demo=self.demo is not None, readonly=self.readonly, agent=self.agent))

    def action_pause(self) -> None:
        """Stop following the node's readings: the picture holds still. The node
        is still read (by its agent, or by this process for the queue's sake)."""
        self.follower.paused = True
        self.workers.cancel_group(self, "readings")
        self.notify("Paused: the picture is not updated until you press p again.", timeout=4)
        self.main.redraw()

    def action_resume(self) -> None:
        self.follower.paused = False
        self.notify("Resumed.", timeout=3)
        self._follow_node()  # once the paused follow has ended (NodeFollower.follow)
        self.main.redraw()

    async def action_quit(self) -> None:
        """Quit; with launches that would be dropped, ask first, naming them:
        whoever asked for them may be waiting."""
        queue = self.snapshot.queue if self.snapshot is not None else ()
        dropped = self.launches.dropped_on_quit(queue, agent=self.agent)
        if not dropped:
            self.exit()
        elif not any(w.group == "quit" and not w.is_finished for w in self.workers):  # else already asking
            self._ask_then_quit(QuitScreen(dropped, agent=self.agent, demo=self.demo is not None))

    @work(group="quit", exit_on_error=False)
    async def _ask_then_quit(self, question: QuitScreen) -> None:
        if await self.push_screen_wait(question):
            self.exit()

    # -- launch, reserve, extend, cancel ------------------------------------------------

    def _capacity_line(self) -> str:
        return capacity_line(self.snapshot, self.follower.stale_error if self.stale else None)

    def _total(self) -> int:
        return self.snapshot.occupancy.total if self.snapshot else 0

    def action_launch(self) -> None:
        if self._refused("launching"):
            return
        self._ask_then_launch(
            LaunchScreen(
                total=self._total(),
                docker=self.snapshot is not None and self.snapshot.runtime_kind == "docker",
                default_command=self.default_command,
                run_id=new_run_id(),
                context=self._capacity_line(),
                slices=free_profiles(self.snapshot),
            )
        )

    @work(group="launch", exit_on_error=False)
    async def _ask_then_launch(self, form: LaunchScreen) -> None:
        request = await self.push_screen_wait(form)
        if request is not None:
            await self._launch(request)

    async def _launch(self, request: LaunchRequest) -> None:
        """Launch; the node lists it (and it can be cancelled) while under way.
        With no room now, offer the queue."""
        assert request.run_id is not None
        result = await self.launches.ask(request.run_id, self.node.launch(request))
        if isinstance(result, Refused):
            self._failed("Launch refused", result.error)
        elif isinstance(result, NoCapacity):
            title, body = queue_question(result, request.run_id, request.cards, self.snapshot, request.slice)
            if await self.push_screen_wait(ConfirmScreen(title, body, yes="Queue it")):
                await self._enqueue(request)
        elif isinstance(result, LaunchResult) and result.launched is not None:
            self._report_launched(result.launched, "Launched")

    async def _enqueue(self, request: LaunchRequest) -> None:
        """Ask again, agreeing to wait in the node's queue: the node tries once
        more, and keeps it in line if there is still no room."""
        assert request.run_id is not None
        result = await self.launches.ask(request.run_id, self.node.launch(replace(request, queue=True)))
        if isinstance(result, Refused):
            self._failed("Launch refused", result.error)
        elif isinstance(result, LaunchResult) and result.queued is not None:
            self.launches.queued_here(result.queued.run_id, self.clock())
            kept = (
                "The node's agent keeps it, with or without this dashboard."
                if self.agent
                else "It lives in this dashboard: quitting asks first."
            )
            when = starts_when(self.snapshot, request.cards, request.slice)
            self.notify(
                f"{result.queued.run_id} is queued; it starts {when}, after the launches queued before it. {kept}",
                title="Queued",
            )
        elif isinstance(result, LaunchResult) and result.launched is not None:
            self._report_launched(result.launched, "Launched")
        elif isinstance(result, NoCapacity):  # only from a node that keeps no queue
            self._failed("Launch refused", result)

    def _report_launched(self, result: Launched, what: str) -> None:
        cards = result.holding
        run_id = result.job.run_id
        if self.launches.went_ahead_anyway(run_id, result.existing):
            self.notify(
                f"{run_id} was cancelled while its launch was under way, and it got {cards} "
                "anyway; stop it (s) if it is not wanted.",
                title="Cancelled too late",
                severity="warning",
                timeout=12,
            )
        elif result.existing:
            self.notify(f"{run_id} already holds {cards}; nothing new was started.", title=what)
        else:
            self.notify(f"{run_id} got {cards}.", title=what)
        if result.warning:
            self.notify(result.warning, title="Unverified cards", severity="warning", timeout=12)

    def action_reserve(self) -> None:
        if self._refused("reserving"):
            return
        you = self.you
        self._ask_then_reserve(
            ReserveScreen(
                total=self._total(),
                owner=you.user if you else "",
                operator=you is not None and you.operator,
                run_id=new_run_id("rsv"),
                context=self._capacity_line(),
                slices=free_profiles(self.snapshot),
            )
        )

    @work(group="launch", exit_on_error=False)
    async def _ask_then_reserve(self, form: ReserveScreen) -> None:
        """A reservation is a launch too: listed by the node, and cancellable, while under way."""
        request = await self.push_screen_wait(form)
        if request is None:
            return
        assert request.run_id is not None
        result = await self.launches.ask(request.run_id, self.node.reserve(request))
        if isinstance(result, Refused):
            self._failed("Reservation refused", result.error)
        elif isinstance(result, NoCapacity):
            self._failed("Reservation refused", result)
        elif isinstance(result, Launched):
            self._report_launched(result, f"Reserved for {result.job.owner or request.owner}")

    def action_extend(self) -> None:
        if self._refused("extending"):
            return
        job = self.extend_target()
        if job is None:
            self.notify(
                "Select a running reservation (on its card, or in the jobs table) to extend it.", severity="warning"
            )
            return
        self._ask_then_extend(job)

    @work(group="action", exit_on_error=False)
    async def _ask_then_extend(self, job: JobState) -> None:
        longer = await self.push_screen_wait(ExtendScreen(job))
        if longer is None:
            return
        try:
            extended = await self.node.extend(job.key, longer)
        except Exception as e:
            self._failed(f"Could not extend {job.key}", e)
            return
        until = time.strftime("%H:%M:%S", time.localtime(extended.expires_at or 0))
        left = format_duration((extended.expires_at or 0) - self.clock())
        self.notify(f"{extended.key} holds {extended.holding} until {until} ({left} left).", title="Extended")

    def action_cancel_launch(self) -> None:
        if self._refused("cancelling"):
            return
        launch = self.selected_launch()
        if launch is None:
            self.notify("Select a queued or waiting launch in the jobs table first.", severity="warning")
            return
        self._cancel(launch)

    @work(group="action", exit_on_error=False)
    async def _cancel(self, launch: QueuedLaunch) -> None:
        """Cancel through the node, which says whether it was still in time."""
        run_id = launch.run_id
        self.launches.cancelling(run_id)
        try:
            await self.node.cancel(run_id)
        except JobNotFound:
            self.launches.not_cancelled(run_id)
            self.notify(
                f"{run_id} is no longer queued or waiting: it was placed or dropped meanwhile.",
                title="Nothing to cancel",
                severity="warning",
            )
            return
        except (NotAllowed, AgentUnavailable) as e:
            self.launches.not_cancelled(run_id)
            self._failed(f"Could not cancel {run_id}", e)
            return
        except TpnodeError as e:  # being placed already: too late, and the node says what to do
            self.launches.not_cancelled(run_id, too_late=True)
            self.notify(str(e), title="Too late to cancel", severity="warning", timeout=12)
            return
        self.launches.cancelled(run_id)
        if launch.state == WAITING:
            self.notify(
                f"{run_id} is abandoned: it was still waiting for the allocation lock, so no "
                "card was picked and nothing was started.",
                title="Cancelled",
            )
        else:
            self.notify(f"{run_id} is no longer queued.", title="Cancelled")

    # -- stop and reclaim -------------------------------------------------------------------

    def action_stop(self) -> None:
        if self._refused("stopping"):
            return
        job = self.stop_target()
        if job is None:
            row = self.main.selected_row() if self.main.jobs_focused else None
            card = self.selected_card()
            self.notify(
                nothing_to_stop(
                    stale=self.stale,
                    row=row,
                    row_job=self.main.job_for_row(),
                    card=card.index if card is not None else None,
                ),
                severity="warning",
            )
            return
        if self.main.jobs_focused:
            where = "Highlighted in the jobs table"
        else:
            where = f"On the selected card {self.main.selected_index()}"
        self._ask_then_stop(job, stop_question(job, where))

    @work(group="action", exit_on_error=False)
    async def _ask_then_stop(self, job: JobState, question: str) -> None:
        """The node decides who may stop what: a refusal is shown in its words."""
        if not await self.push_screen_wait(ConfirmScreen(f"Stop {job.run_id}?", question, yes="Stop it")):
            return
        try:
            await self.node.stop(job.key)
        except NotAllowed as e:
            self._failed(f"Not allowed to stop {job.key}", e)
            return
        except Exception as e:
            self._failed(f"Could not stop {job.key}", e)
            return
        self.notify(f"{job.key} stopped; it frees {job.holding} once it has exited.", title="Stopped")

    def action_reclaim(self) -> None:
        if self._refused("reclaiming"):
            return
        exited = self.exited_jobs()
        if not exited:
            self.notify(
                "Nothing to reclaim: no job of yours has exited."
                if self.you and not self.you.operator
                else "Nothing to reclaim: no job has exited."
            )
            return
        self._ask_then_reclaim(exited)

    @work(group="action", exit_on_error=False)
    async def _ask_then_reclaim(self, exited: list[JobState]) -> None:
        question = ConfirmScreen(f"Reclaim {len(exited)} exited job(s)?", reclaim_question(exited), yes="Reclaim")
        if await self.push_screen_wait(question):
            await self._reclaim(exited)

    async def _reclaim(self, jobs: list[JobState]) -> None:
        """Only the listed run ids, one by one: a job restarted since the list was
        shown is live again and is refused by the node, not removed."""
        removed: list[str] = []
        kept: list[str] = []
        for run_id in dict.fromkeys(j.key for j in jobs):
            try:
                removed += [j.key for j in await self.node.reclaim(run_id)]
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

    # -- triage: drain, undrain, evict, the node's log ---------------------------------

    def action_drain(self) -> None:
        if self._refused("draining") or self._not_operator("drain a card"):
            return
        card = self.triage_card()
        if card is None:
            self.notify("Select a card that can be read to drain it.", severity="warning")
            return
        self._ask_then_drain(DrainScreen(card.index, context=drain_context(card)), card.index)

    @work(group="action", exit_on_error=False)
    async def _ask_then_drain(self, form: DrainScreen, card: int) -> None:
        """The node decides (operators only) and words any refusal."""
        reason = await self.push_screen_wait(form)
        if reason is None:
            return
        try:
            drain = printable_view(await self.node.drain(card, reason))
        except Exception as e:
            self._failed(f"Could not drain card {card}", e)
            return
        self.notify(
            f"Card {card} is out of service: {drain.reason}. It is not handed out until an operator undrains it (u).",
            title="Drained",
        )

    def action_undrain(self) -> None:
        if self._refused("undraining") or self._not_operator("undrain a card"):
            return
        card = self.triage_card()
        if card is None or card.drain is None:
            self.notify("Select a drained card to undrain it.", severity="warning")
            return
        index = card.index
        question = undrain_question(index, card.drain, self.clock())
        self._ask_then_undrain(ConfirmScreen(f"Undrain card {index}?", question, yes="Undrain"), index)

    @work(group="action", exit_on_error=False)
    async def _ask_then_undrain(self, question: ConfirmScreen, card: int) -> None:
        """Refused while the card still reports a problem: the node names it."""
        if not await self.push_screen_wait(question):
            return
        try:
            lifted: Drain = printable_view(await self.node.undrain(card))
        except Conflict as e:
            self._failed(f"Card {card} stays drained", e)
            return
        except Exception as e:
            self._failed(f"Could not undrain card {card}", e)
            return
        self.notify(
            f"Card {card} is back in service (it was drained by {lifted.by}: {lifted.reason}).", title="Undrained"
        )

    def action_evict(self) -> None:
        if self._refused("evicting") or self._not_operator("evict processes") or self.evict_asking:
            return
        card = self.triage_card()
        if card is None:
            self.notify("Select a card that can be read to evict from it.", severity="warning")
            return
        self.evict_asking = True
        self.refresh_bindings()
        self._ask_then_evict(card.index)

    @work(group="action", exit_on_error=False)
    async def _ask_then_evict(self, card: int) -> None:
        """A dry run first: the question lists exactly the pids the node would
        signal, and only those are signalled if the answer is yes; what is still
        running after the grace period is offered SIGKILL in a second question."""
        try:
            report: EvictReport = printable_view(await self.node.evict(card, dry_run=True))
        except JobNotFound as e:  # nothing there may be evicted: the node says why for each
            self._failed(f"Nothing to evict on card {card}", e)
            return
        except Exception as e:
            self._failed(f"Could not evict from card {card}", e)
            return
        finally:
            self.evict_asking = False
            self.refresh_bindings()
        card, grace_s = report.card, report.grace_s
        if not await self.push_screen_wait(
            ConfirmScreen(f"Evict from card {card}?", evict_question(report), yes="Send SIGTERM")
        ):
            return
        survivors = await self._evict(card, report.processes, kill=False, grace_s=grace_s)
        if not survivors:
            return
        if await self.push_screen_wait(
            ConfirmScreen(
                f"Kill what is left on card {card}?", kill_question(card, survivors, grace_s), yes="Send SIGKILL"
            )
        ):
            await self._evict(card, survivors, kill=True, grace_s=grace_s)

    async def _evict(self, card: int, listed: Sequence[Evicted], *, kill: bool, grace_s: float) -> list[Evicted]:
        """Each listed pid by name, all at once (so the grace period is waited
        once): a pid that is no longer what was listed is refused by the node,
        not signalled. Returns those still running after the grace period."""
        self.notify(evicting_words(card, listed, kill, grace_s), title="Evicting", timeout=grace_s + 5)
        answers = await asyncio.gather(
            *(self.node.evict(card, e.pid, kill=kill, started_at=e.started_at) for e in listed), return_exceptions=True
        )
        done: list[Evicted] = []
        for e, answer in zip(listed, answers):
            if isinstance(answer, EvictReport):
                done += printable_view(answer).processes
            elif isinstance(answer, BaseException):
                self._failed(f"pid {e.pid} was not evicted", answer)
        if done:
            bad = any(e.outcome in NOT_GONE for e in done)
            self.notify(
                fates(done),
                title=f"Evicted from card {card}" if not bad else f"Card {card}",
                severity="warning" if bad else "information",
                timeout=15,
            )
        return [e for e in done if e.outcome == "running"]

    def action_events(self) -> None:
        self._show_events(None)

    def action_hide_events(self) -> None:
        self._hide_events()

    def action_events_card(self) -> None:
        card = self.selected_card()
        if card is not None:
            self._show_events(card.index)

    def action_events_all(self) -> None:
        self._show_events(None)

    # -- the demo -------------------------------------------------------------------------------

    def action_demo_xid(self) -> None:
        card = self.selected_card()
        if self.demo is None or card is None:
            return
        self.demo.raise_xid(card.index)
        self.notify(
            f"Card {card.index} reports XID 48 (double-bit ECC error): the node drains it "
            "until an operator undrains it (e shows the log).",
            title="Demo",
            timeout=6,
        )

    def action_demo_blind(self) -> None:
        if self.demo is None:
            return
        blind = self.demo.toggle_blind()
        self.notify(
            "Probe-blind: use from outside can no longer be seen."
            if blind
            else "The probe sees use from outside again.",
            title="Demo",
            timeout=4,
        )

    def action_demo_external(self) -> None:
        card = self.selected_card()
        if self.demo is None or card is None:
            return
        on = self.demo.toggle_external(card.index)
        self.notify(
            f"An outside process now uses card {card.index}."
            if on
            else f"Card {card.index} has no outside user any more.",
            title="Demo",
            timeout=4,
        )

    async def _open_demo(self) -> None:
        """Start the demo's job and reservation, which stand for other people's,
        then keep its cards moving."""
        assert self.demo is not None
        for what, error in await self.demo.open():
            self._failed(f"Demo could not start {what}", error)
        await self.demo.animate()
