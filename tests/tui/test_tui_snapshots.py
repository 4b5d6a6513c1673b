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
import math
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Optional

import pytest

from helpers.waiting import until_pilot
from tpnode_tui.core.cards import compute_occupancy
from tpnode_tui.core.display import card_views
from tpnode_tui.demo.stage import scene as demo_scene
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import DeviceFence, JobState, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.model.usage import UsageFigures, UsageReport, UsageRow
from tpnode_tui.model.views import EXTERNAL, INTRUDER, UNKNOWN, Drain, Evicted, EvictReport, HolderInfo
from tpnode_tui.port.types.readings import NodeView, Reading, You
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.service.node import NO_LEDGER
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen

SIZE = (120, 40)
#: the smallest terminal the dashboard is laid out for
SHORT = (80, 24)
T = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC
SQUATTER, UNSEEN = 4242, 3999999
COMMAND = ("python", "train.py", "--config", "llama-8b.yaml")
STATE_FILE_BROKEN = "cannot read the state file /var/lib/tpnode-tui/jobs.json: it is not valid JSON; fix or move it"
OPERATOR = You(user="ana", uid=1001, operator=True, cards_held=0, card_limit=None)

#: how the frozen node fences its jobs
FENCED = DeviceFence.by("cgroup-v2")

JOBS = (
    JobState(
        name="demo-train-llama",
        run_id="demo-train-llama",
        gpus=(0,),
        status="running",
        owner="demo",
        command=COMMAND,
        started_at=T - 3723,
        pid=51234,
        device_fence=FENCED,
    ),
    JobState(
        name="rsv-alice",
        run_id="rsv-alice",
        gpus=(3,),
        status="running",
        kind="reservation",
        owner="alice",
        started_at=T - 600,
        expires_at=T + 6600,
        pid=51240,
        device_fence=DeviceFence.missing(
            "a reservation runs nothing of its own; what its owner runs outside tpnode-tui is not fenced"
        ),
    ),
    JobState(
        name="eval-nightly",
        run_id="eval-nightly",
        gpus=(4,),
        status="exited",
        owner="bob",
        command=("python", "eval.py"),
        started_at=T - 7200,
        exit_code=0,
        device_fence=FENCED,
    ),
)
#: what a node that cannot fence says, here and in each job it starts
CANNOT_FENCE = (
    "cgroup v2: the job has no cgroup of its own; cgroup v1: cannot make a cgroup in /sys/fs/cgroup/devices: "
    "Permission denied, EACCES"
)
MALLORY = HolderInfo(
    pid=SQUATTER,
    used_memory_mib=18432,
    visible=True,
    user="mallory",
    uid=1003,
    command="python notebook_kernel.py --port 8888",
    started_at=T - 86000,
    belongs=EXTERNAL,
)
HOLDERS = {
    2: (MALLORY,),
    5: (HolderInfo(pid=UNSEEN, used_memory_mib=30720, visible=False, belongs=UNKNOWN),),
}


def read_scene(tmp_path, *, blind: bool = False, fail: str = "", squatted: int = 2) -> ProbeReading:
    """The demo's scene, with an outside process of mallory's on card ``squatted``."""
    data = demo_scene(UNSEEN)
    data["cards"][squatted].update(
        memory_used_mib=18950,
        utilization_pct=97,
        temperature_c=61,
        power_w=512.3,
        processes=[{"pid": SQUATTER, "used_memory_mib": 18432}],
    )
    data["blind"] = blind
    if fail:
        data = {"cards": [], "fail": fail}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(data))
    reading = asyncio.run(SimulatedProbe(path).read())
    if reading.problem:  # no temporary path in a picture that must not change
        reading = replace(reading, problem=reading.problem.replace(str(path), "/srv/demo/node.json"))
    return reading


