"""The table of actions (tpnode_tui/tui/wording/keys.py): one place per key, and what it decides.

The footer, the palette, the help and ``check_action`` are all made from the
table; the pictures (tests/tui/test_tui_snapshots.py) pin what they show. These
tests hold the table to itself, with a stand-in for the dashboard's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from helpers.fleet import job, node_snapshot
from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, Drain, HolderInfo
from tpnode_tui.port.types.readings import You
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.help import key_lines
from tpnode_tui.tui.screens.main import MainScreen
from tpnode_tui.tui.wording.keys import (
    ACTIONS,
    APP_BINDINGS,
    BY_NAME,
    SCREEN_BINDINGS,
    Situation,
    help_lines,
    refusal,
)

BOB = You(user="bob", uid=1002, operator=False, cards_held=0, card_limit=None, operators="root, group ops")
SQUATTER = HolderInfo(pid=4242, used_memory_mib=1024, visible=True, user="mallory", uid=1003)


def card(**changes) -> CardView:
    return replace(node_snapshot(1).cards[0], **changes)


@dataclass
class Now:
    """Everything the table may ask, set by hand."""

    readonly: bool = False
    operator: bool = True
    paused: bool = False
    stale: bool = False
    has_demo: bool = False
    log_shown: bool = False
    log_card: Optional[int] = None
    evict_asking: bool = False
    card: Optional[CardView] = field(default_factory=card)
    job: Optional[JobState] = None
    launch: Optional[QueuedLaunch] = None
    exited: list[JobState] = field(default_factory=list)
    owns: bool = True
    #: a shell can be opened from this dashboard (a node on this machine, not the demo's)
    shells: bool = True
    you: Optional[You] = BOB
    snapshot: Optional[NodeSnapshot] = None
    row: str = ""
    jobs_focused: bool = False

    def job_for_row(self) -> Optional[JobState]:
        return None

    def selected_card(self) -> Optional[CardView]:
        return self.card

    def triage_card(self) -> Optional[CardView]:
        return None if self.stale else self.card

    def stop_target(self) -> Optional[JobState]:
        return self.job

    def extend_target(self) -> Optional[JobState]:
        return self.job if self.job is not None and self.job.kind == "reservation" else None

    def shell_target(self) -> Optional[JobState]:
        kind = self.snapshot.runtime_kind if self.snapshot is not None else "process"
        return self.extend_target() if self.shells and kind == "process" else None

    def selected_launch(self) -> Optional[QueuedLaunch]:
        return self.launch

    def exited_jobs(self) -> list[JobState]:
        return self.exited

    def mine(self, owner_uid: Optional[int], owner: str) -> bool:
        return self.owns


def offered(now: Situation) -> set[str]:
    return {action.name for action in ACTIONS if action.offered(now)}


def everything_to_act_on(**changes) -> Now:
    rsv = job("rsv-1", (0,), kind="reservation")
    ended = replace(job("done", (1,)), status="exited")
    launch = QueuedLaunch(run_id="later", cards=1, owner="alice", queued_at=0.0)
    return Now(job=rsv, launch=launch, exited=[ended], card=card(holders=(SQUATTER,)), **changes)


def test_every_action_in_the_table_is_one_the_dashboard_does_and_its_keys_are_the_dashboard_s():
    for action in ACTIONS:
        does_it = NodeDashboard if action.on_app else MainScreen
        assert callable(getattr(does_it, f"action_{action.name}", None)), action.name
    assert MainScreen.BINDINGS is SCREEN_BINDINGS and NodeDashboard.BINDINGS is APP_BINDINGS
    # the footer shows the screen's keys in the table's order, help and quit (the app's) first
    assert [b.action for b in SCREEN_BINDINGS] == [f"app.{a.name}" if a.on_app else a.name for a in ACTIONS]
    assert [a.name for a in ACTIONS[:2]] == ["help", "quit"]
    assert [b.action for b in APP_BINDINGS] == ["help", "quit"]
    assert len({a.id for a in ACTIONS}) == len(ACTIONS), "two bindings share an id"


def test_read_only_refuses_exactly_what_changes_the_node():
    node = {"launch", "reserve", "extend", "stop", "shell", "reclaim", "cancel_launch", "drain", "undrain", "check"}
    node |= {"evict"}
    assert {a.name for a in ACTIONS if a.kind == "node"} == node
    now = everything_to_act_on()
    shown = offered(now)
    assert node - {"undrain"} <= shown, "undrain is offered on a drained card only"
    assert offered(replace(now, readonly=True)) == shown - node


def test_only_an_operator_is_offered_drain_undrain_check_and_evict():
    now = everything_to_act_on()
    assert {"drain", "check", "evict"} <= offered(now)
    assert not offered(replace(now, operator=False)) & {"drain", "undrain", "check", "evict"}
    assert {"launch", "stop", "extend"} <= offered(replace(now, operator=False)), "the rest stays"


def test_check_is_offered_on_a_card_no_job_holds_and_says_why_not_in_the_node_s_words():
    assert "check" in offered(Now(card=card(drain=Drain(card=0, reason="fan", by="ana", at=0.0))))
    held = card(job=job("train", (0,)), run_id="train", state="job")
    now = Now(card=held)
    assert "check" not in offered(now)
    assert BY_NAME["check"].why_not(now) == (
        "card 0 is held by train of alice: a check would disturb it, and its processes would fail it; "
        "check the card once the job has ended"
    )
    assert "check" not in offered(Now(card=card(), stale=True))


def test_the_help_for_undrain_names_every_reason_the_node_refuses_it():
    [line] = [words for key, words in help_lines("node") if key == "u"]
    for reason in (
        "still reports a problem",
        "driver does not report it",
        "has rebooted",
        "a check of the card has passed",
    ):
        assert reason in line, reason


def test_drain_and_undrain_follow_the_card_and_evict_its_processes():
    drained = card(drain=Drain(card=0, reason="fan", by="ana", at=0.0))
    assert {"undrain"} == offered(Now(card=drained)) & {"drain", "undrain", "evict"}
    assert {"drain"} == offered(Now(card=card())) & {"drain", "undrain", "evict"}
    assert "evict" in offered(Now(card=card(holders=(SQUATTER,))))
    assert "evict" not in offered(Now(card=card(holders=(SQUATTER,)), evict_asking=True)), "asked twice"
    assert not offered(Now(card=card(holders=(SQUATTER,)), stale=True)) & {"drain", "undrain", "evict"}


def test_stop_extend_and_cancel_are_offered_on_what_is_the_caller_s():
    now = everything_to_act_on()
    assert {"stop", "extend", "cancel_launch"} <= offered(now)
    assert not offered(replace(now, owns=False)) & {"stop", "extend", "cancel_launch"}
    assert "shell" in offered(now) and "shell" not in offered(replace(now, owns=False))
    assert not {"extend", "shell"} & offered(replace(now, job=job("train", (0,)))), "a reservation's only"
    assert "shell" not in offered(replace(now, shells=False)), "no shells over --host or in the demo"
    assert "cancel_launch" not in offered(replace(now, stale=True))
    assert "reclaim" not in offered(replace(now, stale=True)) and "reclaim" not in offered(Now())


def test_a_key_not_offered_says_why_in_one_line_in_the_node_s_words():
    """What the node would refuse, said as the node's rules word it (text/refusals.py);
    what has nothing to act on, what to select; a key that is offered says nothing."""
    now = everything_to_act_on(operator=False, owns=False)
    rules = "only alice or an operator may {} it; the operators here: root, group ops"
    said = {key: refusal(key, now) for key in ("s", "plus", "S", "c", "d", "k")}
    assert said["s"] == f"card 0 is held by rsv-1 of alice; {rules.format('stop')}"
    assert said["plus"] == f"card 0 is held by rsv-1 of alice; {rules.format('extend')}"
    assert said["S"] == f"card 0 is held by rsv-1 of alice; {rules.format('open a shell on')}"
    assert said["c"] == f"later was queued by alice; {rules.format('cancel')}"
    assert said["d"] == "bob may not drain card 0: only an operator (root, group ops) may"
    assert said["k"] == "bob may not evict processes from card 0: only an operator (root, group ops) may"
    assert refusal("l", now) is None and refusal("e", now) is None and refusal("down", now) is None
    assert refusal("s", replace(now, readonly=True)) == "read-only dashboard: stop is refused (started with --readonly)"

    train = job("train", (2, 3))
    assert refusal("S", replace(now, job=train, owns=True)) == (
        "'train' is a job, not a reservation: a shell runs on a reservation's cards; "
        "reserve cards, or launch the command as a job"
    )
    assert refusal("plus", replace(now, job=train, owns=True)) == (
        "train is a job, not a reservation: it ends when its command does"
    )
    assert refusal("S", replace(now, shells=False, has_demo=True)) == "The demo's node is pretend: it runs no shell."
    assert "through --host that is the SSH bridge" in refusal("S", replace(now, shells=False))
    docker = replace(node_snapshot(1), runtime_kind="docker")
    assert refusal("S", replace(now, snapshot=docker)).startswith("this node's docker runtime holds reservations")
    assert refusal("s", replace(now, job=None)) == "The selected card 0 holds no running job to stop."
    assert refusal("s", replace(now, job=None, stale=True)).startswith("Nothing can be stopped while the node")

    ana = replace(now, operator=True, owns=True)
    assert refusal("u", ana) == "card 0 is not drained"
    drained = card(drain=Drain(card=0, reason="fan", by="ana", at=0.0))
    assert refusal("d", replace(ana, card=drained)) == "card 0 is drained already, by ana: fan"
    assert refusal("k", replace(ana, card=card())) == (
        "card 0 has no process from outside the platform or of someone else to evict"
    )
    assert refusal("f", Now()) == "f keeps the node's log to one card: open the log first (e)."
    assert refusal("X", Now()) == "b, x and X act on the demo's pretend node only (tpnode-tui --demo)."
    ended = replace(job("done", (1,)), status="exited")
    with_ended = replace(node_snapshot(2), jobs=(ended,))
    assert refusal("r", Now(snapshot=with_ended)) == (f"done (card 1) belongs to alice; {rules.format('reclaim')}")
    assert refusal("r", Now(snapshot=node_snapshot(1))) == "Nothing to reclaim: no job has exited."


def test_each_key_that_does_two_things_offers_one_at_a_time():
    pairs = [("events", "hide_events"), ("events_card", "events_all"), ("pause", "resume")]
    for now in (Now(), Now(log_shown=True), Now(log_shown=True, log_card=3), Now(paused=True)):
        for one, other in pairs:
            assert BY_NAME[one].keys == BY_NAME[other].keys
            shown = offered(now) & {one, other}
            assert len(shown) <= 1, (now, shown)
    assert {"events", "pause"} <= offered(Now())
    assert {"hide_events", "events_card"} <= offered(Now(log_shown=True))
    assert "events_all" in offered(Now(log_shown=True, log_card=3))
    assert "resume" in offered(Now(paused=True))


def test_the_demo_s_keys_are_offered_only_in_the_demo():
    demo = {"demo_blind", "demo_external", "demo_xid"}
    assert not offered(Now()) & demo
    assert offered(Now(has_demo=True)) & demo == demo
    assert offered(Now(has_demo=True, card=None)) & demo == {"demo_blind"}


def test_the_help_has_one_line_per_key_and_the_quit_line_says_where_the_queue_lives():
    lines = key_lines(demo=True, agent=False)
    keys = [key for key, _ in lines]
    assert len(keys) == len(set(keys)), keys
    assert keys[:4] == ["←/h  →", "↑  ↓/j", "enter", "tab"] and keys[-3:] == ["b", "x", "X"]
    assert keys.index("ctrl+p") == keys.index("?") - 1
    [here] = [m for k, m in lines if k == "q"]
    [there] = [m for k, m in key_lines(demo=False, agent=True) if k == "q"]
    assert "asks first, naming them" in here and "The node's agent keeps the queue" in there
    assert not {"b", "x", "X"} & {k for k, _ in key_lines(demo=False, agent=False)}
    assert help_lines("node")[0] == BY_NAME["launch"].help
