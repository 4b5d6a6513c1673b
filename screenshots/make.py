"""Make the README's screenshots from the real demo: python screenshots/make.py

The demo is the product over a simulated probe (the node served in-process,
real allocator, real local processes, real lock), so these pictures show what
`tpnode-tui --demo` shows: the main screen, triage of a card held from outside
the platform, and the launch dialog. Each is written as an SVG next to this
script. The header names whoever runs this (as the demo does).
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tpnode_tui.demo import DEMO_COMMAND, start_demo
from tpnode_tui.node.local import LocalNode
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.demo import DemoScene
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
    node = LocalNode.from_settings(demo.settings())
    scene = DemoScene(demo, node)
    app = NodeDashboard(node, demo=scene, default_command=DEMO_COMMAND)
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
        await scene.stop_jobs()
        await node.close()
        demo.close()
    for name in ("main.svg", "triage.svg", "launch.svg"):
        print(HERE / name)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
