"""Cards held and not used: the rules (tpnode_tui/core/idle.py), and the service that follows them.

The service's tests run over the stand-ins of tests/helpers/fakes.py (a
prepared reading a test changes card by card, jobs kept in memory) with a
clock the test moves: an idle-held job, and a reservation warned, then
released, kept when used or extended. The same with the real agent and real
accounts is in tests/system/test_idle_reclaim.py.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import replace

import pytest

from helpers.callers import ALICE, BOB, ROOT
from helpers.fleet import T, job, node_snapshot
from helpers.waiting import until_async
from tpnode_tui.cli.output import print_status
from tpnode_tui.core.idle import KEEP, RELEASE, WARN, IdleWarning, job_idle_held, reclaim_step
from tpnode_tui.model.facts import CardFacts, ProcessFacts
from tpnode_tui.model.jobs import JobState, SliceRef
from tpnode_tui.model.views import CardView
from tpnode_tui.port.types.events import AuditRequest, EventsRequest
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest
from tpnode_tui.text.render import clock_time

pytestmark = pytest.mark.service_node(probe="static", runtime="memory")

HOUR = 3600.0
BUSY = 512


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


# ── the rules ───────────────────────────────────────────────────────────────


def cards_reading(*readings: tuple) -> dict[int, CardView]:
    """Card i reads (utilisation, memory); a reading of None is a card the driver did not report."""
    return {
        i: CardView(i, "job", None if r is None else CardFacts(index=i, utilization_pct=r[0], memory_used_mib=r[1]))
        for i, r in enumerate(readings)
    }


def a_job(*gpus: int, slices=()) -> JobState:
    return JobState(name="j", run_id="j", gpus=gpus, status="running", slices=tuple(slices))


@pytest.mark.parametrize(
    "readings,held",
    [
        (((0, 40_000), (0, 40_000)), True),
        (((0, 40_000), (0, 1)), True),  # memory held on one of its cards, none computing
        (((0, 40_000), (3, 40_000)), False),  # one card computes: the job works
        (((0, 1), (0, 1)), False),  # nothing held: not the waste this flags
        (((0, 40_000), (None, 40_000)), None),  # a card whose utilisation is not reported
        (((0, 40_000), None), None),  # a card the driver did not report
        (((0, None), (0, 1)), None),
        (((7, None), None), False),  # computing is computing, whatever else is unknown
    ],
)
def test_a_job_is_idle_held_only_when_every_card_says_0_percent_and_memory_is_held(readings, held):
    assert job_idle_held(a_job(0, 1), cards_reading(*readings), BUSY) is held


def test_a_mig_slice_job_is_never_idle_held_the_driver_reports_no_utilisation():
    job = a_job(slices=[SliceRef(card=0, uuid="MIG-a", profile="1g.18gb")])
    assert job_idle_held(job, cards_reading((0, 40_000)), BUSY) is None


def test_warn_after_the_idle_time_keep_when_used_or_extended_release_when_the_grace_is_out():
    after, grace = 2 * HOUR, 900.0
    assert reclaim_step(0.0, None, 2 * HOUR - 1, after, grace) is None
    assert reclaim_step(0.0, None, 2 * HOUR, after, grace) == WARN
    warned = IdleWarning(at=2 * HOUR, releases_at=2 * HOUR + grace, unused_since=0.0, expires_at=10 * HOUR)
    assert reclaim_step(0.0, warned, 2 * HOUR + grace - 1, after, grace) is None
    assert reclaim_step(0.0, warned, 2 * HOUR + grace, after, grace) == RELEASE
    assert reclaim_step(2 * HOUR + 60, warned, 2 * HOUR + 120, after, grace) == KEEP  # used after the warning
    assert reclaim_step(2 * HOUR + 60, warned, 2 * HOUR + grace + 1, after, grace) == KEEP  # even at the last moment


# ── idle-held jobs, through the service ────────────────────────────────────


async def test_a_job_at_0_percent_with_memory_held_is_flagged_idle_held_after_the_time_and_work_clears_it(make_node):
    clock = Clock()
    node = make_node(clock=clock, idle_job_after_s=HOUR)
    await node.service.launch(ALICE, LaunchRequest(cards=2, command=("train",), run_id="stuck"))
    for card in (0, 1):
        node.probe.set_card(card, utilization_pct=0, memory_used_mib=40_000)
    since = clock.now
    await node.service.read_now()
    clock.now += HOUR - 60
    assert (await node.service.read_now()).idle_held == {}
    clock.now += 60
    assert (await node.service.read_now()).idle_held == {"stuck": since}
    node.probe.set_card(1, utilization_pct=None)  # a reading that cannot tell: the mark stays
    clock.now += 60
    assert (await node.service.read_now()).idle_held == {"stuck": since}
    node.probe.set_card(1, utilization_pct=4)  # it computes again
    assert (await node.service.read_now()).idle_held == {}
    node.probe.set_card(1, utilization_pct=0)
    again = clock.now
    assert (await node.service.read_now()).idle_held == {}  # idle again from this reading, not from before
    clock.now += 2 * HOUR
    assert (await node.service.read_now()).idle_held == {"stuck": again}
    assert [j.status for j in await node.runtime.ps()] == ["running"]  # flagged, never stopped


async def test_off_flags_nothing(make_node):
    clock = Clock()
    node = make_node(clock=clock)  # idle_job_after_s None: TUNEPLANE_FLAG_IDLE_JOB_AFTER=off
    await node.service.launch(ALICE, LaunchRequest(cards=1, command=("train",), run_id="stuck"))
    node.probe.set_card(0, utilization_pct=0, memory_used_mib=40_000)
    await node.service.read_now()
    clock.now += 30 * 24 * HOUR
    assert (await node.service.read_now()).idle_held == {}


# ── idle reservations given back ───────────────────────────────────────────


def reclaiming(make_node, clock: Clock, **options):
    return make_node(clock=clock, reclaim_idle_after_s=2 * HOUR, reclaim_grace_s=900.0, **options)


async def poll(node) -> None:
    """One poll as the service's loop makes it: the reading, then the idle reservations."""
    await node.service.read_now()
    node.service.give_back_idle()


