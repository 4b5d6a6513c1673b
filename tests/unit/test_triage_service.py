"""The service's triage: drains by operators and by XIDs, the node's log, idle reservations, history.

As in tests/unit/test_service.py the runtime is the in-memory one of tests/helpers/fakes.py
and callers are built by hand (what the rules decide from an identity is
under test; the kernel's identities are in the agent tests); the probe is
the simulated one where XIDs are raised through its scene file, and the lock
and the drain file are real.
"""

from __future__ import annotations

import asyncio
import io
import os
import time
from dataclasses import replace

import pytest
from rich.console import Console

from helpers.callers import ALICE, BOB, ROOT
from helpers.service_node import ServiceNode
from helpers.waiting import until_async
from tpnode_tui.cli.output import event_line
from tpnode_tui.config.sections import DEFAULT_XID_DRAIN
from tpnode_tui.core.xid import XidRules
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NoCapacity, NotAllowed, exit_code
from tpnode_tui.model.facts import ProcessFacts
from tpnode_tui.port import operations as ops
from tpnode_tui.port.types.events import AuditRequest, EventsRequest
from tpnode_tui.port.types.jobs import LaunchRequest, StopRequest
from tpnode_tui.port.types.operators import DrainRequest, UndrainRequest
from tpnode_tui.port.types.readings import HistoryRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.tui.wording.events import events_table


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


#: the stand-ins' probe (4 cards) and runtime
pytestmark = pytest.mark.service_node(probe="static", runtime="memory")


def watching(node) -> bool:
    snap = node.service.reading.snapshot
    return snap is not None and snap.xid_watch == "simulated"


# ── drains by operators ─────────────────────────────────────────────────────


async def test_only_an_operator_may_drain_or_undrain_and_the_refusal_is_exit_77(service_node):
    with pytest.raises(NotAllowed, match="bob may not drain card 2: only an operator") as refused:
        await service_node.service.drain(BOB, DrainRequest(2, "I think it is slow"))
    assert exit_code(refused.value) == 77
    drain = await service_node.service.drain(ROOT, DrainRequest(2, "fan replaced tomorrow"))
    assert (drain.card, drain.by, drain.source, drain.reason) == (2, "root", "operator", "fan replaced tomorrow")
    with pytest.raises(NotAllowed):
        await service_node.service.undrain(ALICE, UndrainRequest(2))
    snap = await service_node.service.read_now()
    assert snap.cards[2].state == "drained" and snap.cards[2].drain.by == "root"
    assert [(e["user"], e["action"], e["result"], e.get("cards")) for e in service_node.kinds("action")] == [
        ("bob", "drain", "refused", [2]),
        ("root", "drain", "ok", [2]),
        ("alice", "undrain", "refused", [2]),
    ]
    await service_node.service.undrain(ROOT, UndrainRequest(2))
    assert (await service_node.service.read_now()).cards[2].state == "free"


async def test_a_drained_card_is_not_handed_out_and_a_job_on_it_keeps_running(service_node):
    result = await service_node.service.launch(ALICE, LaunchRequest(cards=1, command=("t",), run_id="a1"))
    await service_node.service.drain(ROOT, DrainRequest(0, "vendor swap"))
    await service_node.service.drain(ROOT, DrainRequest(1, "vendor swap"))
    assert service_node.runtime.jobs["tpn-a1"].status == "running" and result.launched.gpus == (0,)
    with pytest.raises(NoCapacity, match=r"1 drained \(card 1\)"):
        await service_node.service.launch(BOB, LaunchRequest(cards=3, command=("t",), run_id="b1"))
    snap = await service_node.service.read_now()
    assert snap.cards[0].state == "job" and "drained: vendor swap" in snap.cards[0].warning
    assert "root drained card 0: vendor swap; a1 keeps running on it" in [
        e["message"] for e in service_node.kinds("action")
    ]


