"""Every action of the dashboard's keys, in one table.

For each action: its key, the footer's label, the tooltip, the command
palette's title and help, the help screen's line, what kind of action it is
(changes the node, and so is refused read-only; only shows; the demo's; moves
about; the app's own), whether only an operator is offered it, and when it is
offered. The main screen's and the app's bindings, the palette, the help's
keys and ``check_action`` are all made from it, so a key is described in one
place, and what the footer shows, the palette lists and the help says can
never disagree.

The order is the footer's: help and quit first, so that a terminal too
narrow for every key still shows how to learn them and how to leave; then the
keys that act on the node, what only shows, the demo's, and moving about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

from textual.binding import Binding, BindingType

from tpnode_tui.text.refusals import UNDRAIN_REFUSES, check_holder
from tpnode_tui.tui.wording.refusals import WHY_NOT, Situation, not_operator, operator_words, read_only

#: node: changes jobs or cards (refused read-only); view: what is shown; demo: the
#: demo's; move: about the screen; app: help and quit
Kind = Literal["node", "view", "demo", "move", "app"]

#: (the key as the help shows it, what it does)
HelpLine = tuple[str, str]


def always(now: Situation) -> bool:
    return True


@dataclass(frozen=True)
class Action:
    """One action: the main screen's ``action_<name>`` (the app's, for help and quit), and everything said about it."""

    name: str
    keys: str
    label: str
    id: str
    tooltip: str
    kind: Kind
    #: when it is offered, on top of the kind's rule (read-only) and ``operator_only``
    when: Callable[[Situation], bool] = always
    #: (title, what it does) in the command palette; None: not listed there
    palette: Optional[tuple[str, str]] = None
    #: its line in the help; None for the second action of a key, which the first's line covers
    help: Optional[HelpLine] = None
    #: the line instead when the node is served by its agent
    help_via_agent: Optional[HelpLine] = None
    #: what the help's read-only sentence calls it (node actions)
    word: str = ""
    #: offered to operators only (the node refuses anyone else)
    operator_only: bool = False
    #: in the footer
    show: bool = True
    key_display: Optional[str] = None

    def binding(self, *, on_screen: bool = False) -> Binding:
        """``on_screen``: the app's action as the main screen's key too, done by the app."""
        return Binding(
            self.keys,
            f"app.{self.name}" if on_screen and self.on_app else self.name,
            self.label,
            show=self.show,
            key_display=self.key_display,
            id=self.id,
            tooltip=self.tooltip,
        )

    @property
    def on_app(self) -> bool:
        """Whether the app does it (help, quit: on any screen); the rest the main screen does."""
        return self.kind == "app"

    def offered(self, now: Situation) -> bool:
        """Whether the key shows (in the footer, and the palette lists it) and works now."""
        if self.kind == "node" and now.readonly:
            return False
        if self.operator_only and not now.operator:
            return False
        return self.when(now)

    def why_not(self, now: Situation) -> str:
        """Why it is not offered now, in one line: the node's words where the node would refuse."""
        if self.kind == "node" and now.readonly:
            return read_only(self.word)
        if self.operator_only and not now.operator:
            return not_operator(now, operator_words(self.name, now))
        why = WHY_NOT.get(self.name)
        return why(now) if why is not None else f"{self.label} is not offered now."


# -- when each is offered --------------------------------------------------------------


def _stop(now: Situation) -> bool:
    job = now.stop_target()
    return job is not None and now.mine(job.uid, job.owner)


def _extend(now: Situation) -> bool:
    job = now.extend_target()
    return job is not None and now.mine(job.uid, job.owner)


def _shell(now: Situation) -> bool:
    job = now.shell_target()
    return job is not None and now.mine(job.uid, job.owner)


def _reclaim(now: Situation) -> bool:
    return bool(now.exited_jobs()) and not now.stale


def _cancel(now: Situation) -> bool:
    launch = now.selected_launch()
    return launch is not None and not now.stale and now.mine(launch.uid, launch.owner)


def _drain(now: Situation) -> bool:
    card = now.triage_card()
    return card is not None and card.drain is None