async def reserved(node, owner=ROOT, run_id="rsv") -> None:
    await node.service.reserve(owner, ReserveRequest(cards=2, duration_s=10 * HOUR, run_id=run_id))
    await poll(node)


def reclaim_entries(node) -> list[tuple]:
    return [
        (e["user"], e["state"], e["result"], e["owner"], e["target"], e.get("cards"))
        for e in node.kinds("action")
        if e["action"] == "reclaim-idle"
    ]


async def test_a_reservation_unused_past_the_threshold_is_warned_then_released_as_the_node(make_node):
    clock = Clock()
    node = reclaiming(make_node, clock)
    await reserved(node, ALICE)
    clock.now += 2 * HOUR - 60
    await poll(node)
    assert node.service.reading.snapshot.releases == {}
    clock.now += 60
    await poll(node)
    warned_at = clock.now
    assert node.service.reading.snapshot.releases == {"rsv": warned_at + 900}  # shown at once, on that reading
    [warning] = [e for e in node.kinds("action") if e["action"] == "reclaim-idle"]
    assert warning["message"].startswith("alice's reservation rsv has had no process of alice's on cards 0,1 for 2h")
    assert "the node releases it at" in warning["message"] and "unless it is used or extended" in warning["message"]
    assert (warning["owner_uid"], warning["releases_at"], warning["uid"]) == (ALICE.uid, warned_at + 900, os.geteuid())
    clock.now += 899
    await poll(node)
    assert [j.status for j in await node.runtime.ps()] == ["running"]
    clock.now += 1
    await poll(node)
    await until_async(lambda: node.runtime.jobs["tpn-rsv"].status == "exited", "the release")
    await until_async(lambda: len(reclaim_entries(node)) == 2, "the release logged")
    assert reclaim_entries(node) == [
        ("node", "warned", "ok", "alice", "rsv", [0, 1]),
        ("node", "released", "ok", "alice", "rsv", [0, 1]),
    ]
    released = node.kinds("action")[-1]["message"]
    assert released.startswith("the node released alice's reservation rsv (cards 0,1): no process of alice's")
    await poll(node)
    assert node.service.reading.snapshot.releases == {}
    # the owner sees what the node did to her reservation; nobody else but operators does
    alices = (await node.service.audit(ALICE, AuditRequest())).entries
    assert [e["state"] for e in alices if e["action"] == "reclaim-idle"] == ["warned", "released"]
    bobs = (await node.service.audit(BOB, AuditRequest())).entries
    assert [e for e in bobs if e["action"] == "reclaim-idle"] == []
    assert [
        e["state"]
        for e in (await node.service.events(ALICE, EventsRequest())).entries
        if e.get("action") == "reclaim-idle"
    ] == [
        "warned",
        "released",
    ]


