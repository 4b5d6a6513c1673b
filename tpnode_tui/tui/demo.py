"""The demo's pretend node as the dashboard drives it.

The dashboard acts on the demo as on any node, through its :class:`LocalNode`.
Only what a real node has and a pretend one must fake is here: the demo's
opening job and reservation stand for work other people started (owners
"demo" and "alice"), so they are placed by the demo node's own allocator, as
another account's command would have placed them, not as the person at the
dashboard; and on quitting, every job of the demo's temporary state dir is
stopped, whoever it stands for. The keys that change the scene (b, x) ask the
node to read it again at once.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..model import TpnodeError
from ..node.local import LocalNode

if TYPE_CHECKING:
    import subprocess

    from ..demo import Demo

log = logging.getLogger(__name__)


class DemoScene:
    def __init__(self, demo: Demo, node: LocalNode) -> None:
        self.demo = demo
        self.node = node

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

    async def open(self) -> list[tuple[str, Exception]]:
        """Start the opening job and reservation; what could not be started, and why."""
        failed: list[tuple[str, Exception]] = []
        for spec in self.demo.opening_jobs():
            try:
                await self.node.service.allocator.launch(spec)
            except Exception as e:  # shown on the screen; the demo goes on without it
                failed.append((spec.run_id, e))
        self.node.service.poll_soon()
        return failed

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