def _undrain(now: Situation) -> bool:
    card = now.triage_card()
    return card is not None and card.drain is not None


def _check(now: Situation) -> bool:
    card = now.triage_card()
    return card is not None and check_holder(card) is None


def _evict(now: Situation) -> bool:
    card = now.triage_card()
    return card is not None and bool(card.holders) and not now.evict_asking


def _card_selected(now: Situation) -> bool:
    return now.selected_card() is not None


ACTIONS: tuple[Action, ...] = (
    Action(
        "help",
        "question_mark",
        "Help",
        "help",
        "Every key and card state explained",
        "app",
        palette=("Help: keys and card states", "Every key and every card state explained"),
        help=("?", "this help"),
    ),
    Action(
        "quit",
        "q",
        "Quit",
        "quit",
        "Leave the dashboard; jobs keep running (asks first if launches would be dropped)",
        "app",
        help=(
            "q",
            "quit (jobs keep running; the demo stops its own). This dashboard serves the node "
            "itself, so its launches not started yet, queued or waiting for the lock, are "
            "dropped: it asks first, naming them",
        ),
        help_via_agent=(
            "q",
            "quit (jobs keep running). The node's agent keeps the queue: queued launches start "
            "without this dashboard, so quitting does not ask; it asks only for a launch of "
            "this dashboard still waiting for the lock, which ends with it",
        ),
    ),
    Action(
        "launch",
        "l",
        "Launch",
        "launch",
        "Launch a job on free cards",
        "node",
        palette=("Launch a job", "Place a job on free cards (queue it if none are free)"),
        help=("l", "launch a job on free cards; if none are free now, offer to queue it"),
        word="launch",
    ),
    Action(
        "reserve",
        "v",
        "Reserve",
        "reserve",
        "Hold cards for a person for a while",
        "node",
        palette=("Reserve cards", "Hold cards for a person for a while"),
        help=(
            "v",
            "reserve cards for a person for a while (they are freed when it ends); only an operator "
            "reserves for someone else",
        ),
        word="reserve",
    ),
    Action(
        "extend",
        "plus",
        "Extend",
        "extend",
        "Hold the selected reservation's cards longer",
        "node",
        when=_extend,
        key_display="+",
        palette=("Extend the selected reservation", "Hold the selected reservation's cards longer"),
        help=("+", "extend the selected reservation: asks how much longer it holds its cards"),
        word="extend",
    ),
    Action(
        "stop",
        "s",
        "Stop",
        "stop",
        "Stop the selected card's job, or the highlighted row's (asks first)",
        "node",
        when=_stop,
        palette=(
            "Stop the selected job",
            "Stop the job or reservation on the selected card, or in the highlighted jobs-table row",
        ),
        help=(
            "s",
            "stop the job or reservation on the selected card, or in the highlighted jobs-table "
            "row (asks first, naming it)",
        ),
        word="stop",
    ),
    Action(
        "shell",
        "S",
        "Shell",
        "shell",
        "Your shell on the selected reservation's cards, fenced to them; exit it to come back",
        "node",
        when=_shell,
        palette=(
            "Shell on the selected reservation",
            "Your shell on the selected reservation's cards, fenced to them, until you exit it",
        ),
        help=(
            "S",
            "a shell on the selected reservation's cards, fenced to them (tpnode-tui shell): the "
            "dashboard waits until you exit it",
        ),
        word="shell",
    ),
    Action(
        "reclaim",
        "r",
        "Reclaim",
        "reclaim",
        "Remove exited jobs (asks first)",
        "node",
        when=_reclaim,
        palette=("Reclaim exited jobs", "Remove the records of jobs that have ended"),
        help=("r", "reclaim: remove exited jobs' records (lists them and asks first)"),
        word="reclaim",
    ),
    Action(
        "cancel_launch",
        "c",
        "Cancel launch",
        "cancel-launch",
        "Cancel the launch selected in the jobs table (queued, or waiting for the lock)",
        "node",
        when=_cancel,
        palette=(
            "Cancel the selected launch",
            "Cancel the launch selected in the jobs table: queued, or waiting for the allocation lock",
        ),
        help=(
            "c",
            "cancel the launch selected in the jobs table: a queued one is dropped, one waiting for "
            "the allocation lock is abandoned; one already being placed goes on (stop it then)",
        ),
        word="cancel",
    ),
    Action(
        "drain",
        "d",
        "Drain",
        "drain",
        "Take the selected card out of service, saying why (operators)",
        "node",
        when=_drain,
        operator_only=True,
        palette=("Drain the selected card", "Take it out of service, saying why (operators)"),
        help=(
            "d",
            "drain the selected card: take it out of service, saying why (operators). A job on it keeps "
            "running; the card is not handed out again until it is undrained",
        ),
        word="drain",
    ),
    Action(
        "undrain",
        "u",
        "Undrain",
        "undrain",
        "Put the selected drained card back in service (operators; asks first)",
        "node",
        when=_undrain,
        operator_only=True,
        palette=(
            "Undrain the selected card",
            "Put it back in service (operators; refused while it reports a problem, or awaits a reboot or a check)",
        ),
        help=(
            "u",
            f"undrain the selected drained card: put it back in service (operators; asks first). {UNDRAIN_REFUSES}",
        ),
        word="undrain",
    ),
    Action(
        "check",
        "t",
        "Check",
        "check",
        "Check the selected card before it goes back into service (operators)",
        "node",
        when=_check,
        operator_only=True,
        palette=(
            "Check the selected card",
            "Ask the driver whether it is fit for service, as tpnode-tui check (operators)",
        ),
        help=(
            "t",
            "check the selected card (operators), as tpnode-tui check: the driver is asked whether it is fit for "
            "service, and the node's check command runs where one is set; the result and each finding it did not "
            "pass are shown. A card that fails in service is drained; one the node drained goes back when it "
            "passes, where the node returns checked cards. A card a job holds is not checked",
        ),
        word="check",
    ),
    Action(
        "evict",
        "k",
        "Evict",
        "evict",
        "SIGTERM the selected card's squatters: lists them and asks first (operators)",
        "node",
        when=_evict,
        operator_only=True,
        palette=(
            "Evict from the selected card",
            "SIGTERM its processes from outside or of someone else, listed first (operators)",
        ),
        help=(
            "k",
            "evict from the selected card (operators): lists exactly the processes from outside the "
            "platform or of someone else that would get SIGTERM, and asks; one still running after the "
            "grace period is offered SIGKILL. A platform job's processes (that is s), processes this "
            "machine cannot see and pid 1 are never signalled",
        ),
        word="evict",
    ),
    Action(
        "events",
        "e",
        "Log",
        "events",
        "The node's log in place of the jobs table",
        "view",
        when=lambda now: not now.log_shown,
        palette=("Show the node's log", "What happened to the cards, and actions, newest first"),
        help=(
            "e",
            "the node's log, newest first, in place of the jobs table (and back): what happened to the "
            "cards in the last hour (XIDs, drains, intruders, health, ends, evictions) and actions",
        ),
    ),
    Action(
        "hide_events",
        "e",
        "Jobs",
        "hide-events",
        "Back to the jobs table",
        "view",
        when=lambda now: now.log_shown,
        palette=("Hide the node's log", "Back to the jobs table"),
    ),
    Action(
        "events_card",
        "f",
        "This card",
        "events-card",
        "Only the selected card's entries in the log",
        "view",
        when=lambda now: now.log_shown and now.log_card is None and now.selected_card() is not None,
        palette=("Log: the selected card only", "Only entries about the selected card"),
        help=("f", "in the log: only the selected card's entries (following the selection), or every card's"),
    ),
    Action(
        "events_all",
        "f",
        "All cards",
        "events-all",
        "Every card's entries in the log",
        "view",
        when=lambda now: now.log_shown and now.log_card is not None,
        palette=("Log: every card", "Entries about every card"),
    ),
    # Not in the footer, for room (as pause): the help and the palette list it.
    Action(
        "usage",
        "a",
        "Usage",
        "usage",
        "Who used which cards: the last 24 hours and 7 days, a bar per account",
        "view",
        show=False,
        palette=("Show usage", "Card-hours each account held, used and left idle: the last 24 hours and 7 days"),
        help=(
            "a",
            "usage: the card-hours each account held, used and left idle over the last 24 hours and the last "
            "7 days, a bar each, and the node's total (your own and the total; an operator sees everyone's). "
            "Recorded by the node's agent: a dashboard serving the node itself has none to show",
        ),
    ),
    # Pause is not in the footer (it would not fit beside the operator's keys and the
    # demo's); Resume is, so that a paused picture says how to go on.
    Action(
        "pause",
        "p",
        "Pause",
        "pause",
        "Stop redrawing (the node is still read)",
        "view",
        when=lambda now: not now.paused,
        show=False,
        palette=("Pause the display", "Stop redrawing until resumed (the node is still read)"),
        help=("p", "pause or resume the display (the node is still read, and queued launches still start)"),
    ),
    Action(
        "resume",
        "p",
        "Resume",
        "resume",
        "Show each new reading again",
        "view",
        when=lambda now: now.paused,
        palette=("Resume the display", "Show each new reading again"),
    ),
    Action(
        "demo_blind",
        "b",
        "Blind",
        "demo-blind",
        "Demo: toggle 'use from outside cannot be probed'",
        "demo",
        when=lambda now: now.has_demo,
        palette=("Demo: toggle probe-blind", "Pretend use from outside cannot be probed"),
        help=("b", "demo: toggle probe-blind (use from outside cannot be probed)"),
    ),
    Action(
        "demo_external",
        "x",
        "Outsider",
        "demo-external",
        "Demo: put or remove an outside process on the selected card",
        "demo",
        when=lambda now: now.has_demo and _card_selected(now),
        palette=("Demo: toggle outside use", "Put or remove an outside process on the selected card"),
        help=("x", "demo: put or remove an outside process on the selected card (on a held card, an intruder)"),
    ),
    Action(
        "demo_xid",
        "X",
        "XID",
        "demo-xid",
        "Demo: the selected card reports XID 48 (double-bit ECC), which drains it",
        "demo",
        when=lambda now: now.has_demo and _card_selected(now),
        key_display="X",
        palette=("Demo: raise an XID", "The selected card reports XID 48 (double-bit ECC): the node drains it"),
        help=("X", "demo: the selected card reports XID 48 (double-bit ECC error), so the node drains it"),
    ),
    Action(
        "focus_detail",
        "enter",
        "Detail",
        "focus-detail",
        "Move into the detail pane",
        "move",
        show=False,
        help=("enter", "move into the detail pane (scroll it with the arrows; escape returns)"),
    ),
    Action("focus_grid", "escape", "Grid", "focus-grid", "Back to the card grid", "move", show=False),
)