async def test_drains_are_refused_without_a_reason_twice_or_off_the_node(service_node):
    with pytest.raises(BadRequest, match="say why"):  # read as the door reads it
        await service_node.ask(ROOT, ops.DRAIN, DrainRequest(1, "  "))
    with pytest.raises(BadRequest, match="card 9 is not a card of this node"):
        await service_node.service.drain(ROOT, DrainRequest(9, "x"))
    await service_node.service.drain(ROOT, DrainRequest(1, "first"))
    with pytest.raises(Conflict, match="card 1 is drained already, by root: first"):
        await service_node.service.drain(ROOT, DrainRequest(1, "second"))
    with pytest.raises(JobNotFound, match="card 3 is not drained"):
        await service_node.service.undrain(ROOT, UndrainRequest(3))


async def test_undrain_is_refused_while_the_card_reports_a_problem_and_says_which(service_node):
    await service_node.service.drain(ROOT, DrainRequest(1, "ECC errors seen by the vendor tool"))
    service_node.probe.set_card(1, health=("row remapping pending, which needs a GPU reset",))
    with pytest.raises(Conflict, match=r"card 1 stays drained: it still reports row remapping pending"):
        await service_node.service.undrain(ROOT, UndrainRequest(1))
    assert (await service_node.service.read_now()).cards[1].state == "drained"
    service_node.probe.set_card(1, health=())
    lifted = await service_node.service.undrain(ROOT, UndrainRequest(1))
    assert lifted.reason == "ECC errors seen by the vendor tool"


async def test_a_drain_survives_a_restart_of_the_service(make_node):
    first = make_node()
    await first.service.drain(ROOT, DrainRequest(3, "sent for repair"))
    await first.close()
    second = make_node()  # on the same state dir
    snap = await second.service.read_now()
    assert snap.cards[3].state == "drained" and snap.occupancy.drained == {3: "sent for repair"}


# ── XIDs ─────────────────────────────────────────────────────────────────────


#: the XID tests' node: the simulated probe, whose scene file raises XIDs
XIDS = pytest.mark.service_node(probe="scene", xid_rules=XidRules.of(DEFAULT_XID_DRAIN, ignore=(92,)))


def raise_xids(node: ServiceNode, card: int, *events: dict) -> None:
    node.edit(card, xid_events=[*node.cards[card].get("xid_events", []), *events])


@XIDS
async def test_xid_79_drains_its_card_saying_to_reboot_and_is_handled_once(service_node):
    service_node.serve()
    await until_async(lambda: watching(service_node), "the XID watcher")
    raise_xids(service_node, 1, {"id": "e1", "xid": 79})
    await until_async(lambda: service_node.kinds("drain"), "the drain")
    await until_async(
        lambda: (s := service_node.service.reading.snapshot) and s.cards[1].state == "drained", "a reading"
    )
    card = service_node.service.reading.snapshot.cards[1]
    assert (card.drain.source, card.drain.xid, card.drain.by) == ("xid", 79, "xid")
    assert card.reason == "XID 79: GPU has fallen off the bus; reboot the node"
    await asyncio.sleep(0.5)  # the watcher reads the scene again and again
    # one change of the card, one entry: the drain, saying which XID did it
    assert service_node.kinds("xid") == []
    [drain] = service_node.kinds("drain")
    said = (drain["cards"], drain["xid"], drain["source"], drain["watcher"], drain["verdict"])
    assert said == ([1], 79, "xid", "simulated", "reboot")
    assert drain["message"] == "card 1 drained: XID 79: GPU has fallen off the bus; reboot the node"
    with pytest.raises(NoCapacity):
        await service_node.service.launch(ALICE, LaunchRequest(cards=4, command=("sh",), run_id="all"))


