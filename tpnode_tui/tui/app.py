"""The dashboard app: shows the node as it reads, turns keys into calls on the node.

It holds no truth of its own and talks to nothing but a :class:`Node`, so a
dashboard and a shell can never hand out one card twice; it keeps only
presentation and which launches it asked for. The app puts the session
together (tui/follow/session.py) and keeps what is app-wide: help, quit, the
command palette, the demo's scene; each key's action is a flow run in a
worker of its own. See docs/architecture.md, section 'The dashboard'.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from textual import work
from textual.app import App, SystemCommand
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.screen import Screen

from tpnode_tui.node.follow import RECONNECT_FIRST_S, RECONNECT_MOST_S
from tpnode_tui.port.node import Node
from tpnode_tui.text.printable import printable, printable_lines
from tpnode_tui.tui.follow.history import HistoryFollower
from tpnode_tui.tui.follow.launches import LaunchTracker
from tpnode_tui.tui.follow.log import LogFollower
from tpnode_tui.tui.follow.readings import NodeFollower
from tpnode_tui.tui.follow.session import Session
from tpnode_tui.tui.screens.dialogs.help import HelpScreen
from tpnode_tui.tui.screens.dialogs.quit import QuitScreen
from tpnode_tui.tui.screens.flows.desk import failed
from tpnode_tui.tui.screens.main import MainScreen
from tpnode_tui.tui.terminal import ShellOpener
from tpnode_tui.tui.wording.keys import APP_BINDINGS

if TYPE_CHECKING:  # the demo's scene, with its allocator, loads only with the demo
    from tpnode_tui.demo.scene import DemoScene


def served_from(node: Node, demo: bool = False) -> str:
    """Where the node is served from, for the header."""
    if node.in_process and demo:
        return "demo node, served in-process"
    return node.where


class NodeDashboard(App[int]):
    #: absolute, so that a subclass defined elsewhere (tests, screenshots) finds it too
    CSS_PATH = str(Path(__file__).with_name("dashboard.tcss"))
    TITLE = "tpnode-tui"

    #: help and quit, on any screen; every other key is the main screen's
    BINDINGS = APP_BINDINGS

    def __init__(
        self,
        node: Node,
        *,
        demo: Optional[DemoScene] = None,
        readonly: bool = False,
        default_command: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
        reconnect_s: tuple[float, float] = (RECONNECT_FIRST_S, RECONNECT_MOST_S),
        open_shell: Optional[ShellOpener] = None,
    ) -> None:
        """``open_shell`` runs the caller's shell on a reservation while this app is suspended."""
        super().__init__()
        self.node = node
        self.demo = demo
        self.readonly = readonly
        #: the node's readings as they come, and how fresh what is shown is
        self.follower = NodeFollower(node, clock=clock, reconnect_s=reconnect_s)
        #: the node's log, while the events pane shows it
        self.node_log = LogFollower(node, reconnect_s=reconnect_s)
        #: each card's last hour, as last fetched
        self.history = HistoryFollower(node, clock=clock)
        #: the launches this dashboard asked for, to say what became of them
        self.launches = LaunchTracker()
        session = Session(
            node,
            self.follower,
            self.node_log,
            self.history,
            self.launches,
            readonly=readonly,
            agent=self.agent,
            default_command=default_command,
            demo=demo,
            clock=clock,
            open_shell=open_shell,
        )
        #: the node's picture and its keys: the default screen
        self.main = MainScreen(
            session,
            served=served_from(node, demo is not None),
            via="in-process" if node.in_process else "agent",
            ready=self._open_demo,
        )

    def get_default_screen(self) -> Screen[Any]:
        return self.main

    def on_resize(self, event: Resize) -> None:
        self.main.terminal_resized(event.size)

    @property
    def agent(self) -> bool:
        """Whether the node is served by its agent (which keeps the queue), not by this process."""
        return self.node.outlives_client

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is self.main:
            yield from self.main.system_commands()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: Optional[float] = None,
        markup: bool = True,
    ) -> None:
        """Every notification as plain text, escaped: most messages quote an
        engine's, a driver's or another user's words, and in markup a stray
        "[/]" would fail to render and "[@click=...]" would be a button."""
        super().notify(
            printable_lines(message), title=printable(title), severity=severity, timeout=timeout, markup=False
        )

    def action_help(self) -> None:
        self.push_screen(HelpScreen(demo=self.demo is not None, readonly=self.readonly, agent=self.agent))

    async def action_quit(self) -> None:
        """Quit; with launches that would be dropped, ask first, naming them:
        whoever asked for them may be waiting."""
        snapshot = self.follower.snapshot
        dropped = self.launches.dropped_on_quit(snapshot.queue if snapshot is not None else (), agent=self.agent)
        if not dropped:
            self.exit()
        elif not any(w.group == "quit" and not w.is_finished for w in self.workers):  # else already asking
            self._ask_then_quit(QuitScreen(dropped, agent=self.agent, demo=self.demo is not None))

    @work(group="quit", exit_on_error=False)
    async def _ask_then_quit(self, question: QuitScreen) -> None:
        if await self.push_screen_wait(question):
            self.exit()

    def _open_demo(self) -> None:
        """Once the main screen's widgets are made: the demo's job and
        reservation, which stand for other people's, then its cards moving."""
        if self.demo is not None:
            self.run_worker(self._run_demo(self.demo), group="demo", exit_on_error=False)

    async def _run_demo(self, demo: DemoScene) -> None:
        for what, error in await demo.open():
            failed(self.main, f"Demo could not start {what}", error)
        await demo.animate()
