"""Make the README's screenshots from the real demo: python screenshots/make.py [fleet]

The demo is the product over a simulated probe (real allocator, real local
processes, real lock), so these pictures show what `tpnode-tui --demo` shows:
the main screen, triage of a card held from outside the platform, and the
launch dialog. The fleet view is the real reader over a private redis-server
(it needs `redis-server`) into which real publishers publish a dozen simulated
nodes; two of them stop publishing, and two claim one name (``fleet`` makes
only that one). Each picture is written as an SVG next to this script.
"""
from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from tpnode_tui.allocator import GpuAllocator
from tpnode_tui.demo import DEMO_COMMAND, start_demo
from tpnode_tui.tui.app import NodeDashboard, stop_demo_jobs
from tpnode_tui.tui.tiles import CardGrid

HERE = Path(__file__).resolve().parent
SIZE = (120, 40)
SQUATTED_CARD = 2  # the demo's attributable outside process


async def settle(pilot, app: NodeDashboard, timeout_s: float = 20.0) -> None:
    """Until the demo's job and reservation are up and a poll has shown them."""
    deadline = time.monotonic() + timeout_s
    while not (app.snapshot and {"demo-train-llama", "rsv-alice"} <= {j.run_id for j in app.snapshot.jobs}):
        if time.monotonic() > deadline:
            raise SystemExit("the demo did not open in time")
        await pilot.pause(0.1)
    await pilot.pause(1.5)


async def main() -> int:
    demo = start_demo()
    allocator = GpuAllocator.from_settings(demo.settings())
    app = NodeDashboard(allocator, demo=demo, default_command=DEMO_COMMAND)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            app.save_screenshot("main.svg", str(HERE))

            app.query_one(CardGrid).select(SQUATTED_CARD)
            await pilot.pause(0.5)
            app.save_screenshot("triage.svg", str(HERE))

            await pilot.press("l")
            await pilot.pause(0.5)
            app.save_screenshot("launch.svg", str(HERE))
            await pilot.press("escape")
    finally:
        await stop_demo_jobs(allocator)
        await allocator.close()
        demo.close()
    await fleet_picture()
    for name in ("main.svg", "triage.svg", "launch.svg", "fleet.svg"):
        print(HERE / name)
    return 0


async def fleet_picture() -> None:
    """A dozen nodes publishing to a redis-server of this script's own, seen by the fleet view."""
    from dataclasses import replace

    sys.path.insert(0, str(HERE.parent / "tests"))
    from fleet_tools import job, node_snapshot
    from services import RedisServer, free_port
    from tpnode_tui.fleet.publisher import FleetPublisher
    from tpnode_tui.fleet.reader import FleetReader
    from tpnode_tui.service import Reading
    from tpnode_tui.tui.fleet import FleetApp

    nodes = {
        "gpu-01": node_snapshot(jobs=(job("llama-70b-sft", (0, 1, 2, 3)), job("rsv-alice", (6,), kind="reservation"))),
        "gpu-02": node_snapshot(jobs=(job("eval-nightly", (0, 1)),), unhealthy=(7,), drained=(6,)),
        "gpu-03": node_snapshot(external=(2,), jobs=(job("ddp-4", (4, 5, 6, 7)),)),
        "gpu-04": node_snapshot(),
        "gpu-05": node_snapshot(blind=True),
        "gpu-06": node_snapshot(jobs=(job("a", (0, 1)), job("b", (2, 3)), job("c", (4, 5)), job("d", (6, 7)))),
        "gpu-07": node_snapshot(jobs=(job("sweep-17", (0,)),)),
        "gpu-08": node_snapshot(jobs=(job("bert", (0, 1, 2)),)),
        "gpu-09": node_snapshot(),
        "gpu-10": node_snapshot(jobs=(job("rl", (3, 4)),)),
        "h100-big": replace(node_snapshot(16, jobs=(job("pretrain-16", tuple(range(12))),),
                                          name="NVIDIA H100 80GB HBM3"), series="nvidia h100"),
    }
    workdir = Path(tempfile.mkdtemp(prefix="tpn-shot-"))
    server = RedisServer(port=free_port(), workdir=workdir)
    server.start()
    publishers = []
    try:
        for name, snap in nodes.items():
            period = 0.5 if name in ("gpu-09", "gpu-10") else 30.0  # these two go quiet
            publisher = FleetPublisher(server.url, server.url, name, period)
            await publisher.publish(Reading(1, replace(snap, host=name, taken_at=time.time())))
            publishers.append(publisher)
        for host in ("rack1-n3", "rack4-n9"):  # one name, two agents
            twin = FleetPublisher(server.url, server.url, "gpu-11", 30.0)
            await twin.publish(Reading(1, replace(node_snapshot(), host=host, taken_at=time.time())))
            publishers.append(twin)
        await asyncio.sleep(2.0)  # gpu-09 and gpu-10 miss three publications
        app = FleetApp(FleetReader(server.url, server.url), interval=1.0)
        async with app.run_test(size=SIZE) as pilot:
            while app.reads < 1:
                await pilot.pause(0.1)
            await pilot.pause(0.5)
            app.save_screenshot("fleet.svg", str(HERE))
    finally:
        for publisher in publishers:
            await publisher.close()
        server.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["fleet"]:
        asyncio.run(fleet_picture())
        print(HERE / "fleet.svg")
        sys.exit(0)
    sys.exit(asyncio.run(main()))
