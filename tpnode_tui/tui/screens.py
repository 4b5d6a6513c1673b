"""Dialogs: launch, reserve, extend, confirm, help.

The forms check what can be checked without the node (a whole number of
cards, a duration, a run id, no more cards than the node has, a reservation
for someone else from someone who is not an operator) and refuse it next to
the field, keeping everything typed: a typo should cost a keystroke, not the
whole form. What only the node can answer (is there room now? is this within
your card limit?) is the node's to say, after the form closes.
"""
from __future__ import annotations

import shlex
from typing import Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from ..config import parse_duration
from ..model import BadRequest, JobState, check_run_id
from ..port import DRAIN_REASON_MOST, LaunchRequest, ReserveRequest
from ..printable import printable, printable_lines
from ..render import cards_words, show_command
from .tiles import BADGES


class FormScreen(ModalScreen):
    """A dialog of labelled inputs, each with its own error line."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="form-cancel", tooltip="Close without doing anything")]

    #: (field id, label, value, placeholder)
    title_text = ""
    submit_label = "OK"
    #: a line under the title: what the node has free now, as the last poll saw it
    context = ""

    def fields(self) -> list[tuple[str, str, str, str]]:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            # Text, not markup: a context may quote an owner, who chose their own name.
            yield Static(Text(self.title_text), classes="dialog-title")
            if self.context:
                yield Static(Text(self.context), classes="dialog-context")
            for field_id, label, value, placeholder in self.fields():
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    with Vertical(classes="field-input"):
                        yield Input(value=value, placeholder=placeholder, id=field_id)
                        yield Static("", id=f"{field_id}-error", classes="field-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self.submit_label, id="submit", variant="primary")
        yield Footer()

    def value(self, field_id: str) -> str:
        return self.query_one(f"#{field_id}", Input).value.strip()

    def refuse(self, field_id: str, message: str) -> None:
        """Say what is wrong under the field; the first refused field gets the cursor."""
        self.query_one(f"#{field_id}-error", Static).update(Text(printable(message)))
        field = self.query_one(f"#{field_id}", Input)
        if not self.query(".-invalid-field"):
            field.focus()
        field.add_class("-invalid-field")

    def clear_errors(self) -> None:
        for error in self.query(".field-error").results(Static):
            error.update("")
        for field in self.query(Input):
            field.remove_class("-invalid-field")

    def on_input_submitted(self) -> None:
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        self.clear_errors()
        result = self.collect()
        if result is not None:
            self.dismiss(result)

    def collect(self):
        """The dialog's result, or None after refusing at least one field."""
        raise NotImplementedError

    def card_count(self, field_id: str, total: int) -> Optional[int]:
        raw = self.value(field_id)
        try:
            cards = int(raw)
        except ValueError:
            self.refuse(field_id, f"{raw!r} is not a whole number of cards" if raw else "how many cards?")
            return None
        if cards < 1:
            self.refuse(field_id, f"{cards} cards: at least 1 is needed")
            return None
        if total and cards > total:
            self.refuse(field_id, f"this node has {total} cards; {cards} can never fit")
            return None
        return cards

    def run_id(self, field_id: str) -> Optional[str]:
        try:
            return check_run_id(self.value(field_id))
        except BadRequest as e:
            self.refuse(field_id, str(e))
            return None