def frozen_snapshot(
    reading: ProbeReading,
    jobs=JOBS,
    queue: tuple[QueuedLaunch, ...] = (),
    *,
    holders=HOLDERS,
    drains: Optional[dict[int, Drain]] = None,
    idle: Optional[dict[str, float]] = None,
    node_fence: DeviceFence = FENCED,
) -> NodeSnapshot:
    total = reading.count or 0
    occ = compute_occupancy(total, jobs, reading, mem_busy_mib=512, drains=drains or {})
    return NodeSnapshot(
        taken_at=T,
        host="gpu-node-07",
        occupancy=occ,
        cards=card_views(occ, reading, jobs, lambda c: holders.get(c.index, ()), drains or {}),
        jobs=jobs,
        probe=reading,
        series="NVIDIA H200",
        runtime="processes recorded in /var/lib/tpnode-tui/jobs.json",
        runtime_kind="process",
        lock="flock /var/lib/tpnode-tui/alloc.lock",
        explain=occ.explain(),
        queue=queue,
        idle=idle or {},
        node_fence=node_fence,
    )


def hour_of(snap: NodeSnapshot) -> dict[int, list[Sample]]:
    """An hour of each card's readings ending at T, the same on every run: 10-second
    averages, then every second of the last five minutes; a busy card's
    utilisation rises and falls around its reading now, an idle card's stays 0."""
    history = {}
    for card in snap.cards:
        f = card.facts
        util = float(f.utilization_pct or 0) if f else 0.0
        memory = float(f.memory_used_mib or 0) if f else 0.0
        samples = []
        times = [(T - 3600 + 10 * n, 10.0) for n in range(330)] + [(T - 300 + n, 0.0) for n in range(300)]
        for at, seconds in times:
            wave = 0.5 + 0.5 * math.sin((at - T) / 300 + card.index)
            samples.append(Sample(at, seconds, util * wave if util else 0.0, memory * (0.6 + 0.4 * wave), None, None))
        history[card.index] = samples
    return history


#: what the frozen node's log says, oldest first
EVENTS = (
    {
        "time": T - 1800,
        "kind": "drain",
        "message": "card 4 drained by ana: fan failing, replacement ordered (RMA 4411)",
        "cards": [4],
        "user": "ana",
        "source": "operator",
        "by": "ana",
    },
    {
        "time": T - 600,
        "kind": "action",
        "action": "reserve",
        "target": "rsv-alice",
        "result": "ok",
        "message": "alice reserved card 3 for 2h (rsv-alice)",
        "cards": [3],
        "user": "alice",
        "uid": 1002,
    },
    {
        "time": T - 420,
        "kind": "intruder",
        "state": "seen",
        "cards": [3],
        "user": "mallory",
        "pid": SQUATTER,
        "message": "mallory (pid 4242, python notebook_kernel.py --port 8888, 18.0 GiB) is using card 3, "
        "reserved by alice until 13:50",
    },
    {
        "time": T - 300,
        "kind": "drain",
        "cards": [7],
        "source": "xid",
        "xid": 79,
        "verdict": "reboot",
        "watcher": "nvml",
        "by": "xid",
        "message": "card 7 drained: XID 79: GPU has fallen off the bus; reboot the node",
    },
    {
        "time": T - 240,
        "kind": "xid",
        "xid": 63,
        "verdict": "other",
        "cards": [5],
        "message": "card 5: XID 63: ECC page retirement or row remapping recorded",
    },
    {
        "time": T - 60,
        "kind": "health",
        "state": "started",
        "cards": [6],
        "message": "card 6: row remapping pending, which needs a GPU reset \x1b[31m[/]",
    },
)


#: who used the frozen node's cards over the last day and the last week: (user, uid, held, used, idle, jobs, rsv)
USAGE = {
    1: (
        ("demo", 1000, 31.5, 22.8, 1.2, 3, 0),
        ("alice", 1002, 12.0, 0.4, 10.5, 0, 2),
        ("bob", 1003, 6.25, 5.1, 0.3, 4, 0),
    ),
    7: (
        ("demo", 1000, 180.5, 131.2, 9.0, 14, 0),
        ("alice", 1002, 96.0, 12.3, 70.1, 2, 5),
        ("bob", 1003, 44.0, 35.2, 2.6, 19, 1),
        ("svc-nightly-evaluation", 1010, 20.0, 18.0, 0.5, 7, 0),
    ),
}