@XIDS
async def test_an_application_xid_is_logged_against_the_job_and_shown_without_draining(service_node):
    service_node.serve()
    await service_node.service.launch(ALICE, LaunchRequest(cards=1, command=("sh",), run_id="train"))
    await until_async(lambda: watching(service_node), "the XID watcher")
    raise_xids(service_node, 0, {"id": "a", "xid": 13, "pid": 4242})
    [entry] = await until_async(lambda: service_node.kinds("xid"), "the XID in the log")
    assert (entry["cards"], entry["xid"], entry["verdict"], entry["run_id"], entry["owner"], entry["pid"]) == (
        [0],
        13,
        "application",
        "train",
        "alice",
        4242,
    )
    assert entry["message"] == (
        "card 0: XID 13: graphics engine exception (the program on the card faulted) "
        "while train of alice held it; the program on the card failed; the card is "
        "fine and was not drained"
    )
    card = await until_async(lambda: (c := service_node.service.reading.snapshot.cards[0]).warning and c, "the warning")
    assert card.state == "job" and card.drain is None
    assert "XID 13 at" in card.warning and "(the program of train of alice)" in card.warning
    assert service_node.kinds("drain") == []


@XIDS
async def test_other_xids_are_shown_ignored_ones_only_logged_and_the_drivers_action_wins(service_node):
    service_node.serve()
    await until_async(lambda: watching(service_node), "the XID watcher")
    raise_xids(service_node, 2, {"id": "o", "xid": 63})
    raise_xids(service_node, 3, {"id": "i", "xid": 92})
    raise_xids(service_node, 1, {"id": "r", "xid": 13, "recovery_action": 1})
    await until_async(lambda: len(service_node.kinds("xid")) == 2, "two XIDs in the log")
    snap = await until_async(
        lambda: (s := service_node.service.reading.snapshot) and s.cards[1].state == "drained" and s, "the drain"
    )
    assert "XID 63 at" in snap.cards[2].warning and snap.cards[2].state == "free"
    assert snap.cards[3].warning is None and snap.cards[3].state == "free"
    assert snap.cards[1].reason == (
        "XID 13: graphics engine exception (the program on the card faulted); "
        "reset the GPU (nvidia-smi -r) once nothing runs on it"
    )
    verdicts = {e["xid"]: e["verdict"] for e in service_node.kinds("xid") + service_node.kinds("drain")}
    assert verdicts == {63: "other", 92: "ignored", 13: "drain"}


@XIDS
async def test_an_xid_is_logged_once_across_restarts_of_the_service(make_node):
    """The scene's XIDs are the driver's history, there at every start: one the
    node logged before it was served again is not logged again."""
    first = make_node()
    first.serve()
    await until_async(lambda: watching(first), "the XID watcher")
    raise_xids(first, 2, {"id": "o", "xid": 63})
    await until_async(lambda: first.kinds("xid"), "the XID in the log")
    node = first
    for _ in range(3):
        await node.close()
        node = make_node(scene_cards=dict(enumerate(node.cards)))  # the same scene, XIDs and all, and state dir
        node.serve()
        await until_async(lambda n=node: watching(n), "the XID watcher again")
        await asyncio.sleep(0.5)  # it has read the scene's XIDs by now
    assert len(node.kinds("xid")) == 1
    raise_xids(node, 2, {"id": "p", "xid": 63})
    await until_async(lambda: len(node.kinds("xid")) == 2, "the new XID")
    assert [e["xid"] for e in node.kinds("xid")] == [63, 63]


async def test_a_snapshot_says_when_xids_are_not_watched_and_why(service_node):
    service_node.serve()
    await until_async(lambda: service_node.service.reading.snapshot, "a reading")
    await asyncio.sleep(0.2)
    snap = service_node.service.reading.snapshot
    assert snap.xid_watch == "" and snap.xid_problem == "XID events are not watched: the static probe reports none"


@XIDS
async def test_a_one_shot_reading_says_xids_are_watched_only_while_served(service_node):
    snap = await service_node.service.read_now()
    assert snap.xid_watch == "" and "only while the node is served" in snap.xid_problem