class LaunchScreen(FormScreen):
    title_text = "Launch a job"
    submit_label = "Launch"

    def __init__(self, *, total: int, docker: bool, default_command: tuple[str, ...],
                 run_id: str, context: str = "") -> None:
        super().__init__()
        self.context = context
        self.total = total
        self.docker = docker
        self.default_command = default_command
        self.default_run_id = run_id

    def fields(self):
        if self.default_command:
            shown = show_command(self.default_command)
            hint = "empty runs " + (shown if len(shown) < 56 else shown[:53] + "...")
        else:
            hint = "e.g. python train.py --epochs 3"
        rows = [
            ("cards", "Cards", "1", f"1 to {self.total}" if self.total else "how many"),
            ("command", "Command", "", hint),
        ]
        if self.docker:
            rows.append(("image", "Image", "", "container image, e.g. pytorch/pytorch:latest"))
        rows.append(("run-id", "Run id", self.default_run_id, "letters, digits, . _ -"))
        return rows

    def collect(self) -> Optional[LaunchRequest]:
        cards = self.card_count("cards", self.total)
        command: Optional[tuple[str, ...]] = None
        try:
            command = tuple(shlex.split(self.value("command")))
        except ValueError as e:
            self.refuse("command", f"the command cannot be read: {e} (quote it as in a shell)")
        image = self.value("image") if self.docker else ""
        if command is not None and not command and not image:
            if self.default_command:
                command = self.default_command
            else:
                self.refuse("command", "give the command to run, e.g. python train.py"
                            + (", or an image" if self.docker else ""))
                command = None
        run_id = self.run_id("run-id")
        if cards is None or command is None or run_id is None:
            return None
        # The job is the asker's: the node names its owner, from who asks.
        return LaunchRequest(cards=cards, command=command, image=image or None, run_id=run_id)


class ReserveScreen(FormScreen):
    title_text = "Reserve cards for a person"
    submit_label = "Reserve"

    def __init__(self, *, total: int, owner: str, operator: bool, run_id: str, context: str = "") -> None:
        """``owner``: who is asking; only an ``operator`` may reserve for someone else."""
        super().__init__()
        self.context = context
        self.total = total
        self.owner = owner
        self.operator = operator
        self.default_run_id = run_id

    def fields(self):
        return [
            ("cards", "Cards", "1", f"1 to {self.total}" if self.total else "how many"),
            ("duration", "For", "2h", "e.g. 30m, 2h, 1h30m, 1d"),
            ("owner", "Owner", self.owner, "who the cards are for"),
            ("run-id", "Run id", self.default_run_id, "letters, digits, . _ -"),
        ]

    def collect(self) -> Optional[ReserveRequest]:
        cards = self.card_count("cards", self.total)
        duration: Optional[float] = None
        try:
            duration = parse_duration(self.value("duration"))
        except BadRequest as e:
            self.refuse("duration", f"{e}; a reservation always ends")
        owner = self.value("owner")
        if not owner:
            self.refuse("owner", "say who the cards are for")
        elif owner != self.owner and not self.operator:
            self.refuse("owner", f"only an operator may reserve for someone else; these are for "
                        f"{self.owner}, who asks")
            owner = ""
        run_id = self.run_id("run-id")
        if cards is None or duration is None or not owner or run_id is None:
            return None
        return ReserveRequest(cards=cards, duration_s=duration, run_id=run_id, owner=owner)


class ExtendScreen(FormScreen):
    """How much longer a reservation holds its cards."""

    title_text = "Extend a reservation"
    submit_label = "Extend"

    def __init__(self, job: JobState, context: str = "") -> None:
        super().__init__()
        self.job = job
        self.title_text = f"Extend {job.key}"
        self.context = context or (f"{job.key} holds {cards_words(job.gpus)} for {job.owner or 'nobody'}; "
                                   "it is held this much longer than it would have been.")

    def fields(self):
        return [("duration", "Longer by", "1h", "e.g. 30m, 2h, 1h30m, 1d")]

    def collect(self) -> Optional[float]:
        try:
            return parse_duration(self.value("duration"))
        except BadRequest as e:
            self.refuse("duration", str(e))
            return None