def usage_report(since: float, until: float, you: You) -> UsageReport:
    """The frozen node's report of a span, as ``you`` may see it (their own row and
    the total; an operator, everyone's), with the peaks the CLI would print."""
    rows = [
        UsageRow(UsageFigures(held, used, idle, 0, 0, 40960, jobs, rsv), user=user, uid=uid)
        for user, uid, held, used, idle, jobs, rsv in USAGE[round((until - since) / 86400)]
    ]
    total = UsageFigures(
        *(sum(getattr(r.figures, f) for r in rows) for f in ("held_card_hours", "used_card_hours", "idle_card_hours")),
        0,
        0,
        40960,
        sum(r.figures.jobs for r in rows),
        sum(r.figures.reservations for r in rows),
    )
    seen = [r for r in rows if you.operator or r.uid == you.uid]
    return UsageReport(since, until, "user", tuple(seen), total, you.operator, 90)


class FrozenNode:
    """A node that hands out prepared readings through the Node port, one per
    ``views()`` step, then keeps the last; ``gone`` makes it an agent that
    stops answering after them. Its usage is :data:`USAGE`, unless ``usage_refused``."""

    in_process = True
    outlives_client = False
    where = "served in-process (no agent)"

    def __init__(
        self, *readings: Reading, you: You = OPERATOR, gone: Optional[str] = None, usage_refused: str = ""
    ) -> None:
        self.readings = readings
        self.you = you
        self.gone = gone
        self.usage_refused = usage_refused

    async def views(self) -> AsyncIterator[NodeView]:
        for reading in self.readings:
            yield NodeView(reading, self.you)
        if self.gone is not None:
            raise AgentUnavailable(self.gone)
        await asyncio.Event().wait()

    async def usage(self, since: float, until: float, by: str = "user") -> UsageReport:
        if self.usage_refused:
            raise RuntimeUnavailable(self.usage_refused)
        return usage_report(since, until, self.you)

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        snap = next((r.snapshot for r in self.readings if r.snapshot is not None), None)
        hour = hour_of(snap) if snap is not None else {}
        return hour if card is None else {card: hour.get(card, [])}

    async def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        if opened is not None:
            opened()
        for entry in EVENTS:
            if card is None or card in entry["cards"]:
                yield dict(entry)
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


class FrozenAgent(FrozenNode):
    """The same, as if served by an agent at the usual socket."""

    in_process = False
    outlives_client = True
    where = "agent at /run/tpnode-tui/agent.sock"


def good(snap: NodeSnapshot, seq: int = 1) -> Reading:
    return Reading(seq=seq, snapshot=snap)


@pytest.fixture(autouse=True)
def fixed_world(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(
        "tpnode_tui.tui.screens.flows.launches.new_run_id", lambda prefix="run": f"{prefix}-1130-120000-a1b2"
    )
    yield
    monkeypatch.undo()
    time.tzset()


class NoDemo:
    """A demo with nothing to open and nothing moving: only the demo keys show."""

    async def open(self):
        return []

    async def animate(self):
        pass


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


def history_settled(app: NodeDashboard) -> bool:
    """The history is fetched, or nothing on screen would show it (so none is)."""
    return app.history.fetches >= 1 or not app.main.wants_history


async def first_poll(pilot) -> None:
    """Until the first reading is shown, and the history fetched after it."""
    await until_pilot(
        pilot,
        lambda: pilot.app.follower.readings >= 1 or pilot.app.follower.stale_since is not None,
        "the first reading",
        every=0.02,
    )
    await until_pilot(
        pilot,
        lambda: pilot.app.follower.snapshot is None or history_settled(pilot.app),
        "the history after it",
        every=0.02,
    )
    await pilot.pause()


def readings(n: int):
    async def wait(pilot) -> None:
        await until_pilot(
            pilot,
            lambda: pilot.app.follower.readings >= n and history_settled(pilot.app),
            f"{n} readings and the history",
            every=0.02,
        )
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

    def test_80x24_shows_every_card_and_keeps_the_jobs_table_on_screen(self, snap_compare, tmp_path):
        """A compact line per card, two to a row: all eight, the header's words whole,
        and the jobs table's columns whole (those with no room left out, never cut)."""
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SHORT, run_before=first_poll)

    def test_80x24_the_detail_pane_keeps_each_fact_whole(self, snap_compare, tmp_path):
        """The selected card's facts wrap under their own column, a uuid or a PCI address never split."""
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SHORT, run_before=first_poll, press=["right", "right", "enter", "end"])

    def test_80x24_the_node_s_log(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path)))
        assert snap_compare(app, terminal_size=SHORT, run_before=first_poll, press=["e"])


