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
from tpnode_tui.port import operations as ops
from tpnode_tui.port.node import Node
from tpnode_tui.port.operations import Operation
from tpnode_tui.service import NodeService

A = TypeVar("A")

#: the streams that poll the node while they are followed (a job's output is read from its runtime)
_SERVED = (ops.VIEWS, ops.FOLLOW_EVENTS)


class LocalNode(Node):
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

    async def stream(
        self, op: Operation[Any, A], request: Any, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[A]:
        """``op``'s stream from the service here, its request checked as at the
        door (a refusal comes before the first item). The readings and the
        node's log are served meanwhile: in-process, nothing happens that nobody polls."""
        checked = self.service.read(self.caller, op, op.echoed(request))
        items = await self.service.stream(self.caller, op, checked)
        if op in _SERVED:
            self._serve()
        if opened is not None:
            opened()
        async for item in items:
            yield item

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(BaseException):
                await self._running
        await self.service.close()
        await self.service.allocator.close()
