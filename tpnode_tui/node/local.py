"""The node served in this process, for this process's own account.

For a machine one account uses (and the demo), no agent is needed: the CLI or
the dashboard runs the node's service itself, with the account the kernel says
this process runs as for its caller, under the same rules and the same lock as
an agent would apply. Its queue lives in memory (a dashboard asks before
quitting with launches queued); its log is the state dir's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable, Optional

from tpnode_tui.config.settings import Settings
from tpnode_tui.host.identity import Caller, this_process
from tpnode_tui.locks import AllocationLock
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port.types import LaunchRequest, LaunchResult, NodeView, ReserveRequest
from tpnode_tui.service import NodeService


class LocalNode:
    in_process = True
    outlives_client = False
    where = "served in-process (no agent)"

    def __init__(self, service: NodeService, caller: Caller) -> None:
        self.service = service
        self.caller = caller
        self._running: Optional[asyncio.Task[None]] = None

    @classmethod
    def from_settings(
        cls, settings: Settings, *, lock: Optional[AllocationLock] = None, interval: float = 1.0
    ) -> LocalNode:
        """``lock`` replaces the one the settings would make (the CLI's bounds its wait)."""
        service = NodeService.from_settings(settings, lock=lock, interval=interval)
        return cls(service, this_process(service.policy.operators))

    def _view(self) -> NodeView:
        reading = self.service.reading
        return NodeView(reading, self.service.you(self.caller, reading.snapshot))

    async def status(self) -> NodeView:
        await self.service.read_now()
        return self._view()

    def _serve(self) -> None:
        """Run the service's polling (and its XID watcher) from now until closed."""
        if self._running is None:
            self._running = asyncio.ensure_future(self.service.run())

    async def views(self) -> AsyncIterator[NodeView]:
        """Runs the service's polling for as long as someone watches."""
        self._serve()
        async for reading in self.service.subscribe():
            yield NodeView(reading, self.service.you(self.caller, reading.snapshot))

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        return await self.service.launch(self.caller, request)

    async def reserve(self, request: ReserveRequest) -> Launched:
        return await self.service.reserve(self.caller, request)

    async def extend(self, run_id: str, duration_s: float) -> JobState:
        return await self.service.extend(self.caller, run_id, duration_s)

    async def stop(self, run_id: str) -> JobState:
        return await self.service.stop(self.caller, run_id)

    async def reclaim(self, run_id: Optional[str]) -> list[JobState]:
        return await self.service.reclaim(self.caller, run_id)

    async def cancel(self, run_id: str) -> QueuedLaunch:
        return await self.service.cancel(self.caller, run_id)

    async def queued(self) -> tuple[QueuedLaunch, ...]:
        return self.service.queued()

    async def audit(self, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        return await asyncio.to_thread(self.service.audit, self.caller, since_s)

    async def drain(self, card: int, reason: str) -> Drain:
        return await self.service.drain_card(self.caller, card, reason)

    async def undrain(self, card: int) -> Drain:
        return await self.service.undrain_card(self.caller, card)

    async def evict(
        self,
        card: int,
        pid: Optional[int] = None,
        *,
        kill: bool = False,
        dry_run: bool = False,
        started_at: Optional[float] = None,
    ) -> EvictReport:
        return await self.service.evict(self.caller, card, pid, kill=kill, dry_run=dry_run, started_at=started_at)

    async def events(self, since_s: Optional[float] = None, card: Optional[int] = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.service.events, self.caller, since_s, card)

    async def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Serves the node meanwhile: in-process, nothing happens that nobody polls."""
        self._serve()
        if opened is not None:
            opened()
        async for entry in self.service.follow_events(self.caller, card, since_s):
            yield entry

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        """What this process has seen: in-process, history starts with the dashboard."""
        return self.service.card_history(card)

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(BaseException):
                await self._running
        await self.service.close()
        await self.service.allocator.close()