class TestFence:
    def test_a_node_that_cannot_fence_says_so_and_each_job_why(self, snap_compare, tmp_path):
        """Run as an ordinary account, without the agent: the header marks it, the
        jobs table says "no", and the selected job's detail says why."""
        loose = DeviceFence.missing(CANNOT_FENCE)
        jobs = tuple(replace(j, device_fence=loose) if j.kind == "job" else j for j in JOBS)
        app = frozen(frozen_snapshot(read_scene(tmp_path), jobs, node_fence=loose))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


class TestWho:
    def test_someone_who_is_not_an_operator_through_the_agent(self, snap_compare, tmp_path):
        """bob holds one card of his two; the job on card 0 is not his, so no Stop."""
        bob = You(user="bob", uid=1002, operator=False, cards_held=1, card_limit=2)
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path))), you=bob), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll)


async def usage_shown(pilot) -> None:
    """The main screen, then the usage view (a) once the node has answered it."""
    await first_poll(pilot)
    await pilot.press("a")
    await until_pilot(pilot, lambda: getattr(pilot.app.screen, "read", None) is not None, "the usage", every=0.02)
    await pilot.pause()


class TestUsage:
    def test_an_operator_sees_a_bar_for_every_account_and_the_node_s_total(self, snap_compare, tmp_path):
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path)))), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=usage_shown)

    def test_an_account_sees_its_own_bar_and_the_node_s_total(self, snap_compare, tmp_path):
        alice = You(user="alice", uid=1002, operator=False, cards_held=1, card_limit=None)
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path))), you=alice), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=usage_shown)

    def test_a_node_served_in_process_says_its_agent_records_usage(self, snap_compare, tmp_path):
        app = dashboard(FrozenNode(good(frozen_snapshot(read_scene(tmp_path))), usage_refused=NO_LEDGER), demo=False)
        assert snap_compare(app, terminal_size=SIZE, run_before=usage_shown)


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
        gone = (
            "no agent answers at /run/tpnode-tui/agent.sock (it went away mid-stream); start it "
            "(systemctl start tpnode-tui-agent) or ask the node's operator"
        )
        app = dashboard(FrozenAgent(good(frozen_snapshot(read_scene(tmp_path))), gone=gone), demo=False)

        async def gone_away(pilot) -> None:
            await until_pilot(
                pilot,
                lambda: pilot.app.follower.stale_since is not None and history_settled(pilot.app),
                "the agent gone, and the history",
                every=0.02,
            )
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


#: card 3 is rsv-alice's, and mallory's notebook sits on it
ON_ALICES = {3: (replace(MALLORY, belongs=INTRUDER),), 5: HOLDERS[5]}
DRAINS = {
    4: Drain(card=4, reason="fan failing, replacement ordered (RMA 4411)", by="ana", at=T - 7200),
    7: Drain(
        card=7,
        reason="XID 79: GPU has fallen off the bus; reboot the node",
        by="xid",
        at=T - 300,
        source="xid",
        xid=79,
        boot="boot-a",
        reboot=True,
    ),
}


def triage_snapshot(tmp_path, **kwargs) -> NodeSnapshot:
    return frozen_snapshot(read_scene(tmp_path, squatted=3), holders=ON_ALICES, **kwargs)


class FrozenEvict(FrozenNode):
    """Answers evict's dry run as the node would for mallory's notebook on card 3."""

    async def evict(
        self, card: int, pid: Optional[int] = None, *, kill: bool = False, dry_run: bool = False
    ) -> EvictReport:
        e = Evicted(
            card=card,
            pid=SQUATTER,
            user="mallory",
            uid=1003,
            command=MALLORY.command,
            belongs=INTRUDER,
            used_memory_mib=18432,
            outcome="listed",
            fate="would be sent SIGTERM",
        )
        return EvictReport(card=card, dry_run=dry_run, kill=kill, grace_s=10.0, processes=(e,))


