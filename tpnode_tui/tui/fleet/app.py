"""The fleet view's app: follows the fleet's Redis, and shows it on its main screen.

The app keeps what is app-wide: the follower (what was read, and the workers
that read it) and ``reads``, which its screens watch to draw each read. The
table and the keys are the main screen's (tui/fleet/screens/main.py), a
node's grid its own screen's (tui/fleet/screens/node.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen

from tpnode_tui.fleet.follow import FleetFollower, FleetSource
from tpnode_tui.tui.fleet.screens.main import FleetScreen
from tpnode_tui.tui.fleet.ssh import DashboardOpener, run_over_ssh


class FleetApp(App[int]):
    CSS_PATH = str(Path(__file__).parent.parent / "dashboard.tcss")
    TITLE = "tpnode-tui fleet"

    BINDINGS = [Binding("q", "quit", "Quit", id="quit")]

    #: reads of the fleet made, whether they succeeded or not: the screens draw each
    reads: var[int] = var(0, init=False)

    def __init__(
        self,
        source: FleetSource,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        open_dashboard: DashboardOpener = run_over_ssh,
    ) -> None:
        """``open_dashboard`` runs a node's dashboard while this one is suspended."""
        super().__init__()
        self.follower = FleetFollower(source, interval=interval, clock=clock, on_read=self._read)
        self.open_dashboard = open_dashboard

    def get_default_screen(self) -> Screen[Any]:
        return FleetScreen(self.follower, self.open_dashboard)

    def on_mount(self) -> None:
        self.run_worker(self.follower.follow(), group="read", exit_on_error=False)
        self.run_worker(self.follower.notices(), group="notices", exit_on_error=False)

    def _read(self) -> None:
        self.reads += 1