# ── the node's log ──────────────────────────────────────────────────────────


async def test_events_by_card_show_everyone_the_cards_and_actions_only_to_their_own(service_node):
    await service_node.service.launch(ALICE, LaunchRequest(cards=1, command=("t",), run_id="a1"))
    await service_node.service.drain(ROOT, DrainRequest(3, "broken fan"))
    assert [e["kind"] for e in await service_node.events(BOB)] == ["drain"]  # none of alice's or root's actions
    assert [(e["kind"], e.get("action")) for e in await service_node.events(ALICE)] == [
        ("action", "launch"),
        ("drain", None),
    ]
    # the drain once: the operator's action is in the audit, the card's change in the events
    assert [(e["kind"], e.get("action")) for e in await service_node.events(ROOT, card=3)] == [("drain", None)]
    assert [e["action"] for e in await service_node.events(ROOT, card=0)] == ["launch"]
    assert await service_node.events(ROOT, card=2) == []


async def test_intruders_seen_and_gone_and_a_reservation_expiring_are_logged(service_node):
    await service_node.service.reserve(ALICE, ReserveRequest(cards=1, duration_s=3600, run_id="rsv-a"))
    await service_node.service.read_now()
    service_node.probe.set_card(0, processes=(ProcessFacts(os.getpid(), 2048),))  # root's, on alice's card
    await service_node.service.read_now()
    service_node.probe.set_card(0, processes=())
    await service_node.service.read_now()
    seen, gone = service_node.kinds("intruder")
    assert seen["state"] == "seen" and seen["pid"] == os.getpid() and seen["cards"] == [0]
    assert "is using card 0, reserved by alice until" in seen["message"]
    assert gone["state"] == "gone" and gone["message"] == f"root's pid {os.getpid()} is no longer on card 0"
    job = service_node.runtime.jobs["tpn-rsv-a"]
    service_node.runtime.jobs["tpn-rsv-a"] = replace(job, status="exited", exit_code=0, expires_at=time.time() - 1)
    await service_node.service.read_now()
    [expiry] = service_node.kinds("expiry")
    assert expiry["message"] == "reservation rsv-a of alice expired; card 0 is no longer held by it"


async def test_what_an_accounts_jobs_did_is_on_its_own_shelf_seen_by_it_and_the_operators(service_node):
    """A job's end and a reservation's expiry are what its owner's account made happen:
    kept on that account's shelf, so its churn pushes out only its own entries; the
    node's shelf keeps the operators' and the node's own (a drain)."""
    await service_node.service.launch(BOB, LaunchRequest(cards=1, command=("t",), run_id="b1"))
    await service_node.service.reserve(BOB, ReserveRequest(cards=1, duration_s=3600, run_id="b2"))
    await service_node.service.drain(ROOT, DrainRequest(3, "broken fan"))
    await service_node.service.read_now()
    job = service_node.runtime.jobs["tpn-b1"]
    service_node.runtime.jobs["tpn-b1"] = replace(job, status="exited", exit_code=0)
    rsv = service_node.runtime.jobs["tpn-b2"]
    service_node.runtime.jobs["tpn-b2"] = replace(rsv, status="exited", exit_code=0, expires_at=time.time() - 1)
    await service_node.service.read_now()
    [ended], [expiry] = service_node.kinds("ended"), service_node.kinds("expiry")
    assert ended["owner_uid"] == expiry["owner_uid"] == BOB.uid
    node_shelf = service_node.log.path.read_text()
    assert "drain" in node_shelf and "b1" not in node_shelf and "b2" not in node_shelf
    assert service_node.log.shelf(BOB.uid).read_text().count('"owner_uid"') == 2
    kinds = {e["kind"] for e in await service_node.events(BOB)}
    assert {"ended", "expiry", "drain"} <= kinds
    assert {e["kind"] for e in await service_node.events(ALICE)} == {"drain"}
    assert {"ended", "expiry", "drain"} <= {e["kind"] for e in await service_node.events(ROOT)}
    # followed as it is written, alike
    seen: dict = {ALICE.user: [], ROOT.user: []}

    async def follow(caller) -> None:
        async for entry in await service_node.service.follow_events(caller, EventsRequest()):
            seen[caller.user].append(entry["kind"])

    followers = [asyncio.ensure_future(follow(c)) for c in (ALICE, ROOT)]
    await asyncio.sleep(0.05)
    await service_node.service.launch(BOB, LaunchRequest(cards=1, command=("t",), run_id="b3"))
    await service_node.service.read_now()
    job = service_node.runtime.jobs["tpn-b3"]
    service_node.runtime.jobs["tpn-b3"] = replace(job, status="exited", exit_code=0)
    await service_node.service.read_now()
    await until_async(lambda: "ended" in seen[ROOT.user], "the operator to see b3 end")
    for follower in followers:
        follower.cancel()
    assert "ended" not in seen[ALICE.user]