class TestTriage:
    """Whose process is on whose card, which cards are out of service and why, what happened."""

    def test_an_intruder_on_an_idle_reservation(self, snap_compare, tmp_path):
        """Card 3 keeps its state, says who is on it in the error colour, and is idle 45m."""
        app = frozen(triage_snapshot(tmp_path, idle={"rsv-alice": T - 45 * 60}))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["right"] * 3)

    def test_an_idle_reservation_in_the_jobs_table(self, snap_compare, tmp_path):
        app = frozen(frozen_snapshot(read_scene(tmp_path), idle={"rsv-alice": T - 45 * 60}))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["tab", "tab", "down"])

    def test_a_reservation_the_node_releases_soon_and_a_job_idle_held(self, snap_compare, tmp_path):
        """Card 3's tile counts down to its release, and its detail says when and how to
        keep it; card 0's job has held it at 0 % with memory for an hour; the jobs table
        says both."""
        reading = read_scene(tmp_path)
        cards = list(reading.cards)
        cards[0] = replace(cards[0], utilization_pct=0, memory_used_mib=41_000)
        jobs = tuple(replace(j, started_at=T - 3 * 3600) if j.kind == "reservation" else j for j in JOBS)
        snap = frozen_snapshot(replace(reading, cards=tuple(cards)), jobs, idle={"rsv-alice": T - 3 * 3600})
        snap = replace(snap, releases={"rsv-alice": T + 725}, idle_held={"demo-train-llama": T - 3600})
        assert snap_compare(frozen(snap), terminal_size=SIZE, run_before=first_poll, press=["right"] * 3)

    def test_a_card_an_operator_drained(self, snap_compare, tmp_path):
        app = frozen(triage_snapshot(tmp_path, drains=DRAINS))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["down"])

    def test_a_card_an_xid_drained(self, snap_compare, tmp_path):
        """Until when it stays out: a reboot, a check passed since, then an operator (no return after a check)."""
        snap = replace(triage_snapshot(tmp_path, drains=DRAINS), return_after_check=False, boot="boot-a")
        assert snap_compare(frozen(snap), terminal_size=SIZE, run_before=first_poll, press=["down"] + ["right"] * 3)

    def test_undrain_asks_naming_every_refusal(self, snap_compare, tmp_path):
        snap = replace(triage_snapshot(tmp_path, drains=DRAINS), return_after_check=True, boot="boot-b")
        press = ["down"] + ["right"] * 3 + ["u"]
        assert snap_compare(frozen(snap), terminal_size=SIZE, run_before=first_poll, press=press)

    def test_the_node_s_log_newest_first(self, snap_compare, tmp_path):
        app = frozen(triage_snapshot(tmp_path, drains=DRAINS))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["e"])

    def test_the_node_s_log_for_one_card(self, snap_compare, tmp_path):
        app = frozen(triage_snapshot(tmp_path, drains=DRAINS))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["right"] * 3 + ["e", "f"])

    def test_drain_asks_why(self, snap_compare, tmp_path):
        app = frozen(triage_snapshot(tmp_path))
        assert snap_compare(app, terminal_size=SIZE, run_before=first_poll, press=["right"] * 3 + ["d"])

    def test_evict_lists_exactly_what_it_would_signal(self, snap_compare, tmp_path):
        app = dashboard(FrozenEvict(good(triage_snapshot(tmp_path))))

        async def asked(pilot) -> None:
            await first_poll(pilot)
            await pilot.press(*["right"] * 3, "k")
            await until_pilot(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), "the question", every=0.02)
            await pilot.pause()

        assert snap_compare(app, terminal_size=SIZE, run_before=asked)


class TestLaunches:
    def test_launches_waiting_for_the_lock_and_queued_say_for_what(self, snap_compare, tmp_path):
        waiting = QueuedLaunch(
            run_id="run-1130-120000-a1b2",
            cards=2,
            owner="ana",
            queued_at=T - 3,
            command=COMMAND,
            uid=1001,
            state="waiting",
            waiting_for=(
                "waiting for the allocation lock /var/lib/tpnode-tui/alloc.lock (held by pid 73121 (tpnode-tui))"
            ),
        )
        later = QueuedLaunch(
            run_id="big-eval",
            cards=8,
            owner="bob",
            queued_at=T - 95,
            command=("python", "eval.py", "--all"),
            uid=1002,
            state="queued",
            waiting_for="8 cards, #1 in the queue",
        )
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
