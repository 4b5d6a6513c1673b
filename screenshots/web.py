"""Make the web page's screenshots from the real demo and a real fleet: python screenshots/web.py

The node's page is the demo's (the node served in-process, real allocator,
real local processes, real lock), once its reservation has been idle for its
minute and the XID has drained its card; the fleet's is the real reader over
a private redis-server into which real publishers publish a dozen simulated
nodes (make.py's), two of them gone quiet and two claiming one name. Each is
served by the page's own server (its hub and application, in this process:
the command itself refuses root, and this script may run as root) and
photographed by the browser the tests drive (tests/helpers/browser.py):
Debian's chromium, at a desktop's width and at a phone's. Each picture is
written as a PNG next to this script.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Union

from aiohttp import web
from make import HERE, published_fleet

from tpnode_tui.demo.scene import DemoScene
from tpnode_tui.demo.stage import start_demo
from tpnode_tui.fleet.reader import FleetReader
from tpnode_tui.node.local import LocalNode
from tpnode_tui.web.app import make_app
from tpnode_tui.web.hub import FleetHub, NodeHub

sys.path.insert(0, str(HERE.parent / "tests"))
from helpers.browser import as_phone, chromium  # noqa: E402
from helpers.services import free_port  # noqa: E402

XID_CARD = 7


def photograph(url: str, name: str, ready: str, phone: bool = False) -> Path:
    """The page at ``url`` once the script ``ready`` says it is drawn, the whole of it, as ``name``."""
    with chromium() as browser:
        if phone:
            as_phone(browser)
        browser.get(url)
        deadline = time.monotonic() + 60
        while not browser.execute_script(ready):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the page was not drawn in time")
            time.sleep(0.2)
        time.sleep(1.0)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        width, scale = (375, 2) if phone else (1280, 1)
        browser.execute_cdp_cmd(  # the whole page, however long
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": phone},
        )
        time.sleep(0.5)
        path = HERE / name
        browser.save_screenshot(str(path))
    return path


async def serving(hub: Union[NodeHub, FleetHub]) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(make_app(hub), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/"


async def node_pictures() -> list[Path]:
    demo = start_demo()
    node = LocalNode.from_settings(demo.settings())
    scene = DemoScene(demo, node)
    hub = NodeHub(node, served="demo node, served in-process", uid=os.getuid(), show_commands=True)
    following = asyncio.ensure_future(hub.run())
    moving = None
    try:
        await scene.open()
        moving = asyncio.ensure_future(scene.animate())
        deadline = time.monotonic() + 300  # the reservation is idle after the demo's minute
        while not opened(hub):
            if time.monotonic() > deadline:
                raise SystemExit("the demo did not open in time")
            await asyncio.sleep(0.5)
        runner, url = await serving(hub)
        try:
            drawn = "return document.querySelectorAll('.tile').length === 8"
            return [
                await asyncio.to_thread(photograph, url, "web-node.png", drawn),
                await asyncio.to_thread(photograph, url, "web-phone.png", drawn, True),
            ]
        finally:
            await runner.cleanup()
    finally:
        tasks = [task for task in (following, moving) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await scene.stop_jobs()
        await node.close()
        demo.close()


def opened(hub: NodeHub) -> bool:
    """The demo's job and reservation are up, the XID drained its card, the reservation is idle."""
    snap = hub.shown.snapshot
    return (
        snap is not None
        and {"demo-train-llama", "rsv-alice"} <= {j.run_id for j in snap.jobs}
        and snap.cards[XID_CARD].state == "drained"
        and "rsv-alice" in snap.idle
    )


async def fleet_picture() -> Path:
    async with published_fleet() as url:
        reader = FleetReader(url, url)
        hub = FleetHub(reader, interval=1.0)
        following = asyncio.ensure_future(hub.run())
        runner, page = await serving(hub)
        try:
            drawn = "return document.querySelectorAll('.node').length >= 12"
            return await asyncio.to_thread(photograph, page, "web-fleet.png", drawn)
        finally:
            await runner.cleanup()
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            await reader.close()


async def main() -> int:
    for path in [*await node_pictures(), await fleet_picture()]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
