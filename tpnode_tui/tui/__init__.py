"""The live dashboard. The only package that imports Textual (the CLI imports it lazily)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import tempfile
from pathlib import Path
from typing import Optional

from ..allocator import GpuAllocator
from ..model import ConfigError

__all__ = ["run_dashboard"]


def _log_to_file(verbose: bool) -> Optional[Path]:
    """Log lines written to the terminal would tear the screen: while the
    dashboard runs, logging goes to a file (with --verbose) or nowhere."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            root.removeHandler(handler)
    if not verbose:
        root.addHandler(logging.NullHandler())
        return None
    path = Path(tempfile.gettempdir()) / "tpnode-tui-dashboard.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return path


async def _run(args: argparse.Namespace) -> int:
    from ..cli import settings_from
    from .app import NodeDashboard, stop_demo_jobs

    demo = None
    if args.demo:
        from ..demo import DEMO_COMMAND, start_demo

        demo = start_demo()
        settings = demo.settings()
        command = DEMO_COMMAND
    else:
        settings = settings_from(args)
        command = ()
    allocator: Optional[GpuAllocator] = None
    try:
        allocator = GpuAllocator.from_settings(settings)
        app = NodeDashboard(allocator, demo=demo, readonly=args.readonly,
                            interval=args.interval, default_command=command)
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
            if demo is not None:
                await stop_demo_jobs(allocator)
            await allocator.close()
        if demo is not None:
            demo.close()


def run_dashboard(args: argparse.Namespace) -> int:
    """Open the dashboard; returns the exit code. A bad setting is one line and exit code 2."""
    log_path = _log_to_file(getattr(args, "verbose", False))
    try:
        return asyncio.run(_run(args))
    except ConfigError as e:
        print(f"tpnode-tui: {e}", file=sys.stderr)
        return 2
    finally:
        if log_path is not None:
            print(f"tpnode-tui: the dashboard's log is in {log_path}", file=sys.stderr)
