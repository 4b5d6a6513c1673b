"""The live dashboard. The only package that imports Textual (the CLI imports it lazily)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from ..allocator import GpuAllocator
from ..config import Settings
from ..model import ConfigError

__all__ = ["run_dashboard"]


@contextlib.contextmanager
def _logging_off_the_terminal(verbose: bool) -> Iterator[Optional[Path]]:
    """Log lines written to the terminal would tear the screen: while the
    dashboard runs, handlers writing to stderr/stdout are taken off (and put
    back after), and with --verbose the log goes to a file instead."""
    root = logging.getLogger()
    terminal = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
                and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)]
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


async def _run(settings: Optional[Settings], *, demo: bool, readonly: bool, interval: float) -> int:
    from .app import NodeDashboard, stop_demo_jobs

    scene = None
    command: tuple[str, ...] = ()
    if demo:
        from ..demo import DEMO_COMMAND, start_demo

        scene = start_demo()
        settings = scene.settings()
        command = DEMO_COMMAND
    if settings is None:
        raise TypeError("the dashboard needs the node's settings unless it shows the demo")
    allocator: Optional[GpuAllocator] = None
    try:
        allocator = GpuAllocator.from_settings(settings)
        app = NodeDashboard(allocator, demo=scene, readonly=readonly,
                            interval=interval, default_command=command)
        # A closed terminal or a kill must still end the demo's jobs and close the lock.
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
        if allocator is not None:
            if scene is not None:
                await stop_demo_jobs(allocator)
            await allocator.close()
        if scene is not None:
            scene.close()


def run_dashboard(
    settings: Optional[Settings],
    *,
    demo: bool = False,
    readonly: bool = False,
    interval: float = 1.0,
    verbose: bool = False,
) -> int:
    """Open the dashboard; returns the exit code.

    ``settings`` are the node's; with ``demo`` they are not needed (the demo
    brings its own). A bad setting is one line and exit code 2, and so is a
    standard input that is not a terminal: the dashboard reads its keys there,
    and with none it could neither be driven nor quit.
    """
    if sys.stdin is None or not sys.stdin.isatty():
        print("tpnode-tui: the dashboard needs a terminal on standard input, and this one is not; "
              "for the node's state without one use: tpnode-tui status", file=sys.stderr)
        return 2
    try:
        with _logging_off_the_terminal(verbose) as log_path:
            code = asyncio.run(_run(settings, demo=demo, readonly=readonly, interval=interval))
    except ConfigError as e:
        print(f"tpnode-tui: {e}", file=sys.stderr)
        return 2
    if log_path is not None:
        print(f"tpnode-tui: the dashboard's log is in {log_path}", file=sys.stderr)
    return code
