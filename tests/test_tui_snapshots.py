"""What the dashboard looks like, pinned as SVG snapshots at 120x40.

The picture must be the same on every machine and every run, so the node is
frozen: the demo's own scene read by the real simulated probe, with fixed
pids, jobs and times, turned into a snapshot by the real occupancy rules. The
node the app talks to hands out readings of that snapshot through the same
port as every node (views), and who asks is fixed too; the clock and the time
zone are fixed. Update with --snapshot-update and look at the result before
committing it.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator, Optional

import pytest

from tpnode_tui.demo import scene as demo_scene
from tpnode_tui.model import HolderInfo, JobState, NodeSnapshot, ProbeReading, QueuedLaunch
from tpnode_tui.node.base import NodeView
from tpnode_tui.node.remote import AgentNode, AgentUnavailable
from tpnode_tui.occupancy import card_views, compute_occupancy
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.service import Reading, You
from tpnode_tui.tui.app import NodeDashboard

SIZE = (120, 40)
T = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC
SQUATTER, UNSEEN = 4242, 3999999
COMMAND = ("python", "train.py", "--config", "llama-8b.yaml")
STATE_FILE_BROKEN = ("cannot read the state file /var/lib/tpnode-tui/jobs.json: it is not valid JSON; "
                     "fix or move it")
OPERATOR = You(user="ana", uid=1001, operator=True, cards_held=0, card_limit=None)

JOBS = (
    JobState(name="demo-train-llama", run_id="demo-train-llama", gpus=(0, 1), status="running",
             owner="demo", command=COMMAND, started_at=T - 3723, pid=51234),
    JobState(name="rsv-alice", run_id="rsv-alice", gpus=(3,), status="running", kind="reservation",
             owner="alice", started_at=T - 600, expires_at=T + 6600, pid=51240),
    JobState(name="eval-nightly", run_id="eval-nightly", gpus=(4,), status="exited",
             owner="bob", command=("python", "eval.py"), started_at=T - 7200, exit_code=0),
)
HOLDERS = {
    2: (HolderInfo(pid=SQUATTER, used_memory_mib=18432, visible=True, user="mallory",
                   command="python notebook_kernel.py --port 8888", started_at=T - 86000),),
    5: (HolderInfo(pid=UNSEEN, used_memory_mib=30720, visible=False),),
}


def read_scene(tmp_path, *, blind: bool = False, fail: str = "") -> ProbeReading:
    data = demo_scene(SQUATTER, UNSEEN)
    data["blind"] = blind
    if fail:
        data = {"cards": [], "fail": fail}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(data))
    reading = asyncio.run(SimulatedProbe(path).read())
    if reading.problem:  # no temporary path in a picture that must not change
        reading = replace(reading, problem=reading.problem.replace(str(path), "/srv/demo/node.json"))
    return reading


def frozen_snapshot(reading: ProbeReading, jobs=JOBS, queue: tuple[QueuedLaunch, ...] = ()) -> NodeSnapshot:
    total = reading.count or 0
    occ = compute_occupancy(total, jobs, reading, mem_busy_mib=512)
    return NodeSnapshot(
        taken_at=T,
        host="gpu-node-07",
        occupancy=occ,
        cards=card_views(occ, reading, jobs, lambda c: HOLDERS.get(c.index, ())),
        jobs=jobs,
        probe=reading,
        series="nvidia h200",
        runtime="processes recorded in /var/lib/tpnode-tui/jobs.json",
        runtime_kind="process",
        lock="flock /var/lib/tpnode-tui/alloc.lock",
        explain=occ.explain(),
        queue=queue,
    )


class FrozenNode:
    """A node that hands out prepared readings through the Node port, one per
    ``views()`` step, then keeps the last; ``gone`` makes it an agent that
    stops answering after them."""

    via = "local"

    def __init__(self, *readings: Reading, you: You = OPERATOR, gone: Optional[str] = None) -> None:
        self.readings = readings
        self.you = you
        self.gone = gone

    async def views(self) -> AsyncIterator[NodeView]:
        for reading in self.readings:
            yield NodeView(reading, self.you)
        if self.gone is not None:
            raise AgentUnavailable(self.gone)
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


class FrozenAgent(AgentNode, FrozenNode):
    """The same, as if served by an agent at the usual socket."""

    via = "agent"

    def __init__(self, *readings: Reading, you: You = OPERATOR, gone: Optional[str] = None) -> None:
        AgentNode.__init__(self, Path("/run/tpnode-tui/agent.sock"))
        FrozenNode.__init__(self, *readings, you=you, gone=gone)

    views = FrozenNode.views


def good(snap: NodeSnapshot, seq: int = 1) -> Reading:
    return Reading(seq=seq, snapshot=snap)


@pytest.fixture(autouse=True)
def fixed_world(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr("tpnode_tui.tui.app.new_run_id", lambda prefix="run": f"{prefix}-1130-120000-a1b2")
    yield
    monkeypatch.undo()
    time.tzset()


class NoDemo:
    """A demo with nothing to open: only the demo keys show."""

    async def open(self):
        return []


def dashboard(node, *, demo: bool = True) -> NodeDashboard:
    return NodeDashboard(
        node,
        demo=NoDemo() if demo else None,
        default_command=("python", "train.py"),
        clock=lambda: T + 0.5,
        reconnect_s=(3600, 3600),
    )


def frozen(snap: NodeSnapshot, **kwargs) -> NodeDashboard:
    return dashboard(FrozenNode(good(snap)), **kwargs)


async def first_poll(pilot) -> None:
    while pilot.app.readings < 1 and pilot.app.stale_since is None:
        await pilot.pause(0.02)


def readings(n: int):
    async def wait(pilot) -> None:
        while pilot.app.readings < n:
            await pilot.pause(0.02)
        await pilot.pause(0.05)
    return wait


class TestMainScreen:
    def test_every_state_at_once(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_triage_an_external_card(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["right", "right"])

    def test_narrow_terminal_has_two_columns(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=(70, 40), run_before=first_poll)

    def test_80x24_keeps_the_jobs_table_on_screen(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=(80, 24), run_before=first_poll)


class TestWho:
    def test_someone_who_is_not_an_operator_through_the_agent(self, snap_compare, tmp_path):
        """bob holds one card of his two; the job on card 0 is not his, so no Stop."""
        bob = You(user="bob", uid=1002, operator=False, cards_held=1, card_limit=2)
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path))), you=bob), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


class TestCannotSee:
    def test_probe_blind(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path, blind=True)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_stale_after_a_failed_poll(self, snap_compare, tmp_path):
        snap = frozen_snapshot(read_scene(tmp_path))
        failed = Reading(seq=2, snapshot=snap, error=STATE_FILE_BROKEN, stale_since=T)
        app = dashboard(FrozenNode(good(snap), failed))
        assert snap_compare(app, terminal_size=SIZE, run_before=readings(2))

    def test_the_agent_stopped_answering(self, snap_compare, tmp_path):
        gone = ("no agent answers at /run/tpnode-tui/agent.sock (it went away mid-stream); start it "
                "(systemctl start tpnode-tui-agent) or ask the node's operator")
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path))), gone=gone), demo=False)

        async def gone_away(pilot) -> None:
            while pilot.app.stale_since is None:
                await pilot.pause(0.02)
            await pilot.pause(0.05)

        assert snap_compare(app, terminal_size=SIZE, run_before=gone_away)

    def test_nothing_read_yet(self, snap_compare, tmp_path):
        app = dashboard(FrozenNode(Reading(seq=1, snapshot=None, error=STATE_FILE_BROKEN, stale_since=T)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_no_driver(self, snap_compare, tmp_path):
        reading = read_scene(tmp_path, fail="NVML: library not found; nvidia-smi: not found on PATH")
        app = frozen(frozen_snapshot(reading, jobs=()), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


class TestDialogs:
    def test_launch(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["l"])

    def test_launch_refuses_inline(self, snap_compare, tmp_path):
        async def mistype(pilot) -> None:
            await first_poll(pilot)
            await pilot.press("l")
            pilot.app.screen.query_one("#cards").value = "9"
            pilot.app.screen.query_one("#command").value = "python train.py 'oops"
            await pilot.press("enter")

        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=mistype)

    def test_reserve(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["v"])

    def test_help(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["question_mark"])


class TestLaunches:
    def test_launches_waiting_for_the_lock_and_queued_say_for_what(self, snap_compare, tmp_path):
        waiting = QueuedLaunch(
            run_id="run-1130-120000-a1b2", cards=2, owner="ana", queued_at=T - 3, command=COMMAND, uid=1001,
            state="waiting", waiting_for=("waiting for the allocation lock /var/lib/tpnode-tui/alloc.lock "
                                          "(held by pid 73121 (tpnode-tui))"))
        later = QueuedLaunch(run_id="big-eval", cards=8, owner="bob", queued_at=T - 95,
                             command=("python", "eval.py", "--all"), uid=1002, state="queued",
                             waiting_for="8 cards, #1 in the queue")
        app = frozen(frozen_snapshot(read_scene(tmp_path), queue=(waiting, later)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


def test_a_docker_node_s_launch_form_asks_for_an_image_as_its_snapshot_says(tmp_path):
    """Not a picture: the form follows the runtime the node reports, not a setting of this process."""
    snap = frozen_snapshot(read_scene(tmp_path))

    async def form_asks_for_an_image(kind: str) -> bool:
        app = frozen(replace(snap, runtime_kind=kind), demo=False)
        async with app.run_test(size=SIZE) as pilot:
            await first_poll(pilot)
            await pilot.press("l")
            return bool(app.screen.query("#image"))

    assert asyncio.run(form_asks_for_an_image("docker")) is True
    assert asyncio.run(form_asks_for_an_image("process")) is False
