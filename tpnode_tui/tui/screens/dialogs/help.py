"""The help: every key, who may do what, every card state and the marks on a card."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tpnode_tui.text.badges import BADGES, STALE_BADGE, symbol
from tpnode_tui.tui.wording.keys import HelpLine, help_lines, node_words

#: the keys the help explains that are not the dashboard's actions: the grid's
#: own (widgets/tiles.py CardGrid), and Textual's focus and command palette
GRID_KEYS_HELP = [
    ("←/h  →", "select the card to the left / right (l is launch, not right)"),
    ("↑  ↓/j", "select the card above / below (k is evict, not up)"),
]
TAB_HELP = ("tab", "move between the grid, the detail pane and the jobs table")
PALETTE_HELP = ("ctrl+p", "command palette: every action by name")

MARKS_HELP = [
    (
        "! in red",
        "an intruder: someone else's process on a held card (the card keeps its state); the "
        "detail pane marks each process holder, intruder, external or unknown (a pid this "
        "machine cannot see) and names containers by name and image",
    ),
    ("idle 45m", "a reservation whose owner has used none of its cards for that long (TUNEPLANE_IDLE_RESERVATION_MIN)"),
    (
        "releases in 12m",
        "a reservation left unused for TUNEPLANE_RECLAIM_IDLE_AFTER: the node releases it then unless its "
        "owner uses it or extends it (+)",
    ),
    (
        "idle-held 1h",
        "a job whose cards have sat at 0 % with memory held that long (TUNEPLANE_FLAG_IDLE_JOB_AFTER); never stopped",
    ),
    (
        "▁▃▇",
        "utilisation on a tile, and utilisation and memory in the detail pane: the last hour (or "
        "as much as the node has kept), on a fixed scale: 0-100 %, and the card's whole memory",
    ),
]
STATES_HELP = [
    ("free", "nothing holds it; it can be handed out"),
    ("job", "held by a platform job (run id, owner, since when)"),
    ("reservation", "held for a person until it expires (owner, time left)"),
    (
        "external",
        "in use by something the platform did not start: a process with pid, user and "
        "command, or memory in use with no process this machine can see",
    ),
    (
        "unhealthy",
        "must not be handed out: retired pages or row remapping pending, uncorrected "
        "ECC errors, hardware slowdown, card lost",
    ),
    (
        "unverified",
        "free as far as the platform knows, but use from outside cannot be probed, "
        "so it may be held; a banner over the grid says why. Launches wait until the "
        "probe works again (one queued with l then starts by itself), unless "
        "TUNEPLANE_ALLOW_UNVERIFIED=true hands such cards out anyway",
    ),
    (
        "drained",
        "taken out of service by an operator (d), by an XID that needs a GPU reset or a "
        "reboot, or by a failed check; the detail pane says why, by whom, when, and until when: "
        "an operator undrains it (u), or a check passes where the node returns checked cards, "
        "and an XID that needs a reboot asks a reboot first. "
        "A job already on a card keeps it; its tile carries the drain as a warning",
    ),
    (
        "mig",
        "split into MIG slices: the card is never handed out whole, each slice is, on its own "
        "(launch a slice's profile); its tile shows each slice after its state's mark, and "
        "the detail pane lists them with who holds each",
    ),
    (
        "shared",
        "a MIG slice whose GPU instance's memory is in use through a sibling compute "
        "instance: not handed out while it is",
    ),
    (
        "?",
        "unknown: the last poll failed, or the node's agent is not answering; the header says "
        "since when and why. No card is shown free until a reading comes again",
    ),
]


def _table() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    return table


def key_lines(demo: bool, agent: bool) -> list[HelpLine]:
    """Every key, one line each: moving about, what acts on the node and what
    only shows, then the palette, help and quit, and the demo's last."""
    return (
        GRID_KEYS_HELP
        + help_lines("move")
        + [TAB_HELP]
        + help_lines("node")
        + help_lines("view")
        + [PALETTE_HELP]
        + help_lines("app", agent=agent)
        + (help_lines("demo") if demo else [])
    )


def readonly_line() -> str:
    *most, last = node_words()
    return f"Read-only: {', '.join(most)} and {last} are refused."


def help_text(demo: bool, readonly: bool, agent: bool = False) -> Group:
    """``agent``: the node is served by its agent (not by this dashboard)."""
    keys = _table()
    for key, meaning in key_lines(demo, agent):
        keys.add_row(Text(key, style="bold #4fc3f7"), meaning)
    states = _table()
    for state, meaning in STATES_HELP:
        label, colour = BADGES.get(state, STALE_BADGE)
        shown = Text(f"{symbol(state) if state in BADGES else label} ", style=colour) + Text(
            f" {label:^10} ", style=f"bold white on {colour}"
        )
        states.add_row(shown, meaning)
    parts: list[RenderableType] = [Text("Keys", style="bold underline"), keys]
    if readonly:
        parts.append(Text(readonly_line(), style="#ffb300"))
    marks = _table()
    for mark, meaning in MARKS_HELP:
        marks.add_row(Text(mark, style="bold #ef5350" if mark.startswith("!") else "bold #ffb300"), meaning)
    parts += [
        Text("\nWho may do what", style="bold underline"),
        Text(
            "The header names you as the node knows you (from the kernel, not from anything typed). "
            "Stop, extend and cancel are offered on your own jobs, reservations and launches; an "
            "operator may act on anyone's, and only an operator is offered drain, undrain and evict. "
            "A key not offered says why when pressed, in the node's words. "
            "Anything else the node may refuse (a card limit, an "
            "image not allowed) is said in its own words. For a running job or reservation the "
            "detail pane shows the exports (env) that point CUDA at its cards, to paste into a shell."
        ),
        Text("\nCard states", style="bold underline"),
        Text("Each state's mark stands for it where its word has no room: the fleet's strips, a MIG card's slices."),
        states,
        Text("\nOn a card", style="bold underline"),
        marks,
        Text(
            "\nEvery action goes through the node, with the same rules and the same lock as the "
            "tpnode-tui command line, so the dashboard and a shell never hand out the same card.",
            style="grey62",
        ),
    ]
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help-close", tooltip="Close the help")]

    def __init__(self, demo: bool, readonly: bool, agent: bool = False) -> None:
        super().__init__()
        self.demo = demo
        self.readonly = readonly
        self.agent = agent

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Static("tpnode-tui: keys and card states", classes="dialog-title")
            yield Static("↑ ↓ and PgUp PgDn scroll this help; escape closes it", classes="dialog-context")
            yield Static(help_text(self.demo, self.readonly, self.agent))
        yield Footer()

    def action_close(self) -> None:
        self.dismiss(None)
