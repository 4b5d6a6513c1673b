"""What a client may ask of a node, wherever the node is served.

A node implements two calls: :meth:`Node.call` (an operation of the port's
table, :mod:`tpnode_tui.port.operations`, asked with its request: its answer)
and :meth:`Node.stream` (the same for a stream: each item as it comes). Every
other call below is written once, here, over those two, and is the same
whichever way the node is served: a client may also ask ``call`` directly
with an operation that has no call of its own.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Optional, Protocol, TypeVar

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.jobs import JobOutput, JobState, Launched, QueuedLaunch
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port import operations as ops
from tpnode_tui.port.operations import Operation, Request
from tpnode_tui.port.types.checks import CheckRequest
from tpnode_tui.port.types.events import AuditPage, AuditRequest, EventsPage, EventsRequest
from tpnode_tui.port.types.jobs import (
    CancelRequest,
    LaunchRequest,
    LaunchResult,
    LogsRequest,
    ReclaimRequest,
    StopRequest,
)
from tpnode_tui.port.types.notify import NotifyAddRequest, NotifyList, NotifyRemoveRequest
from tpnode_tui.port.types.operators import DrainRequest, EvictRequest, UndrainRequest
from tpnode_tui.port.types.readings import HistoryRequest, NodeView, Nothing, UsageRequest
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest

Q = TypeVar("Q", bound=Request)
A = TypeVar("A")


class Node(Protocol):
    """A node, as a client asks it; what a caller must do differently for how it
    is served is said by the capabilities below, never by what class it is."""

    #: the node's service runs in this process: this process takes the allocation
    #: lock and uses the state dir itself, and its own wait for the lock is bounded
    #: there. False: the node's agent serves it (on this machine or over SSH).
    in_process: bool
    #: what is asked of the node goes on after this client exits: a queued launch
    #: stays queued and a launch being placed is finished (the agent keeps them).
    #: False: they end with this process.
    outlives_client: bool
    #: where the node is served from, in words: "agent at /run/tpnode-tui/agent.sock"
    where: str
    #: the node is this machine, so the process that asks is one of its processes
    #: (False: reached over SSH, where the agent's caller is the bridge)
    on_this_machine: bool

    async def call(self, op: Operation[Q, A], request: Q) -> A:
        """``op`` asked with ``request``, and its answer (raised as the node refused it)."""
        ...

    def stream(self, op: Operation[Q, A], request: Q, opened: Optional[Callable[[], None]] = None) -> AsyncIterator[A]:
        """``op``'s stream asked with ``request``: each item as it comes, until the
        node goes away (or, for a job's output, the job has ended). ``opened`` is
        called once the node has taken the request, before any item."""
        ...

    async def document(self, op: Operation[Q, A], request: Q) -> dict[str, Any]:
        """``op``'s answer as its JSON document, for a command's ``--json`` to hand on:
        an agent's exactly as it wrote it (read back strictly first, as every answer
        is), a node served here's as the agent would have written it."""
        encode = op.answer.encode
        assert encode is not None, f"{op.name} is a stream: it has no one document"
        return encode(await self.call(op, request))

    async def close(self) -> None: ...

    # ── the calls, each written once over call and stream ───────────────────

    async def status(self) -> NodeView:
        """The node now (an agent's latest reading); raises when it cannot be read."""
        return await self.call(ops.STATUS, Nothing())

    def views(self) -> AsyncIterator[NodeView]:
        """Every new reading as it is made, the latest first; ends when the node goes away."""
        return self.stream(ops.VIEWS, Nothing())

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        return await self.call(ops.LAUNCH, request)

    async def reserve(self, request: ReserveRequest) -> Launched:
        return await self.call(ops.RESERVE, request)

    async def extend(self, run_id: str, duration_s: float) -> JobState:
        return await self.call(ops.EXTEND, ExtendRequest(run_id, duration_s))

    async def stop(self, run_id: str) -> JobState:
        return await self.call(ops.STOP, StopRequest(run_id))

    async def reclaim(self, run_id: Optional[str]) -> list[JobState]:
        return await self.call(ops.RECLAIM, ReclaimRequest(run_id))

    async def cancel(self, run_id: str) -> QueuedLaunch:
        return await self.call(ops.CANCEL, CancelRequest(run_id))

    async def queued(self) -> tuple[QueuedLaunch, ...]:
        """Launches queued or under way now, in order."""
        return await self.call(ops.QUEUED, Nothing())

    async def audit(self, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        """Logged actions (the caller's own, or all for an operator) and whether they
        are everyone's: the newest page of them (TUNEPLANE_MAX_PAGE)."""
        page = await self.audit_page(AuditRequest(since_s=since_s))
        return list(page.entries), page.everyone

    async def audit_page(self, request: AuditRequest) -> AuditPage:
        """One page of logged actions, the newest before ``request.before``, and
        whether older ones were left out."""
        return await self.call(ops.AUDIT, request)

    async def notify_list(self) -> NotifyList:
        """Where the caller is told what concerns them: their URLs (secrets masked), their terminals."""
        return await self.call(ops.NOTIFY_LIST, Nothing())

    async def notify_add(self, url: str, node: bool = False) -> NotifyList:
        """Be told at ``url`` through Apprise (``node``: an operator's URL for the node's events)."""
        return await self.call(ops.NOTIFY_ADD, NotifyAddRequest(url, node))

    async def notify_remove(self, number: int) -> NotifyList:
        """Stop being told at the caller's URL ``number`` (from 1, as listed)."""
        return await self.call(ops.NOTIFY_REMOVE, NotifyRemoveRequest(number))

    async def drain(self, card: int, reason: str) -> Drain:
        """Take a card out of service (operators; NotAllowed otherwise)."""
        return await self.call(ops.DRAIN, DrainRequest(card, reason))

    async def undrain(self, card: int, *, force: bool = False) -> Drain:
        """Put a drained card back (operators); Conflict, naming the problem, while
        the card still reports one, or (unless ``force``) while a drain until the
        node reboots has not seen a reboot and a check passed since. Returns the
        drain that was lifted."""
        return await self.call(ops.UNDRAIN, UndrainRequest(card, force))

    async def check(self, card: int) -> CardCheck:
        """Check a card before it goes back into service (operators): the check as
        it ended, passed or not, with what the node did with the card after it;
        Conflict while a job holds the card or another check runs on it."""
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
        """SIGTERM the card's external or intruding processes, or ``pid`` (operators);
        SIGKILL after the grace period with ``kill``; ``dry_run`` only lists them.
        With ``started_at`` (from a dry run's answer) ``pid`` is signalled only
        while it is still that process."""
        return await self.call(ops.EVICT, EvictRequest(card, pid, kill, dry_run, started_at))

    async def events(self, since_s: Optional[float] = None, card: Optional[int] = None) -> list[dict[str, Any]]:
        """The node's log (of the last ``since_s`` seconds; about ``card``), oldest first,
        the newest page of it (TUNEPLANE_MAX_PAGE). Each entry has ``time``, ``kind``,
        ``message`` and, where it is about cards, ``cards``."""
        return list((await self.events_page(EventsRequest(since_s=since_s, card=card))).entries)

    async def events_page(self, request: EventsRequest) -> EventsPage:
        """One page of the node's log, the newest before ``request.before``, and
        whether older entries were left out."""
        return await self.call(ops.EVENTS, request)

    def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """:meth:`events` for ``since_s``, then each entry as it is written, until closed.
        ``opened`` is called once the node has taken the request, before any entry:
        a follower can tell it follows again even when nothing is written for hours."""
        return self.stream(ops.FOLLOW_EVENTS, EventsRequest(since_s=since_s, card=card, follow=True), opened)

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        """Each card's (or one card's) last hour, oldest first."""
        return await self.call(ops.HISTORY, HistoryRequest(card))

    async def logs(self, run_id: str, after: Optional[str] = None) -> JobOutput:
        """A page of a job's output from ``after`` (None: its beginning): its owner's or an operator's to read."""
        return await self.call(ops.LOGS, LogsRequest(run_id, after))

    def follow_logs(self, run_id: str, after: Optional[str] = None) -> AsyncIterator[JobOutput]:
        """:meth:`logs` from ``after``, page after page, then each new piece as it is
        written; the last says ``ended``, once the job has ended and all of it was read."""
        return self.stream(ops.FOLLOW_LOGS, LogsRequest(run_id, after, follow=True))

    async def usage(self, since: float, until: float, by: str = "user") -> UsageReport:
        """Who used which cards from ``since`` to ``until`` (unix seconds), a row per
        account, card or job (``by``): the caller's own rows and the node's total (an
        operator's: everyone's). Recorded by the node's agent: an in-process node refuses."""
        return await self.call(ops.USAGE, UsageRequest(since, until, by))
