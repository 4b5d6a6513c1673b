"""What the dashboard looks like, pinned as SVG snapshots at 120x40.

The picture must be the same on every machine and every run, so the node is
frozen: the demo's own scene read by the real simulated probe, with fixed
pids, jobs and times, turned into a snapshot by the real occupancy rules. The
only stand-in is the allocator that hands that snapshot to the app. The clock
and the time zone are fixed too. Update with --snapshot-update and look at
the result before committing it.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Optional

import pytest

from tpnode_tui.config import Settings
from tpnode_tui.demo import scene as demo_scene
from tpnode_tui.model import HolderInfo, JobSpec, JobState, NodeSnapshot, ProbeReading, RuntimeUnavailable
from tpnode_tui.occupancy import card_views, compute_occupancy
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.tui.app import NodeDashboard

SIZE = (120, 40)
T = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC
SQUATTER, UNSEEN = 4242, 3999999
COMMAND = ("python", "train.py", "--config", "llama-8b.yaml")

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


def frozen_snapshot(reading: ProbeReading, jobs=JOBS) -> NodeSnapshot:
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
        lock="flock /var/lib/tpnode-tui/alloc.lock",
        explain=occ.explain(),
    )


class FrozenNode:
    """Hands the app a fixed snapshot; after ``fail_after`` polls it raises, as a lost runtime does.

    With ``waiting``, another process holds the allocation lock: a launch waits for it forever."""

    def __init__(self, snap: NodeSnapshot, fail_after: Optional[int] = None,
                 waiting: Optional[str] = None) -> None:
        self.snap = snap
        self.fail_after = fail_after
        self.calls = 0
        self.lock = SimpleNamespace(waiting=waiting, locked=lambda: False)
        self.runtime = SimpleNamespace(name="process")
        self.settings = Settings()

    async def snapshot(self) -> NodeSnapshot:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeUnavailable("cannot read the state file /var/lib/tpnode-tui/jobs.json: "
                                     "it is not valid JSON; fix or move it")
        return self.snap

    async def launch(self, spec: JobSpec, locked=None):
        await asyncio.Event().wait()


@pytest.fixture(autouse=True)
def fixed_world(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr("tpnode_tui.tui.app.new_run_id", lambda prefix="run": f"{prefix}-1130-120000-a1b2")
    monkeypatch.setattr("tpnode_tui.tui.app.default_owner", lambda: "operator")
    yield
    monkeypatch.undo()
    time.tzset()


def dashboard(snap: NodeSnapshot, *, demo: bool = True, fail_after: Optional[int] = None,
              waiting: Optional[str] = None) -> NodeDashboard:
    return NodeDashboard(
        FrozenNode(snap, fail_after, waiting),
        # a demo with nothing to open: only the demo keys show
        demo=SimpleNamespace(opening_jobs=lambda: []) if demo else None,
        interval=60,
        default_command=("python", "train.py"),
        clock=lambda: T + 0.5,
    )


async def first_poll(pilot) -> None:
    while pilot.app.polls < 1:
        await pilot.pause(0.02)


def polls(n: int):
    async def wait(pilot) -> None:
        await first_poll(pilot)
        while pilot.app.polls < n:
            pilot.app.poll_now()
            await pilot.pause(0.02)
    return wait


class TestMainScreen:
    def test_every_state_at_once(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_triage_an_external_card(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["right", "right"])

    def test_narrow_terminal_has_two_columns(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=(70, 40), run_before=first_poll)

    def test_80x24_keeps_the_jobs_table_on_screen(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=(80, 24), run_before=first_poll)


class TestCannotSee:
    def test_probe_blind(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path, blind=True)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_stale_after_a_failed_poll(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)), fail_after=1)
        assert snap_compare(app, terminal_size=SIZE, run_before=polls(2))

    def test_nothing_read_yet(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)), fail_after=0)
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)

    def test_no_driver(self, snap_compare, tmp_path):
        reading = read_scene(tmp_path, fail="NVML: library not found; nvidia-smi: not found on PATH")
        app = dashboard(frozen_snapshot(reading, jobs=()), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


class TestDialogs:
    def test_launch(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["l"])

    def test_launch_refuses_inline(self, snap_compare, tmp_path):
        async def mistype(pilot) -> None:
            await first_poll(pilot)
            await pilot.press("l")
            pilot.app.screen.query_one("#cards").value = "9"
            pilot.app.screen.query_one("#command").value = "python train.py 'oops"
            await pilot.press("enter")

        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=mistype)

    def test_reserve(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["v"])

    def test_help(self, snap_compare, tmp_path):
        app = dashboard(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["question_mark"])


class TestLaunches:
    def test_a_launch_waiting_for_the_lock_says_for_what(self, snap_compare, tmp_path):
        async def launch_behind_the_lock(pilot) -> None:
            await first_poll(pilot)
            pilot.app._launch_chosen(JobSpec(run_id="run-1130-120000-a1b2", cards=2, command=COMMAND,
                                             owner="operator"))
            await polls(2)(pilot)

        app = dashboard(frozen_snapshot(read_scene(tmp_path)), waiting=(
            "waiting for the allocation lock /var/lib/tpnode-tui/alloc.lock (held by pid 73121 (tpnode-tui))"))
        assert snap_compare(app, terminal_size=SIZE, run_before=launch_behind_the_lock)