async def restarted(first: ServiceNode, make_node) -> ServiceNode:
    """The same node served again, by a new service, as after the agent's restart:
    the same probe and runtime, the same state dir and log."""
    await first.close()
    return make_node(probe=first.probe, runtime=first.runtime)


async def test_an_intruder_is_logged_once_across_restarts_and_its_going_once(make_node):
    first = make_node()
    await first.service.reserve(ALICE, ReserveRequest(cards=1, duration_s=3600, run_id="rsv-a"))
    first.probe.set_card(0, processes=(ProcessFacts(os.getpid(), 2048),))  # root's, on alice's card
    await first.service.read_now()
    node = first
    for _ in range(4):
        node = await restarted(node, make_node)
        await node.service.read_now()
        await node.service.read_now()
    assert [e["state"] for e in node.kinds("intruder")] == ["seen"]
    node.probe.set_card(0, processes=())  # it went while the node was not served
    node = await restarted(node, make_node)
    await node.service.read_now()
    node = await restarted(node, make_node)
    await node.service.read_now()
    assert [e["state"] for e in node.kinds("intruder")] == ["seen", "gone"]


async def test_an_intruder_is_not_said_gone_while_nothing_moved(service_node):
    """A reading that cannot list the card's processes, or cannot tell whose one
    is or when it started, is no news: the intruder is still there as far as
    anyone knows. A pid no longer listed is gone; one still listed but no longer
    an intruder (its card no longer held) is said to be that, not gone."""
    await service_node.service.reserve(ALICE, ReserveRequest(cards=1, duration_s=3600, run_id="rsv-a"))
    mine = ProcessFacts(os.getpid(), 2048)
    service_node.probe.set_card(0, processes=(mine,))
    await service_node.service.read_now()
    service_node.probe.set_card(0, processes=None)  # the driver's list could not be read this time
    await service_node.service.read_now()
    service_node.probe.set_card(0, processes=(mine,))
    await service_node.service.read_now()
    assert [e["state"] for e in service_node.kinds("intruder")] == ["seen"]
    await service_node.service.stop(ALICE, StopRequest("rsv-a"))
    await service_node.service.read_now()
    [seen, moved] = service_node.kinds("intruder")
    assert moved["state"] == "gone" and moved["message"] == (
        f"root's pid {os.getpid()} is still on card 0, no longer an intruder: the card is no longer held"
    )


async def test_a_health_problem_is_logged_once_across_restarts(make_node):
    first = make_node()
    first.probe.set_card(2, health=("3 uncorrected ECC errors",))
    await first.service.read_now()
    node = first
    for _ in range(3):
        node = await restarted(node, make_node)
        await node.service.read_now()
    node.probe.set_card(2, health=())
    node = await restarted(node, make_node)
    await node.service.read_now()
    await node.service.read_now()
    assert [e["message"] for e in node.kinds("health")] == [
        "card 2: 3 uncorrected ECC errors",
        "card 2 no longer reports: 3 uncorrected ECC errors",
    ]


