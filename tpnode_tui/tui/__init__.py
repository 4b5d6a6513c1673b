"""The live dashboard and the fleet view. The only package that imports Textual.

Its two ways in, ``run_dashboard`` (a node's dashboard) and ``run_fleet_view``
(every node of the fleet), are what the CLI imports, lazily, only when asked
for; each imports its app only when it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import TpnodeError, error_line, exit_code

if TYPE_CHECKING:
    from tpnode_tui.fleet.follow import FleetSource
    from tpnode_tui.port.node import Node

__all__ = ["run_dashboard", "run_fleet_view"]


@contextlib.contextmanager
def _logging_off_the_terminal(verbose: bool) -> Iterator[Optional[Path]]:
    """Log lines written to the terminal would tear the screen: while the
    dashboard runs, handlers writing to stderr/stdout are taken off (and put
    back after), and with --verbose the log goes to a file instead."""
    root = logging.getLogger()
    terminal = [
        h
        for h in root.handlers
        if isinstance(h, logging.StreamHandler)
        and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    ]
    for handler in terminal:
        root.removeHandler(handler)
    file_handler: Optional[logging.Handler] = None
    path: Optional[Path] = None
    if verbose:
        path = Path(tempfile.gettempdir()) / "tpnode-tui-dashboard.log"
        file_handler = logging.FileHandler(path)
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(file_handler)
    try:
        yield path
    finally:
        if file_handler is not None:
            root.removeHandler(file_handler)
            file_handler.close()
        for handler in terminal:
            root.addHandler(handler)


async def _run(
    settings: Optional[Settings], *, demo: bool, readonly: bool, interval: float, setting_flags: Sequence[str]
) -> int:
    from tpnode_tui.demo.scene import DemoScene
    from tpnode_tui.node.choose import open_node
    from tpnode_tui.node.local import LocalNode
    from tpnode_tui.tui.app import NodeDashboard
    from tpnode_tui.tui.terminal import shell_opener

    scene: Optional[DemoScene] = None
    command: tuple[str, ...] = ()
    demo_node = None
    if demo:
        from tpnode_tui.demo.stage import DEMO_COMMAND, start_demo

        demo_node = start_demo()
        command = DEMO_COMMAND
    node: Optional[Node] = None
    try:
        if demo_node is not None:
            # The demo's pretend node is this process's own, in its temporary directory.
            node = LocalNode.from_settings(demo_node.settings(), interval=interval)
            scene = DemoScene(demo_node, node)
        elif settings is None:
            raise TypeError("the dashboard needs the node's settings unless it shows the demo")
        else:
            node = await open_node(settings, interval=interval)
        # a shell is opened on the machine it runs on, on a real node: not over --host, not the demo's
        shells = node.on_this_machine and scene is None
        app = NodeDashboard(
            node,
            demo=scene,
            readonly=readonly,
            default_command=command,
            open_shell=shell_opener(setting_flags) if shells else None,
        )
        # A closed terminal or a kill must still end the demo's jobs and close the node.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, app.exit)
        try:
            await app.run_async()
        finally:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        return app.return_code or 0
    finally:
        if scene is not None:
            await scene.stop_jobs()
        if node is not None:
            await node.close()
        if demo_node is not None:
            demo_node.close()


def run_dashboard(
    settings: Optional[Settings],
    *,
    demo: bool = False,
    readonly: bool = False,
    interval: float = 1.0,
    verbose: bool = False,
    setting_flags: Sequence[str] = (),
) -> int:
    """Open the dashboard on the node ``settings`` describe; returns the exit code.

    The node is the one the CLI would talk to (``open_node``): its agent when
    one answers (``TUNEPLANE_AGENT``), else served in this process; with
    ``demo`` a simulated node served in this process, and no settings needed.
    ``interval`` is how often a node served in this process is read (an
    agent reads at its own). ``setting_flags`` are the setting flags the
    dashboard was given: the shell key runs ``tpnode-tui shell`` with them.
    A bad setting is one line and exit code 2, and so is a standard input
    that is not a terminal: the dashboard reads its keys there, and with none
    it could neither be driven nor quit. No agent and no way to serve the
    node here is one line and exit code 1.
    """
    if sys.stdin is None or not sys.stdin.isatty():
        print(
            "tpnode-tui: the dashboard needs a terminal on standard input, and this one is not; "
            "for the node's state without one use: tpnode-tui status",
            file=sys.stderr,
        )
        return 2
    try:
        with _logging_off_the_terminal(verbose) as log_path:
            code = asyncio.run(
                _run(settings, demo=demo, readonly=readonly, interval=interval, setting_flags=setting_flags)
            )
    except TpnodeError as e:  # a bad setting (2), or no agent and no state dir to use (1)
        print(f"tpnode-tui: {error_line(e)}", file=sys.stderr)
        return exit_code(e)
    if log_path is not None:
        print(f"tpnode-tui: the dashboard's log is in {log_path}", file=sys.stderr)
    return code


async def _run_fleet(source: FleetSource, interval: float) -> int:
    from tpnode_tui.tui.fleet.app import FleetApp

    app = FleetApp(source, interval=interval)
    try:
        await app.run_async()
    finally:
        await source.close()
    return app.return_code or 0


def run_fleet_view(url: str, safe_url: str, interval: float) -> int:
    """Open the fleet view on the fleet's Redis at ``url`` (``safe_url``: the same
    without its password, to show); returns the exit code."""
    from tpnode_tui.fleet.reader import FleetReader

    with _logging_off_the_terminal(False):
        return asyncio.run(_run_fleet(FleetReader(url, safe_url), interval))