BY_NAME = {action.name: action for action in ACTIONS}

#: the main screen's key bindings, in the footer's order (the table's), help and quit
#: among them as the app's actions; and the app's own, for every other screen
SCREEN_BINDINGS: list[BindingType] = [action.binding(on_screen=True) for action in ACTIONS]
APP_BINDINGS: list[BindingType] = [action.binding() for action in ACTIONS if action.on_app]


def refusal(key: str, now: Situation) -> Optional[str]:
    """Why ``key``, pressed on the main screen, does nothing now; None when one
    of its actions is offered (it runs), or no action has that key."""
    actions = [action for action in ACTIONS if key in action.keys.split(",")]
    if not actions or any(action.offered(now) for action in actions):
        return None
    return actions[0].why_not(now)


def help_lines(kind: Kind, *, agent: bool = False) -> list[HelpLine]:
    """The help's lines for the actions of ``kind``, in the table's order;
    ``agent``: the node is served by its agent."""
    lines = []
    for action in ACTIONS:
        line = action.help_via_agent if agent and action.help_via_agent else action.help
        if action.kind == kind and line is not None:
            lines.append(line)
    return lines


def node_words() -> list[str]:
    """What the help calls each action that changes the node, in order."""
    return [action.word for action in ACTIONS if action.kind == "node"]