class DrainScreen(FormScreen):
    """Why the card is taken out of service: the next operator reads it on the card."""

    submit_label = "Drain"

    def __init__(self, card: int, context: str = "") -> None:
        super().__init__()
        self.title_text = f"Drain card {card}"
        self.context = context

    def fields(self):
        return [("reason", "Reason", "", "e.g. fan failing, RMA 4411; XID 48 after the reset")]

    def collect(self) -> Optional[str]:
        reason = self.value("reason")
        if not reason:
            self.refuse("reason", "say why the card is drained, so the next operator knows")
            return None
        if len(reason) > DRAIN_REASON_MOST:
            self.refuse("reason", f"{len(reason)} characters: a reason is at most {DRAIN_REASON_MOST}")
            return None
        return reason


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no, with the consequence spelled out. Cancel has the focus: a stray
    enter must not stop somebody's training."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes", tooltip="Do it"),
        Binding("n,escape", "answer(False)", "No", id="confirm-no", tooltip="Do nothing"),
    ]

    def __init__(self, title: str, body: str, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog-title", markup=False)
            yield Static(printable_lines(self.body), classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel (n)", id="no")
                yield Button(f"{self.yes} (y)", id="yes", variant="warning")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


KEYS_HELP = [
    ("←/h  →", "select the card to the left / right (l is launch, not right)"),
    ("↑  ↓/j", "select the card above / below (k is evict, not up)"),
    ("enter", "move into the detail pane (scroll it with the arrows; escape returns)"),
    ("tab", "move between the grid, the detail pane and the jobs table"),
    ("l", "launch a job on free cards; if none are free now, offer to queue it"),
    ("v", "reserve cards for a person for a while (they are freed when it ends); only an operator "
          "reserves for someone else"),
    ("+", "extend the selected reservation: asks how much longer it holds its cards"),
    ("s", "stop the job or reservation on the selected card, or in the highlighted jobs-table "
          "row (asks first, naming it)"),
    ("r", "reclaim: remove exited jobs' records (lists them and asks first)"),
    ("c", "cancel the launch selected in the jobs table: a queued one is dropped, one waiting for "
          "the allocation lock is abandoned; one already being placed goes on (stop it then)"),
    ("d", "drain the selected card: take it out of service, saying why (operators). A job on it keeps "
          "running; the card is not handed out again until it is undrained"),
    ("u", "undrain the selected drained card: put it back in service (operators; asks first). The node "
          "refuses while the card still reports a problem, and names it"),
    ("k", "evict from the selected card (operators): lists exactly the processes from outside the "
          "platform or of someone else that would get SIGTERM, and asks; one still running after the "
          "grace period is offered SIGKILL. A platform job's processes (that is s), processes this "
          "machine cannot see and pid 1 are never signalled"),
    ("e", "the node's log, newest first, in place of the jobs table (and back): what happened to the "
          "cards in the last hour (XIDs, drains, intruders, health, ends, evictions) and actions"),
    ("f", "in the log: only the selected card's entries (following the selection), or every card's"),
    ("p", "pause or resume the display (the node is still read, and queued launches still start)"),
    ("ctrl+p", "command palette: every action by name"),
    ("?", "this help"),
]
QUIT_HELP = {
    False: ("q", "quit (jobs keep running; the demo stops its own). This dashboard serves the node "
                 "itself, so its launches not started yet, queued or waiting for the lock, are "
                 "dropped: it asks first, naming them"),
    True: ("q", "quit (jobs keep running). The node's agent keeps the queue: queued launches start "
                "without this dashboard, so quitting does not ask; it asks only for a launch of "
                "this dashboard still waiting for the lock, which ends with it"),
}
DEMO_KEYS_HELP = [
    ("b", "demo: toggle probe-blind (use from outside cannot be probed)"),
    ("x", "demo: put or remove an outside process on the selected card (on a held card, an intruder)"),
    ("X", "demo: the selected card reports XID 48 (double-bit ECC error), so the node drains it"),
]
MARKS_HELP = [
    ("! in red", "an intruder: someone else's process on a held card (the card keeps its state); the "
                 "detail pane marks each process holder, intruder, external or unknown (a pid this "
                 "machine cannot see) and names containers by name and image"),
    ("idle 45m", "a reservation whose owner has used none of its cards for that long "
                 "(TUNEPLANE_IDLE_RESERVATION_MIN)"),
    ("▁▃▇", "utilisation on a tile, and utilisation and memory in the detail pane: the last hour (or "
            "as much as the node has kept), on a fixed scale: 0-100 %, and the card's whole memory"),
]
STATES_HELP = [
    ("free", "nothing holds it; it can be handed out"),
    ("job", "held by a platform job (run id, owner, since when)"),
    ("reservation", "held for a person until it expires (owner, time left)"),
    ("external", "in use by something the platform did not start: a process with pid, user and "
                 "command, or memory in use with no process this machine can see"),
    ("unhealthy", "must not be handed out: retired pages or row remapping pending, uncorrected "
                  "ECC errors, hardware slowdown, card lost"),
    ("unverified", "free as far as the platform knows, but use from outside cannot be probed, "
                   "so it may be held; a banner over the grid says why. Launches wait until the "
                   "probe works again (one queued with l then starts by itself), unless "
                   "TUNEPLANE_ALLOW_UNVERIFIED=true hands such cards out anyway"),
    ("drained", "taken out of service by an operator (d), or by an XID that needs a GPU reset or a "
                "reboot, until an operator undrains it (u); the detail pane says why, by whom, when. "
                "A job already on a card keeps it; its tile carries the drain as a warning"),
    ("?", "unknown: the last poll failed, or the node's agent is not answering; the header says "
          "since when and why. No card is shown free until a reading comes again"),
]


def _table() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    return table


def help_text(demo: bool, readonly: bool, agent: bool = False) -> Group:
    """``agent``: the node is served by its agent (not by this dashboard)."""
    keys = _table()
    for key, meaning in KEYS_HELP + [QUIT_HELP[agent]] + (DEMO_KEYS_HELP if demo else []):
        keys.add_row(Text(key, style="bold #4fc3f7"), meaning)
    states = _table()
    for state, meaning in STATES_HELP:
        label, colour = BADGES.get(state, ("?", "#4a4a4a"))
        states.add_row(Text(f" {label:^10} ", style=f"bold white on {colour}"), meaning)
    parts = [Text("Keys", style="bold underline"), keys]
    if readonly:
        parts.append(Text("Read-only: launch, reserve, extend, stop, reclaim, cancel, drain, undrain and "
                          "evict are refused.", style="#ffb300"))
    marks = _table()
    for mark, meaning in MARKS_HELP:
        marks.add_row(Text(mark, style="bold #ef5350" if mark.startswith("!") else "bold #ffb300"), meaning)
    parts += [
        Text("\nWho may do what", style="bold underline"),
        Text("The header names you as the node knows you (from the kernel, not from anything typed). "
             "Stop, extend and cancel are offered on your own jobs, reservations and launches; an "
             "operator may act on anyone's, and only an operator is offered drain, undrain and evict. "
             "Anything else the node may refuse (a card limit, an "
             "image not allowed) is said in its own words. For a running job or reservation the "
             "detail pane shows the exports (env) that point CUDA at its cards, to paste into a shell."),
        Text("\nCard states", style="bold underline"),
        states,
        Text("\nOn a card", style="bold underline"),
        marks,
        Text("\nEvery action goes through the node, with the same rules and the same lock as the "
             "tpnode-tui command line, so the dashboard and a shell never hand out the same card.",
             style="grey62"),
    ]
    return Group(*parts)


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help-close", tooltip="Close the help")]

    def __init__(self, demo: bool, readonly: bool, agent: bool = False) -> None:
        super().__init__()
        self.demo = demo
        self.readonly = readonly
        self.agent = agent

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Static("tpnode-tui: keys and card states", classes="dialog-title")
            yield Static(help_text(self.demo, self.readonly, self.agent))
        yield Footer()

    def action_close(self) -> None:
        self.dismiss(None)

