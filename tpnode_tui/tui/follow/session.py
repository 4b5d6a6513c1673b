"""One dashboard on one node: what the app puts together and its main screen works with."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from tpnode_tui.port.node import Node
from tpnode_tui.tui.follow.history import HistoryFollower
from tpnode_tui.tui.follow.launches import LaunchTracker
from tpnode_tui.tui.follow.log import LogFollower
from tpnode_tui.tui.follow.readings import NodeFollower

if TYPE_CHECKING:  # the demo's scene, with its allocator, loads only with the demo
    from tpnode_tui.demo.scene import DemoScene
    from tpnode_tui.tui.terminal import ShellOpener


@dataclass(frozen=True)
class Session:
    """The node, what is followed of it (its readings, its log, its cards' last
    hour), the launches asked for from here, and how the dashboard was started:
    read-only, through the node's agent (which keeps the queue) or serving the
    node itself, with the demo's scene, with a command a launch runs by default,
    and how a shell is opened on a reservation."""

    node: Node
    follower: NodeFollower
    node_log: LogFollower
    history: HistoryFollower
    launches: LaunchTracker
    readonly: bool = False
    agent: bool = False
    default_command: tuple[str, ...] = ()
    demo: Optional[DemoScene] = None
    clock: Callable[[], float] = time.time
    #: runs the caller's shell on a reservation on this terminal (None: no shells from
    #: this dashboard: a node over --host, the demo's)
    open_shell: Optional[ShellOpener] = None
