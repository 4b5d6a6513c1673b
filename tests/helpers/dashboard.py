"""What the dashboard's tests share: the app that remembers what it said, a node
served in the test's process over a simulated probe and real processes, and
ways to read and wait for what an operator would see."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from helpers.paths import LOCK_WORKER
from helpers.service_node import ServiceNode
from helpers.waiting import until_pilot
from tpnode_tui.tui.app import NodeDashboard

WAIT_S = 15.0
SIZE = (120, 40)


class Dashboard(NodeDashboard):
    """The real app, remembering what it told the operator."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.said: list[tuple[str, str]] = []

    def notify(self, message, *, title="", severity="information", **kwargs):
        self.said.append((f"{title}: {message}" if title else str(message), severity))
        return super().notify(message, title=title, severity=severity, **kwargs)

    def heard(self, text: str) -> bool:
        return any(text in message for message, _ in self.said)


class DashboardNode(ServiceNode):
    """A ServiceNode as the dashboard serves one without an agent (put together
    from ``settings`` as the product does: the simulated probe over the scene,
    the process runtime with real processes, the lock the settings name), and
    the app over it. ``allocator`` and ``place`` are for what another account's
    command does meanwhile."""

    def __init__(
        self,
        root: Path,
        cards: int = 4,
        *,
        settings: Optional[dict[str, Any]] = None,
        scene_cards: Optional[Mapping[int, dict[str, Any]]] = None,
    ) -> None:
        super().__init__(root, cards, scene_cards=scene_cards, assembled=True, interval=0.2, settings=settings)

    def app(self, **kwargs) -> Dashboard:
        kwargs.setdefault("default_command", ("sleep", "60"))
        return Dashboard(self.local, **kwargs)


async def polled(pilot, app: NodeDashboard, n: int = 1) -> None:
    """Wait for n more readings (of a successful or a failed poll) to land."""
    target = app.follower.readings + n
    await until_pilot(pilot, lambda: app.follower.readings >= target, f"{n} reading(s)")


def tile_text(app: NodeDashboard, index: int) -> str:
    return app.query_one(f"#card-{index}").render().plain


def states(app: NodeDashboard) -> list[str]:
    return [c.state for c in app.follower.snapshot.cards]


def header(app: NodeDashboard) -> str:
    return str(app.query_one("#header").render())


def row_cells(app: NodeDashboard, run_id: str) -> list[str]:
    """The jobs-table row of a launch not started yet (queued or under way), as
    text, each cell's wrapped lines joined again."""
    table = app.query_one("#jobs")
    key = f"launch:{run_id}"
    return [str(cell).replace("\n", " ") for cell in table.get_row(key)] if key in table.row_keys else []


def row_status(app: NodeDashboard, run_id: str) -> str:
    cells = row_cells(app, run_id)
    return cells[2] if cells else ""


def queued(app: NodeDashboard) -> list[str]:
    return [q.run_id for q in app.follower.snapshot.queue] if app.follower.snapshot else []


async def select_row(pilot, app: NodeDashboard, key: str) -> None:
    table = app.query_one("#jobs")
    table.focus()
    table.move_cursor(row=table.row_keys.index(key))
    await pilot.pause()


async def fill(pilot, screen, field: str, value: str) -> None:
    from textual.widgets import Input

    box = screen.query_one(f"#{field}", Input)
    box.value = value
    await pilot.pause()


async def hold_the_flock(state_dir: Path) -> asyncio.subprocess.Process:
    """Another process on the node holding the allocation lock (tests/helpers/lock_worker.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(TUNEPLANE_STATE_DIR=str(state_dir))
    holder = await asyncio.create_subprocess_exec(
        sys.executable, str(LOCK_WORKER), "hold", env=env, stdout=asyncio.subprocess.PIPE
    )
    line = await asyncio.wait_for(holder.stdout.readline(), WAIT_S)
    assert line.startswith(b"held "), f"the lock holder said {line!r}"
    return holder


async def end(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
        await process.wait()