async def test_a_drain_shows_once_in_the_events_and_as_an_action_in_the_audit(service_node):
    """The operator's drain is one change of the card: the events show it once
    (the card's entry); the audit keeps the action."""
    await service_node.service.drain(ROOT, DrainRequest(3, "fan"))
    await service_node.service.undrain(ROOT, UndrainRequest(3))
    shown = await service_node.events(ROOT, card=3)
    assert [e["kind"] for e in shown] == ["drain", "undrain"], shown
    audit = await service_node.service.audit(ROOT, AuditRequest())
    assert [e["action"] for e in audit.entries] == ["drain", "undrain"]


def test_an_entry_s_cards_are_said_once_in_the_events_command_and_pane():
    """The line names the entry's cards; the message begins with them too
    ("card 7: XID 79 ..."), and said twice they read as a doubled prefix."""
    entry = {"time": time.time(), "kind": "xid", "cards": [7], "message": "card 7: XID 79: GPU has fallen off the bus"}
    line = event_line(entry, time.time())
    assert "card 7: card 7:" not in line and line.endswith("xid: card 7: XID 79: GPU has fallen off the bus"), line
    console = Console(width=120, file=io.StringIO(), record=True)
    console.print(events_table([entry]))
    pane = console.export_text()
    assert "card 7:" not in pane and "7 -" in pane and "XID 79: GPU has fallen off the bus" in pane, pane
    drained = {"time": time.time(), "kind": "drain", "cards": [7], "message": "card 7 drained: XID 79"}
    assert event_line(drained, time.time()).endswith("drain: card 7 drained: XID 79")
    intruder = {"time": time.time(), "kind": "intruder", "cards": [2], "user": "bob", "message": "bob (pid 9) is using"}
    assert event_line(intruder, time.time()).endswith("intruder  card 2  bob: bob (pid 9) is using")


async def test_health_changes_are_logged_once_each_way(service_node):
    await service_node.service.read_now()
    service_node.probe.set_card(2, health=("3 uncorrected ECC errors",))
    await service_node.service.read_now()
    await service_node.service.read_now()
    service_node.probe.set_card(2, health=())
    await service_node.service.read_now()
    assert [e["message"] for e in service_node.kinds("health")] == [
        "card 2: 3 uncorrected ECC errors",
        "card 2 no longer reports: 3 uncorrected ECC errors",
    ]


async def test_following_the_log_gets_the_past_then_each_new_entry_once(service_node):
    await service_node.service.drain(ROOT, DrainRequest(1, "old news"))
    got: list[dict] = []

    async def follow():
        async for entry in await service_node.service.follow_events(BOB, EventsRequest(since_s=3600)):
            got.append(entry)

    follower = asyncio.ensure_future(follow())
    try:
        await until_async(lambda: got, "the past")
        await service_node.service.undrain(ROOT, UndrainRequest(1))
        await service_node.service.drain(ROOT, DrainRequest(2, "new"))
        await until_async(lambda: len(got) == 3, "the undrain and the new drain")
        await asyncio.sleep(0.1)
    finally:
        follower.cancel()
    # bob sees what happened to the cards, each once, and none of root's actions
    assert [(e["kind"], e["cards"]) for e in got] == [("drain", [1]), ("undrain", [1]), ("drain", [2])]
    assert got[0]["message"] == "card 1 drained by root: old news"


async def test_the_log_rotates_at_its_size_through_the_service(make_node):
    n = make_node(log_max_bytes=4096)
    for i in range(60):
        await n.service.drain(ROOT, DrainRequest(i % 4, f"drain number {i}" + "." * 40))
        await n.service.undrain(ROOT, UndrainRequest(i % 4))
    files = n.log.files()
    assert len(files) == 4  # events.jsonl and three rotated
    assert all(f.stat().st_size <= 4096 for f in files)
    entries = await n.events(ROOT)
    assert entries[-1]["kind"] == "undrain" and len(entries) < 120  # the oldest were dropped
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries)


