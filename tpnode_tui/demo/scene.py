"""The demo's pretend node as the dashboard drives it.

The dashboard acts on the demo as on any node, through its :class:`Node`;
only what stands for other people's work (the opening job and reservation,
the operator's drain) is placed by the demo's own allocator, and while the
dashboard runs each live job's process works its cards (:meth:`animate`).
See docs/architecture.md, section 'The dashboard'.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Optional

import psutil

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.node import Node

if TYPE_CHECKING:
    import subprocess

    from tpnode_tui.demo.stage import Demo

log = logging.getLogger(__name__)

#: how often the demo's cards move
MOVE_S = 1.0


class DemoScene:
    def __init__(self, demo: Demo, node: Node) -> None:
        self.demo = demo
        self.node = node
        #: a job's supervisor pid -> the pid of the command it runs (what the driver would list)
        self._workers: dict[int, int] = {}
        #: readings asked for by the keys, kept until done (a task nobody holds may be collected)
        self._reads: set[asyncio.Future[Any]] = set()

    def _read_soon(self) -> None:
        """Ask the node to read the changed scene now, not at its next poll."""
        read = asyncio.ensure_future(self.node.status())
        self._reads.add(read)
        read.add_done_callback(self._read_done)

    def _read_done(self, read: asyncio.Future[Any]) -> None:
        self._reads.discard(read)
        if not read.cancelled() and read.exception() is not None:
            log.debug("the demo's node could not be read", exc_info=read.exception())

    def _others(self) -> GpuAllocator:
        """An allocator of the demo's own: the other accounts' commands, in their process."""
        return GpuAllocator.from_settings(self.demo.settings())

    @property
    def squatter(self) -> subprocess.Popen[bytes]:
        """The demo's process outside the platform (its pid is on card 2)."""
        return self.demo.squatter

    def toggle_blind(self) -> bool:
        blind = self.demo.toggle_blind()
        self._read_soon()
        return blind

    def toggle_external(self, index: int) -> bool:
        on = self.demo.toggle_external(index)
        self._read_soon()
        return on

    def raise_xid(self, index: int) -> None:
        self.demo.raise_xid(index)
        self._read_soon()

    async def open(self) -> list[tuple[str, Exception]]:
        """Drain the operator's card, start the opening job and reservation, and
        put the outside process on the reservation's card; what could not be
        done, and why."""
        failed: list[tuple[str, Exception]] = []
        others = self._others()
        try:
            drain = self.demo.opening_drain(time.time())
            try:
                await asyncio.to_thread(others.drains.drain, drain)
            except Exception as e:  # shown on the screen; the demo goes on without it
                failed.append((f"the drain of card {drain.card}", e))
            for spec in self.demo.opening_jobs():
                try:
                    launched = await others.launch(spec)
                except Exception as e:
                    failed.append((spec.run_id, e))
                    continue
                if spec.kind == "reservation" and launched.gpus:
                    self.demo.intrude(launched.gpus[0])
        finally:
            await others.close()
        self._read_soon()
        return failed

    async def animate(self) -> None:
        """Keep the scene moving with the node's readings, for as long as the
        dashboard runs: at most every MOVE_S, whatever the node's interval."""
        async for view in self.node.views():
            snap = view.snapshot
            if snap is not None:
                try:  # on the event loop, as the keys' edits are: one writer at a time
                    self.demo.move(time.time(), self._working(snap), self._on_slices(snap))
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

    def _on_slices(self, snap: NodeSnapshot) -> dict[tuple[int, str], int]:
        """(card, MIG uuid) -> the pid the driver would list on that slice: each live job's command."""
        on = {}
        for job in snap.jobs:
            if job.live and job.kind == "job" and job.pid is not None:
                for ref in job.slices:
                    on[(ref.card, ref.uuid)] = self._worker(job.pid)
        return on

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
        live = [job for job in (view.snapshot.jobs if view.snapshot is not None else ()) if job.live]
        if not live:
            return
        others = self._others()
        try:
            for job in live:
                try:
                    await others.stop(job.key)
                except TpnodeError:
                    log.warning("could not stop demo job %s", job.key, exc_info=True)
        finally:
            await others.close()