async def test_a_reservation_used_in_its_grace_is_kept_and_its_idle_time_starts_again(make_node):
    clock = Clock()
    node = reclaiming(make_node, clock)
    await reserved(node)
    clock.now += 2 * HOUR
    await poll(node)
    assert "rsv" in node.service.reading.snapshot.releases
    clock.now += 600
    node.probe.set_card(1, processes=(ProcessFacts(os.getpid(), 1024),))  # root's own, on root's card
    await poll(node)
    assert node.service.reading.snapshot.releases == {}
    node.probe.set_card(1, processes=())
    used = clock.now
    clock.now += 900  # the old grace is out: nothing happens
    await poll(node)
    assert [j.status for j in await node.runtime.ps()] == ["running"]
    clock.now = used + 2 * HOUR  # unused two hours again: warned again
    await poll(node)
    assert node.service.reading.snapshot.releases == {"rsv": clock.now + 900}
    assert [s for _u, s, *_ in reclaim_entries(node)] == ["warned", "kept", "warned"]
    assert "rsv was used after the warning: the node keeps it" in node.kinds("action")[-2]["message"]


async def test_a_reservation_extended_in_its_grace_is_kept(make_node):
    clock = Clock()
    node = reclaiming(make_node, clock)
    await reserved(node, ALICE)
    clock.now += 2 * HOUR
    await poll(node)
    await node.service.extend(ALICE, ExtendRequest("rsv", HOUR))
    clock.now += 900
    await poll(node)
    assert node.service.reading.snapshot.releases == {}
    assert [j.status for j in await node.runtime.ps()] == ["running"]
    assert [s for _u, s, *_ in reclaim_entries(node)] == ["warned", "kept"]
    assert "rsv was extended after the warning" in node.kinds("action")[-1]["message"]


async def test_a_reservation_whose_use_cannot_be_told_is_never_warned(make_node):
    """Unknown is not none: a process list the driver cannot give may hide its owner's job."""
    clock = Clock()
    node = reclaiming(make_node, clock)
    await reserved(node)
    node.probe.set_card(0, processes=None)
    for _ in range(3):
        clock.now += 2 * HOUR
        await poll(node)
    assert node.service.reading.snapshot.releases == {} and reclaim_entries(node) == []
    assert "rsv" in node.service.reading.snapshot.idle  # the dashboard's mark still says it looks idle


async def test_off_gives_nothing_back(make_node):
    clock = Clock()
    node = make_node(clock=clock)
    await reserved(node)
    clock.now += 9 * HOUR
    await poll(node)
    assert node.service.reading.snapshot.releases == {} and reclaim_entries(node) == []


# ── what status says ───────────────────────────────────────────────────────


def test_status_says_idle_held_and_when_a_warned_reservation_is_released():
    jobs = (job("stuck", (0,)), job("rsv-1", (1, 2), kind="reservation"), job("busy", (3,)))
    releases_at = time.time() + 900
    snap = replace(node_snapshot(jobs=jobs), releases={"rsv-1": releases_at}, idle_held={"stuck": T - 7200})
    out = io.StringIO()
    print_status(snap, out)
    lines = out.getvalue().splitlines()
    rows = {
        line.split()[0]: i for i, line in enumerate(lines) if line.split() and line.split()[0] in {j.key for j in jobs}
    }
    assert "running, idle-held" in lines[rows["stuck"]]
    assert "idle-held" not in lines[rows["busy"]] and "idle-held" not in lines[rows["rsv-1"]]
    assert lines[rows["rsv-1"] + 1] == f"  ! releases at {clock_time(releases_at, time.time())} unless used"
    assert not any("releases at" in line for line in lines[: rows["rsv-1"] + 1])
