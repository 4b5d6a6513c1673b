"""The Node's calls, each written once over one generic call of the port's table.

Both ways a node is served (its agent, over a socket: AgentNode; its service
in this process: LocalNode) make every call the same way: the operation's
request from the call's arguments, then their one :meth:`Calls.call`, which
the agent client makes over HTTP and the in-process node through the same
read (every rule and limit) and the same service method the agent uses. So
an operation's client side is one line here, whichever node answers.
"""

from __future__ import annotations

import os
from typing import Any, Optional, TypeVar

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.jobs import JobOutput, JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port import operations as ops
from tpnode_tui.port.operations import Operation
from tpnode_tui.port.types import (
    AuditPage,
    AuditRequest,
    CancelRequest,
    CheckRequest,
    DrainRequest,
    EventsPage,
    EventsRequest,
    EvictRequest,
    ExtendRequest,
    HistoryRequest,
    LaunchRequest,
    LaunchResult,
    LogsRequest,
    NodeView,
    Nothing,
    NotifyAddRequest,
    NotifyList,
    NotifyRemoveRequest,
    ReclaimRequest,
    ReserveRequest,
    ShellRequest,
    StopRequest,
    UndrainRequest,
    UsageRequest,
)

A = TypeVar("A")


class Calls:
    """Every call a client may make of a node, over :meth:`call`."""

    async def call(self, op: Operation[Any, A], request: Any) -> A:
        """``op`` asked with ``request``, and its answer."""
        raise NotImplementedError

    async def status(self) -> NodeView:
        return await self.call(ops.STATUS, Nothing())

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        return await self.call(ops.LAUNCH, request)

    async def reserve(self, request: ReserveRequest) -> Launched:
        return await self.call(ops.RESERVE, request)

    async def extend(self, run_id: str, duration_s: float) -> JobState:
        return await self.call(ops.EXTEND, ExtendRequest(run_id, duration_s))

    async def stop(self, run_id: str) -> JobState:
        return await self.call(ops.STOP, StopRequest(run_id))

    async def shell(self, run_id: str) -> ShellEntry:
        from tpnode_tui.runtimes.jobprocs import process_stat  # only a shell reads /proc; every other call is lighter

        # what this process sees of itself, for the node to compare with the kernel's peer
        seen = process_stat(os.getpid())
        return await self.call(ops.SHELL, ShellRequest(run_id, os.getpid(), seen.ticks if seen else 0))

    async def reclaim(self, run_id: Optional[str]) -> list[JobState]:
        return await self.call(ops.RECLAIM, ReclaimRequest(run_id))

    async def cancel(self, run_id: str) -> QueuedLaunch:
        return await self.call(ops.CANCEL, CancelRequest(run_id))

    async def queued(self) -> tuple[QueuedLaunch, ...]:
        return await self.call(ops.QUEUED, Nothing())

    async def audit_page(self, request: AuditRequest) -> AuditPage:
        return await self.call(ops.AUDIT, request)

    async def audit(self, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        page = await self.audit_page(AuditRequest(since_s=since_s))
        return list(page.entries), page.everyone

    async def notify_list(self) -> NotifyList:
        return await self.call(ops.NOTIFY_LIST, Nothing())

    async def notify_add(self, url: str, node: bool = False) -> NotifyList:
        return await self.call(ops.NOTIFY_ADD, NotifyAddRequest(url, node))

    async def notify_remove(self, number: int) -> NotifyList:
        return await self.call(ops.NOTIFY_REMOVE, NotifyRemoveRequest(number))

    async def drain(self, card: int, reason: str) -> Drain:
        return await self.call(ops.DRAIN, DrainRequest(card, reason))

    async def undrain(self, card: int, *, force: bool = False) -> Drain:
        return await self.call(ops.UNDRAIN, UndrainRequest(card, force))

    async def check(self, card: int) -> CardCheck:
        return await self.call(ops.CHECK, CheckRequest(card))

    async def evict(
        self,
        card: int,
        pid: Optional[int] = None,
        *,
        kill: bool = False,
        dry_run: bool = False,
        started_at: Optional[float] = None,
    ) -> EvictReport:
        return await self.call(ops.EVICT, EvictRequest(card, pid, kill, dry_run, started_at))

    async def events_page(self, request: EventsRequest) -> EventsPage:
        return await self.call(ops.EVENTS, request)

    async def events(self, since_s: Optional[float] = None, card: Optional[int] = None) -> list[dict[str, Any]]:
        return list((await self.events_page(EventsRequest(since_s=since_s, card=card))).entries)

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        return await self.call(ops.HISTORY, HistoryRequest(card))

    async def usage(self, since: float, until: float, by: str = "user") -> UsageReport:
        return await self.call(ops.USAGE, UsageRequest(since, until, by))

    async def logs(self, run_id: str, after: Optional[str] = None) -> JobOutput:
        return await self.call(ops.LOGS, LogsRequest(run_id, after))