# ── idle reservations and history ───────────────────────────────────────────


async def test_a_reservation_nobody_uses_is_marked_idle_and_use_clears_it(make_node):
    clock = Clock()
    n = make_node(clock=clock, idle_after_s=30 * 60)
    await n.service.reserve(ROOT, ReserveRequest(cards=2, duration_s=7200, run_id="rsv-r"))
    start = clock.now
    await n.service.read_now()
    clock.now += 29 * 60
    assert (await n.service.read_now()).idle == {}
    clock.now += 2 * 60
    assert (await n.service.read_now()).idle == {"rsv-r": start}
    n.probe.set_card(1, processes=(ProcessFacts(os.getpid(), 1024),))  # root's own, on root's card
    clock.now += 60
    assert (await n.service.read_now()).idle == {}
    n.probe.set_card(1, processes=())
    n.probe.set_card(0, memory_used_mib=40_000)  # memory in use, no process seen: in use too
    clock.now += 45 * 60
    assert (await n.service.read_now()).idle == {}
    n.probe.set_card(0, memory_used_mib=1)
    used = clock.now
    clock.now += 45 * 60
    assert (await n.service.read_now()).idle == {"rsv-r": used}


async def test_the_service_keeps_each_cards_recent_history(service_node):
    service_node.probe.set_card(1, utilization_pct=97, temperature_c=71, power_w=650.0)
    for _ in range(3):
        await service_node.service.read_now()
    history = await service_node.service.history(ROOT, HistoryRequest(1))
    assert list(history) == [1] and len(history[1]) == 3
    assert {(s.utilization_pct, s.temperature_c, s.power_w, s.seconds) for s in history[1]} == {(97, 71, 650.0, 0.0)}
    assert set(await service_node.service.history(ROOT, HistoryRequest())) == {0, 1, 2, 3}
    with pytest.raises(BadRequest, match="card 4 is not a card of this node"):
        await service_node.service.history(ROOT, HistoryRequest(4))


# ── serving ─────────────────────────────────────────────────────────────────


async def test_serving_stops_when_cancelled_even_as_a_poll_is_asked_for(make_node):
    """A dashboard quitting cancels the polling; it must end, not poll on unseen,
    even when the cancel comes just as an action asks for a poll."""
    n = make_node()
    n.service.interval = 30
    for hops in range(4):
        runner = asyncio.ensure_future(n.service.run())
        await until_async(lambda: n.service.reading.seq > 0, "a first poll")
        await asyncio.sleep(0.05)  # waiting out the interval now
        n.service.poll_soon()
        for _ in range(hops):
            await asyncio.sleep(0)
        runner.cancel()
        done, _ = await asyncio.wait({runner}, timeout=5)
        assert done, f"run() went on polling after it was cancelled ({hops} hops after the wake)"


def test_a_storm_of_xids_is_counted_on_the_card_not_listed_without_end():
    from helpers.fleet import node_snapshot
    from tpnode_tui.triage.compare import XIDS_NAMED, Triage
    from tpnode_tui.triage.history import History

    triage = Triage(
        idle_after_s=1800,
        mem_busy_mib=1024,
        history=History(1.0),
        record=lambda *a, **k: None,
        started_at=1_700_000_000.0,
    )
    verdict = XidRules.of(DEFAULT_XID_DRAIN).judge(13, None)
    for n in range(5000):
        triage.note_xid(1, verdict, 1_700_000_000.0 + n * 0.1, None)
    card = triage.decorate(node_snapshot(), 1_700_000_500.5, xid_watch="nvml", xid_problem=None).cards[1]
    assert card.warning.startswith("997 more XIDs in the last 15 min; XID 13 at")
    assert card.warning.count("XID 13 at") == XIDS_NAMED
