"""Make the README's screenshots from the real demo: python screenshots/make.py [fleet]

The demo is the product over a simulated probe (the node served in-process,
real allocator, real local processes, real lock), so these pictures show what
`tpnode-tui --demo` shows: the main screen (once the demo's reservation has
been idle for its minute and the XID has drained its card), triage of the
reservation someone else's process sits on, the question evict asks, the
node's log, the MIG card with its slices, the launch dialog, and the main screen at 80x24,
the smallest terminal it is laid out for. The header names whoever runs this (as
the demo does). The fleet view is the real reader over a private redis-server
(it needs `redis-server`) into which real publishers publish a dozen simulated
nodes; two of them stop publishing, and two claim one name (``fleet`` makes
only those, at 120x40 and at 80x24). Each picture is written as an SVG next to this script.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import AsyncIterator

from tpnode_tui.demo.scene import DemoScene
from tpnode_tui.demo.stage import DEMO_COMMAND, start_demo
from tpnode_tui.node.local import LocalNode
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.widgets.tiles import CardGrid

HERE = Path(__file__).resolve().parent
SIZE = (120, 40)
SHORT = (80, 24)
INTRUDED_CARD = 2  # alice's reservation, with the demo's outside process on it
MIG_CARD = 1  # an H200 split into five MIG slices
XID_CARD = 7


def opened(app: NodeDashboard) -> bool:
    """The demo's job and reservation are up, the XID drained its card, the reservation is idle."""
    snap = app.follower.snapshot
    return (
        snap is not None
        and {"demo-train-llama", "rsv-alice"} <= {j.run_id for j in snap.jobs}
        and snap.cards[XID_CARD].state == "drained"
        and "rsv-alice" in snap.idle
    )


async def settle(pilot, app: NodeDashboard, timeout_s: float = 120.0) -> None:
    """Until the demo shows all it opens with (idle takes the demo's minute)."""
    deadline = time.monotonic() + timeout_s
    while not opened(app):
        if time.monotonic() > deadline:
            raise SystemExit("the demo did not open in time")
        await pilot.pause(0.5)
    await pilot.pause(6)  # a history fetch since, so the tiles' lines are there


async def main() -> int:
    demo = start_demo()
    node = LocalNode.from_settings(demo.settings())
    scene = DemoScene(demo, node)
    app = NodeDashboard(node, demo=scene, default_command=DEMO_COMMAND)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            app.save_screenshot("main.svg", str(HERE))

            app.query_one(CardGrid).select(MIG_CARD)
            await pilot.pause(1.0)
            app.save_screenshot("mig.svg", str(HERE))

            app.query_one(CardGrid).select(INTRUDED_CARD)
            await pilot.pause(1.0)
            app.save_screenshot("triage.svg", str(HERE))

            await pilot.press("k")
            while not isinstance(app.screen, ConfirmScreen):
                await pilot.pause(0.1)
            await pilot.pause(0.5)
            app.save_screenshot("evict.svg", str(HERE))
            await pilot.press("n")

            await pilot.press("e")
            await pilot.pause(1.0)
            app.save_screenshot("log.svg", str(HERE))
            await pilot.press("e")

            await pilot.press("l")
            await pilot.pause(0.5)
            app.save_screenshot("launch.svg", str(HERE))
            await pilot.press("escape")

            app.query_one(CardGrid).select(INTRUDED_CARD)
            await pilot.resize_terminal(*SHORT)
            await pilot.pause(1.0)
            app.save_screenshot("main-80x24.svg", str(HERE))
    finally:
        await scene.stop_jobs()
        await node.close()
        demo.close()
    await fleet_picture()
    for name in PICTURES:
        print(HERE / name)
    return 0


def fleet_nodes() -> dict:
    """A dozen simulated nodes' snapshots, by name, as the fleet's pictures show them."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from helpers.fleet import job, node_snapshot

    return {
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
        "h100-big": node_snapshot(16, jobs=(job("pretrain-16", tuple(range(12))),), name="NVIDIA H100 80GB HBM3"),
    }


@contextlib.asynccontextmanager
async def published_fleet() -> AsyncIterator[str]:
    """The dozen nodes published to a redis-server of this script's own (its URL), two of them
    gone quiet and two agents claiming one name; stopped afterwards."""
    from dataclasses import replace

    sys.path.insert(0, str(HERE.parent / "tests"))
    from helpers.fleet import node_snapshot
    from helpers.services import RedisServer, free_port
    from tpnode_tui.fleet.publisher import FleetPublisher
    from tpnode_tui.port.types.readings import Reading

    workdir = Path(tempfile.mkdtemp(prefix="tpn-shot-"))
    server = RedisServer(port=free_port(), workdir=workdir)
    server.start()
    publishers = []
    try:
        for name, snap in fleet_nodes().items():
            period = 0.5 if name in ("gpu-09", "gpu-10") else 30.0  # these two go quiet
            publisher = FleetPublisher(server.url, server.url, name, period)
            await publisher.publish(Reading(1, replace(snap, host=name, taken_at=time.time())))
            publishers.append(publisher)
        for host in ("rack1-n3", "rack4-n9"):  # one name, two agents
            twin = FleetPublisher(server.url, server.url, "gpu-11", 30.0)
            await twin.publish(Reading(1, replace(node_snapshot(), host=host, taken_at=time.time())))
            publishers.append(twin)
        await asyncio.sleep(2.0)  # gpu-09 and gpu-10 miss three publications
        yield server.url
    finally:
        for publisher in publishers:
            await publisher.close()
        server.stop()


async def fleet_picture() -> None:
    """A dozen nodes publishing to a redis-server of this script's own, seen by the fleet view."""
    from tpnode_tui.fleet.reader import FleetReader
    from tpnode_tui.tui.fleet.app import FleetApp

    async with published_fleet() as url:
        app = FleetApp(FleetReader(url, url), interval=1.0)
        async with app.run_test(size=SIZE) as pilot:
            while app.reads < 1:
                await pilot.pause(0.1)
            await pilot.pause(0.5)
            app.save_screenshot("fleet.svg", str(HERE))
            await pilot.resize_terminal(*SHORT)
            await pilot.pause(0.5)
            app.save_screenshot("fleet-80x24.svg", str(HERE))


PICTURES = (
    "main.svg",
    "mig.svg",
    "triage.svg",
    "evict.svg",
    "log.svg",
    "launch.svg",
    "main-80x24.svg",
    "fleet.svg",
    "fleet-80x24.svg",
)

if __name__ == "__main__":
    if sys.argv[1:] == ["fleet"]:
        asyncio.run(fleet_picture())
        print(HERE / "fleet.svg")
        print(HERE / "fleet-80x24.svg")
        sys.exit(0)
    sys.exit(asyncio.run(main()))
