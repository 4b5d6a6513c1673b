"""The read-only web page: one node (through its agent, or the demo) or the fleet, live in a browser.

Its way in, ``run_web``, is what the CLI imports, and only for ``tpnode-tui
web``; it runs as an ordinary account, asks the node (or the fleet's Redis)
once for every open page, and changes nothing. aiohttp's server, the page's
words and files load only here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import TYPE_CHECKING, Optional, Union

from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import ConfigError

if TYPE_CHECKING:
    from tpnode_tui.web.hub import FleetHub, NodeHub

__all__ = ["run_web"]


def _say(message: str) -> None:
    print(f"tpnode-tui: {message}", file=sys.stderr, flush=True)


async def _serve(hub: Union[NodeHub, FleetHub], settings: Settings, listen: tuple[str, int], what: str) -> None:
    """Serve the page over ``hub`` on ``listen`` until SIGTERM, SIGINT or SIGHUP."""
    from aiohttp import web

    from tpnode_tui.web.app import make_app

    runner = web.AppRunner(make_app(hub, settings.web.token), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    following = asyncio.ensure_future(hub.run())
    try:
        host, port = listen
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            raise ConfigError(f"the web page cannot listen on {host}:{port}: {e.strerror or e}") from None
        shown = f"[{host}]" if ":" in host else host
        token = " (it asks for TUNEPLANE_WEB_TOKEN)" if settings.web.token else ""
        _say(f"serving {what} read-only on http://{shown}:{port}/{token}; Ctrl-C stops it")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        done = asyncio.ensure_future(stop.wait())
        await asyncio.wait({done, following}, return_when=asyncio.FIRST_COMPLETED)
        done.cancel()
        if following.done():
            following.result()  # a follow that ended on its own: its error, never a silent page
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await runner.cleanup()


async def _node_page(settings: Settings, listen: tuple[str, int]) -> None:
    from tpnode_tui.node.choose import agent_for
    from tpnode_tui.web.hub import NodeHub

    if settings.agent.mode == "off" and settings.agent.host is None:
        raise ConfigError(
            "tpnode-tui web reads the node through its agent, and TUNEPLANE_AGENT=off asks for none; "
            "start the agent, or see the page with tpnode-tui web --demo"
        )
    node = agent_for(settings)
    try:
        if not await node.answers():  # AgentForbidden (this account may not reach it) is raised
            _say(f"warning: the node's {node.where} does not answer yet: the page says so, and follows it once it does")
        hub = NodeHub(node, served=node.where, uid=os.getuid(), show_commands=settings.web.show_commands)
        await _serve(hub, settings, listen, f"the node's page ({node.where})")
    finally:
        await node.close()


async def _demo_page(settings: Settings, listen: tuple[str, int], interval: float) -> None:
    """The demo's pretend node, served in this process, its scene moving as in the dashboard's demo."""
    from tpnode_tui.demo.scene import DemoScene
    from tpnode_tui.demo.stage import start_demo
    from tpnode_tui.node.local import LocalNode
    from tpnode_tui.web.hub import NodeHub

    demo = start_demo()
    node = LocalNode.from_settings(demo.settings(), interval=interval)
    scene = DemoScene(demo, node)
    moving: Optional[asyncio.Future[None]] = None
    try:
        for what, error in await scene.open():
            _say(f"warning: the demo could not set up {what}: {error}")
        moving = asyncio.ensure_future(scene.animate())
        hub = NodeHub(node, served="demo node, served in-process", uid=os.getuid(), show_commands=True)
        await _serve(hub, settings, listen, "the demo node's page")
    finally:
        if moving is not None:
            moving.cancel()
            await asyncio.gather(moving, return_exceptions=True)
        await scene.stop_jobs()
        await node.close()
        demo.close()


async def _fleet_page(settings: Settings, listen: tuple[str, int], interval: float) -> None:
    from tpnode_tui.fleet.reader import FleetReader
    from tpnode_tui.web.hub import FleetHub

    if settings.fleet.url is None:
        raise ConfigError(
            "tpnode-tui web --fleet reads what the nodes' agents publish: set "
            "TUNEPLANE_FLEET_URL to their Redis (redis://host:port/db)"
        )
    safe = settings.fleet.url_safe or ""
    reader = FleetReader(settings.fleet.url, safe)
    try:
        await _serve(FleetHub(reader, interval=interval), settings, listen, f"the fleet's page ({safe})")
    finally:
        await reader.close()


def run_web(
    settings: Settings,
    *,
    demo: bool = False,
    fleet: bool = False,
    listen: Optional[tuple[str, int]] = None,
    interval: float = 1.0,
) -> None:
    """Serve the page until stopped: the node's (through its agent), the demo's, or the fleet's
    (``fleet``), on ``listen`` (else the settings' TUNEPLANE_WEB_LISTEN). ``interval``: how often
    the demo's node, or the fleet's Redis, is read (an agent reads at its own). Raises what the
    CLI reports in one line: a ConfigError (2), AgentForbidden (77)."""
    where = listen or settings.web.listen
    if fleet:
        asyncio.run(_fleet_page(settings, where, interval))
    elif demo:
        asyncio.run(_demo_page(settings, where, interval))
    else:
        asyncio.run(_node_page(settings, where))
