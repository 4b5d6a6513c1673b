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
from typing import Any, AsyncIterator, Callable, Optional, TypeVar

from tpnode_tui.config.settings import Settings
from tpnode_tui.host.identity import Caller, this_process
from tpnode_tui.locks import AllocationLock
from tpnode_tui.model.jobs import JobOutput
from tpnode_tui.node.calls import Calls
from tpnode_tui.port import operations as ops
from tpnode_tui.port.operations import Operation
from tpnode_tui.port.types import EventsRequest, LogsRequest, NodeView, Nothing
from tpnode_tui.service import NodeService

A = TypeVar("A")


class LocalNode(Calls):
    in_process = True
    outlives_client = False
    where = "served in-process (no agent)"
    on_this_machine = True

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

    async def call(self, op: Operation[Any, A], request: Any) -> A:
        """``op`` done by the service here, its request read back from what the
        agent would have been sent: every rule and limit applies as at the door."""
        checked = self.service.read(self.caller, op, op.echoed(request))
        return await self.service.do(self.caller, op, checked)

    def _serve(self) -> None:
        """Run the service's polling (and its XID watcher) from now until closed."""
        if self._running is None:
            self._running = asyncio.ensure_future(self.service.run())

    async def views(self) -> AsyncIterator[NodeView]:
        """Runs the service's polling for as long as someone watches."""
        self._serve()
        request = self.service.read(self.caller, ops.VIEWS, ops.VIEWS.echoed(Nothing()))
        async for view in await self.service.stream(self.caller, ops.VIEWS, request):
            yield view

    async def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Serves the node meanwhile: in-process, nothing happens that nobody polls."""
        op = ops.FOLLOW_EVENTS
        request = self.service.read(self.caller, op, op.echoed(EventsRequest(since_s=since_s, card=card, follow=True)))
        entries = await self.service.stream(self.caller, op, request)
        self._serve()
        if opened is not None:
            opened()
        async for entry in entries:
            yield entry

    async def follow_logs(self, run_id: str, after: Optional[str] = None) -> AsyncIterator[JobOutput]:
        op = ops.FOLLOW_LOGS
        request = self.service.read(self.caller, op, op.echoed(LogsRequest(run_id, after, follow=True)))
        async for page in await self.service.stream(self.caller, op, request):
            yield page

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(BaseException):
                await self._running
        await self.service.close()
        await self.service.allocator.close()
