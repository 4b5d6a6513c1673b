"""The demo's pretend node as the dashboard drives it.

The dashboard acts on the demo as on any node, through its :class:`LocalNode`.
Only what a real node has and a pretend one must fake is here: the demo's
opening job and reservation stand for work other people started (owners
"demo" and "alice"), so they are placed by the demo node's own allocator, as
another account's command would have placed them, not as the person at the
dashboard; and on quitting, every job of the demo's temporary state dir is
stopped, whoever it stands for. The card an operator drained is drained the
same way, in the demo's state dir, before the job and the reservation are
placed, and the outside process then joins the reservation's card. While
the dashboard runs, the scene follows the node: a card a live job holds
shows the job's process working it (:meth:`animate`). The keys that change
the scene (b, x, X) ask the node to read it again at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Optional

import psutil

from ..model import NodeSnapshot, TpnodeError
from ..node.local import LocalNode

if TYPE_CHECKING:
    import subprocess

    from ..demo import Demo

log = logging.getLogger(__name__)

#: how often the demo's cards move
MOVE_S = 1.0


class DemoScene:
    def __init__(self, demo: Demo, node: LocalNode) -> None:
        self.demo = demo
        self.node = node
        #: a job's supervisor pid -> the pid of the command it runs (what the driver would list)
        self._workers: dict[int, int] = {}

    @property
    def squatter(self) -> subprocess.Popen[bytes]:
        """The demo's process outside the platform (its pid is on card 2)."""
        return self.demo.squatter

    def toggle_blind(self) -> bool:
        blind = self.demo.toggle_blind()
        self.node.service.poll_soon()
        return blind

    def toggle_external(self, index: int) -> bool:
        on = self.demo.toggle_external(index)
        self.node.service.poll_soon()
        return on

    def raise_xid(self, index: int) -> None:
        self.demo.raise_xid(index)
        self.node.service.poll_soon()

    async def open(self) -> list[tuple[str, Exception]]:
        """Drain the operator's card, start the opening job and reservation, and
        put the outside process on the reservation's card; what could not be
        done, and why."""
        failed: list[tuple[str, Exception]] = []
        allocator = self.node.service.allocator
        drain = self.demo.opening_drain(time.time())
        try:
            await asyncio.to_thread(allocator.drains.drain, drain)
        except Exception as e:  # shown on the screen; the demo goes on without it
            failed.append((f"the drain of card {drain.card}", e))
        for spec in self.demo.opening_jobs():
            try:
                launched = await allocator.launch(spec)
            except Exception as e:
                failed.append((spec.run_id, e))
                continue
            if spec.kind == "reservation" and launched.gpus:
                self.demo.intrude(launched.gpus[0])
        self.node.service.poll_soon()
        return failed

    async def animate(self) -> None:
        """Keep the scene moving with the node, for as long as the dashboard runs."""
        while True:
            snap = self.node.service.reading.snapshot
            if snap is not None:
                try:  # on the event loop, as the keys' edits are: one writer at a time
                    self.demo.move(time.time(), self._working(snap))
                except (OSError, ValueError):
                    log.warning("could not move the demo's scene", exc_info=True)
            await asyncio.sleep(MOVE_S)

    def _working(self, snap: NodeSnapshot) -> dict[int, int]:
        """Card -> the pid the driver would list there: each live job's command."""
        working = {}
        for job in snap.jobs:
            if job.live and job.kind == "job" and job.pid is not None:
                pid = self._worker(job.pid)
                for index in job.gpus:
                    working[index] = pid
        return working

    def _worker(self, supervisor: int) -> int:
        pid: Optional[int] = self._workers.get(supervisor)
        if pid is None or not psutil.pid_exists(pid):
            try:
                children = psutil.Process(supervisor).children(recursive=True)
            except psutil.Error:
                children = []
            pid = children[0].pid if children else supervisor
            if children:
                self._workers[supervisor] = pid
        return pid

    async def stop_jobs(self) -> None:
        """The demo's jobs are its own (its own state dir): stop the live ones on quit."""
        try:
            view = await self.node.status()
        except TpnodeError:
            log.warning("cannot list the demo's jobs to stop them", exc_info=True)
            return
        for job in view.snapshot.jobs if view.snapshot is not None else ():
            if job.live:
                try:
                    await self.node.service.allocator.stop(job.key)
                except TpnodeError:
                    log.warning("could not stop demo job %s", job.key, exc_info=True)
