"""NodeService: the parts of the node's service put together, and what every caller calls.

Each part holds its own state and is handed the parts it uses, so what one
part may touch of another is in its constructor: the readings (and the node
as last read), the journal (every action logged before it is answered), and
the changes every action counts so that a reading after it shows it. This
class only puts them together and answers for them: the CLI, the agent's
API, the dashboard, the fleet publisher and the metrics all call it.

Every operation of the port's table (:mod:`tpnode_tui.port.operations`) is a
method here of the same name, taking the caller (as the kernel named them)
and the operation's request: the agent's door and the in-process node both
come in through :meth:`NodeService.read` (the request read from what was
sent, a refusal logged) and :meth:`NodeService.do`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import is_dataclass, replace
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, TypeVar

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.sections import DEFAULT_XID_DRAIN, LimitSettings
from tpnode_tui.config.settings import Settings
from tpnode_tui.core.policy import Policy, counted, held_by
from tpnode_tui.core.xid import XidRules
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import AllocationLock
from tpnode_tui.model.errors import BadRequest, Conflict, NotAllowed, RuntimeUnavailable, TpnodeError
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port.fields import Query
from tpnode_tui.port.operations import Operation, Source
from tpnode_tui.port.types import (
    AuditPage,
    AuditRequest,
    CancelRequest,
    DrainRequest,
    EventsPage,
    EventsRequest,
    EvictRequest,
    ExtendRequest,
    HistoryRequest,
    LaunchRequest,
    LaunchResult,
    NodeView,
    Nothing,
    Reading,
    ReclaimRequest,
    ReserveRequest,
    ShellRequest,
    StopRequest,
    UndrainRequest,
    UsageRequest,
    WhoAmI,
    You,
)
from tpnode_tui.service.accounts import group_names
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.idle import IdleReservations
from tpnode_tui.service.jobs import JobActions
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.launches import Launches
from tpnode_tui.service.operators import OperatorActions
from tpnode_tui.service.readings import Readings
from tpnode_tui.service.xids import Xids
from tpnode_tui.state.jsonstore import SetAside
from tpnode_tui.state.nodelog import NodeLog
from tpnode_tui.state.queue import Bounds, FileQueue, LaunchQueue, MemoryQueue
from tpnode_tui.triage.compare import Triage
from tpnode_tui.triage.history import History

if TYPE_CHECKING:
    from tpnode_tui.state.ledger import UsageLedger

log = logging.getLogger(__name__)

DEFAULT_XID_RULES = XidRules.of(DEFAULT_XID_DRAIN)

A = TypeVar("A")

#: the limits of a service made without settings (a test's): the settings' defaults
DEFAULT_LIMITS = LimitSettings()

#: what a node that keeps no usage ledger answers ``usage``
NO_LEDGER = (
    "usage is recorded by the node's agent: this node is served in this process, without one, and "
    "nothing here keeps a usage ledger; run the agent (tpnode-tui agent, as root or by its systemd unit) "
    "and ask it"
)


class NodeService:
    def __init__(
        self,
        allocator: GpuAllocator,
        policy: Policy,
        *,
        queue: Optional[LaunchQueue] = None,
        node_log: Optional[NodeLog] = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        xid_rules: XidRules = DEFAULT_XID_RULES,
        idle_after_s: float = 30 * 60,
        evict_grace_s: float = 10.0,
        watch_xids: bool = True,
        ledger: Optional[UsageLedger] = None,
        idle_job_after_s: Optional[float] = None,
        reclaim_idle_after_s: Optional[float] = None,
        reclaim_grace_s: float = 15 * 60,
        limits: LimitSettings = DEFAULT_LIMITS,
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.interval = interval
        self.clock = clock
        #: what one request and one account may ask (the settings' limits section)
        self.limits = limits
        self.changes = Changes()
        self.journal = Journal(node_log, clock, self.changes, page=limits.page)
        #: each card's last hour, kept from the polls
        self.rings = History(interval)
        self.triage = Triage(
            idle_after_s=idle_after_s,
            mem_busy_mib=allocator.settings.cards.mem_busy_mib,
            history=self.rings,
            record=self.journal.event,
            started_at=clock(),
            idle_job_after_s=idle_job_after_s,
            logged=self.journal.logged,
        )
        #: the usage ledger, written from every reading: the agent's only (see from_settings)
        self.ledger = ledger
        #: the one thread usage reports are read in: a flood of them waits for it,
        #: never for the threads the polls and the ledger's writes use
        self._reports = ThreadPoolExecutor(1, thread_name_prefix="tpnode-usage")
        self.readings = Readings(allocator, self.triage, self.rings, self.changes, clock, self._as_read, ledger)
        self.xids = Xids(
            allocator,
            xid_rules,
            watch=watch_xids,
            triage=self.triage,
            readings=self.readings,
            journal=self.journal,
            changes=self.changes,
        )
        queue = queue if queue is not None else MemoryQueue()
        if isinstance(queue, FileQueue):
            queue.on_set_aside = self._set_aside
        self.launches = Launches(
            allocator,
            policy,
            queue,
            clock=clock,
            readings=self.readings,
            journal=self.journal,
            changes=self.changes,
            bounds=Bounds(limits.queued_per_user, limits.queued),
        )
        self.operator_actions = OperatorActions(
            allocator, policy, clock=clock, evict_grace_s=evict_grace_s, readings=self.readings, journal=self.journal
        )
        self.job_actions = JobActions(allocator, policy, clock=clock, journal=self.journal, longest_s=limits.duration_s)
        #: whether this service polls for everyone (run): a status then gives the
        #: latest reading, else it reads the node itself
        self._polling = False
        #: the last reason the queue could not be tried, said once until it changes
        self._queue_trouble: Optional[str] = None
        self.idle_reservations = IdleReservations(
            allocator,
            self.triage,
            journal=self.journal,
            changes=self.changes,
            clock=clock,
            after_s=reclaim_idle_after_s,
            grace_s=reclaim_grace_s,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        queue: Optional[LaunchQueue] = None,
        lock: Optional[AllocationLock] = None,
        interval: float = 1.0,
        agent: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> NodeService:
        """The node's service as its settings make it: the one place it is put
        together, so the agent and an in-process node apply the same rules,
        log and triage. ``queue``: the agent's survives it, in the state dir (an
        in-process one is in memory); ``lock`` replaces the one the settings
        would make (the CLI's bounds its wait).

        ``agent``: served by the node's agent, which alone keeps the usage
        ledger in the state dir and gives idle reservations back: it is the one
        process that reads the node all the time, and two would count every
        hold twice and warn every owner twice. ``clock``: the service's time (a
        test's, so that hours pass at once)."""
        usage = settings.usage
        ledger = None
        if agent:  # imported here: only the agent keeps one, and sqlite3 is a command's cost otherwise
            from tpnode_tui.state.ledger import UsageLedger

            ledger = UsageLedger(settings.state.dir, days=usage.days, clock=clock)
        return cls(
            GpuAllocator.from_settings(settings, lock=lock),
            Policy.from_settings(settings),
            queue=queue,
            node_log=NodeLog(
                settings.state.dir,
                max_bytes=int(settings.state.log_max_mb * 1024 * 1024),
                account_max_bytes=int(settings.state.log_account_mb * 1024 * 1024),
            ),
            interval=interval,
            xid_rules=XidRules.of(settings.triage.xid_drain, settings.triage.xid_ignore),
            idle_after_s=settings.triage.idle_reservation_min * 60.0,
            evict_grace_s=settings.triage.evict_grace_s,
            clock=clock,
            ledger=ledger,
            idle_job_after_s=usage.flag_idle_job_after_s,
            reclaim_idle_after_s=usage.reclaim_idle_after_s if agent else None,
            reclaim_grace_s=usage.reclaim_grace_s,
            limits=settings.limits,
        )

    def _as_read(self, raw: NodeSnapshot) -> NodeSnapshot:
        """The allocator's snapshot as readers get it: with the queue, idle
        reservations (and those to be released), idle-held jobs, recent XIDs and
        whether XIDs are watched. A queue file
        that cannot be read is said in the snapshot (``queue_problem``), never
        made the whole reading's failure: the cards are still known, and
        everyone's status must still answer."""
        xid_watch, xid_problem = self.xids.watching
        snap = self.triage.decorate(raw, self.clock(), xid_watch=xid_watch, xid_problem=xid_problem)
        try:
            queue, problem = self.launches.queued(), self.launches.queue.problem()
        except TpnodeError as e:
            queue, problem = (), str(e)
        return replace(snap, queue=queue, queue_problem=problem, releases=self.idle_reservations.releases())

    def _set_aside(self, record: SetAside) -> None:
        """A queued launch that could not be read back was moved aside: said
        once in the node's log, where everyone following it sees it."""
        self.journal.event(
            "queue",
            f"queued launch {record.key[:80]!r} could not be read back ({record.why[:300]}); it was set "
            f"aside in {record.path}, and the queue goes on",
            target=record.key[:80],
        )

    @property
    def launch_results(self) -> collections.Counter[str]:
        """Launches and reservations by result since the service started (for /metrics)."""
        return self.journal.launch_results

    @property
    def last_xid(self) -> dict[int, int]:
        """Each card's last XID since the service started (for /metrics, as dcgm-exporter gives it)."""
        return self.xids.last_xid

    # ── reading ───────────────────────────────────────────────────────────────

    @property
    def reading(self) -> Reading:
        return self.readings.reading

    async def poll(self) -> Reading:
        return await self.readings.poll()

    async def read_now(self) -> NodeSnapshot:
        return await self.readings.read_now()

    async def current(self, timeout_s: float = 30.0) -> Reading:
        return await self.readings.current(timeout_s)

    def subscribe(self) -> AsyncIterator[Reading]:
        return self.readings.subscribe()

    @property
    def subscribers(self) -> int:
        return self.readings.subscribers

    def poll_soon(self) -> None:
        self.changes.poll_soon()

    async def run(self) -> None:
        """Poll once per interval (or sooner when an action asks), then try the
        queue. Polls never overlap: the next waits for the last to end. The
        XID watcher starts once a poll has found which probe reads the cards."""
        self.xids.listen()
        self._polling = True
        try:
            while True:
                self.changes.wake.clear()
                await self.poll()
                await self._after_poll()
                self.give_back_idle()
                await self._pause()
        finally:
            self._polling = False

    async def _after_poll(self) -> None:
        """Start the XID watcher and a round over the queue. What stops them (a
        broken queue file, say) is said by the readings, and once in the
        agent's log, not after every poll: the polls go on."""
        try:
            await self.xids.start_watcher()
            self.launches.try_queue()
            trouble = None
        except Exception as e:  # noqa: BLE001 (the polls must go on whatever the queue does)
            trouble = f"{type(e).__name__}: {e}"
            if trouble != self._queue_trouble:
                log.warning("could not try the queue", exc_info=not isinstance(e, TpnodeError))
        self._queue_trouble = trouble

    def give_back_idle(self) -> None:
        """Warn, keep or release the idle reservations the last good reading shows;
        a warning that came or went is shown at once, on that reading."""
        snap = self.readings.raw
        if snap is None or self.readings.reading.error is not None:
            return
        try:
            if self.idle_reservations.check(snap):
                self.readings.republish()
        except Exception:  # what is learnt from a reading must never stop the polls
            log.warning("could not check the idle reservations", exc_info=True)

    async def _pause(self) -> None:
        """Wait for the interval, or less if an action asks for a poll.

        Not ``wait_for``: before Python 3.12 it can swallow a cancellation that
        arrives as the wait ends, and a cancelled ``run`` would then poll on for
        ever while whoever cancelled it waits (a dashboard that never quits)."""
        waiter = asyncio.ensure_future(self.changes.wake.wait())
        try:
            await asyncio.wait({waiter}, timeout=self.interval)
        finally:
            waiter.cancel()

    # ── one operation, as the door or an in-process node asks it ──────────────

    def read(self, caller: Caller, op: Operation[Any, Any], source: Source) -> Any:
        """``op``'s request in what ``caller`` sent, read with every rule and the
        node's limits; a request refused here is logged as the caller's."""
        try:
            return op.read(source, self.limits)
        except TpnodeError as e:
            self.refused(caller, op, _named(source), e)
            raise

    async def do(self, caller: Caller, op: Operation[Any, A], request: Any) -> A:
        """``op`` done for ``caller``. An action logs itself, allowed or not; a
        read that is refused (a card that is not the node's) is logged here."""
        try:
            result: A = await getattr(self, op.name)(caller, request)
        except (BadRequest, NotAllowed, Conflict) as e:
            if op.name in _READS:
                self.refused(caller, op, _named(request), e)
            raise
        return result

    def refused(self, caller: Caller, op: Operation[Any, Any], target: str, error: TpnodeError) -> None:
        """Log ``op`` refused before its action began, as ``caller``'s, in the table's words."""
        self.journal.refused(caller, op.name, op.says, target, error)

    def stream(self, caller: Caller, op: Operation[Any, A], request: Any) -> AsyncIterator[A]:
        """``op``'s stream for ``caller``: each item as it comes, until closed."""
        items: AsyncIterator[A] = getattr(self, op.name)(caller, request)
        return items

    # ── reading ──────────────────────────────────────────────────────────────

    async def status(self, caller: Caller, request: Nothing) -> NodeView:
        """The node now: the latest reading where this service polls for
        everyone (once it shows every action answered so far), else read now."""
        if self._polling:
            reading = await self.current()
            if reading.error is not None or reading.snapshot is None:
                raise RuntimeUnavailable(reading.error or "the agent has not read the node yet; try again")
        else:
            await self.read_now()
            reading = self.reading
        return NodeView(reading, self.you(caller, reading.snapshot))

    async def views(self, caller: Caller, request: Nothing) -> AsyncIterator[NodeView]:
        """Every new reading, as ``caller`` sees it."""
        async for reading in self.subscribe():
            yield NodeView(reading, self.you(caller, reading.snapshot))

    async def whoami(self, caller: Caller, request: Nothing) -> WhoAmI:
        return WhoAmI(self.you(caller, self.reading.snapshot), caller.pid)

    async def queued(self, caller: Caller, request: Nothing) -> tuple[QueuedLaunch, ...]:
        return self.launches.queued()

    async def history(self, caller: Caller, request: HistoryRequest) -> dict[int, list[Sample]]:
        return self.readings.card_history(request.card)

    async def usage(self, caller: Caller, request: UsageRequest) -> UsageReport:
        """Who used which cards over the span: the caller's own rows and the node's
        total, an operator's every account's (the ledger's report decides, from the
        kernel's identity), at most a page of rows (TUNEPLANE_MAX_PAGE). Read from
        the ledger's file in the reports' one thread (90 days of 8 cards take about
        60 ms); only the agent keeps a ledger."""
        if self.ledger is None:
            raise RuntimeUnavailable(NO_LEDGER)
        from tpnode_tui.state.usage import usage_report, within

        loop = asyncio.get_running_loop()
        ledger, since, until, by = self.ledger, request.since, request.until, request.by
        report = await loop.run_in_executor(self._reports, usage_report, ledger, since, until, by, caller)
        return within(report, self.limits.page)

    # ── who is asking, and the node's log ─────────────────────────────────────

    def you(self, caller: Caller, snap: Optional[NodeSnapshot]) -> You:
        jobs = snap.jobs if snap is not None else ()
        return You(
            user=caller.user,
            uid=caller.uid,
            operator=caller.operator,
            cards_held=sum(counted(j) for j in held_by(caller, jobs)),
            card_limit=self.policy.limits.limit_for(caller, group_names(caller.groups)),
            operators=self.policy.operators.describe(),
        )

    async def audit(self, caller: Caller, request: AuditRequest) -> AuditPage:
        return await self.journal.audit(caller, request)

    async def events(self, caller: Caller, request: EventsRequest) -> EventsPage:
        return await self.journal.events(caller, request)

    def follow_events(self, caller: Caller, request: EventsRequest) -> AsyncIterator[dict[str, Any]]:
        return self.journal.follow_events(caller, request)

    # ── taking cards out of service ──────────────────────────────────────────

    async def drain(self, caller: Caller, request: DrainRequest) -> Drain:
        return await self.operator_actions.drain(caller, request)

    async def undrain(self, caller: Caller, request: UndrainRequest) -> Drain:
        return await self.operator_actions.undrain(caller, request)

    async def evict(self, caller: Caller, request: EvictRequest) -> EvictReport:
        return await self.operator_actions.evict(caller, request)

    # ── launching, and the queue ─────────────────────────────────────────────

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        return await self.launches.launch(caller, request)

    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        return await self.launches.reserve(caller, request)

    async def cancel(self, caller: Caller, request: CancelRequest) -> QueuedLaunch:
        return await self.launches.cancel(caller, request)

    # ── changing and ending jobs ─────────────────────────────────────────────

    async def stop(self, caller: Caller, request: StopRequest) -> JobState:
        return await self.job_actions.stop(caller, request)

    async def extend(self, caller: Caller, request: ExtendRequest) -> JobState:
        return await self.job_actions.extend(caller, request)

    async def shell(self, caller: Caller, request: ShellRequest) -> ShellEntry:
        return await self.job_actions.shell(caller, request)

    async def reclaim(self, caller: Caller, request: ReclaimRequest) -> list[JobState]:
        return await self.job_actions.reclaim(caller, request)

    async def close(self) -> None:
        await self.xids.close()
        await self.launches.close()
        await self.idle_reservations.close()
        self._reports.shutdown(wait=False, cancel_futures=True)
        if self.ledger is not None:  # what was read of the minute under way is written
            await asyncio.to_thread(self.ledger.close)
        self.journal.close()


#: the operations that only read: allowed, they are not logged; refused, they are
_READS = frozenset({"status", "views", "whoami", "queued", "audit", "events", "follow_events", "history", "usage"})


def _named(request: Any) -> str:
    """What a request names (its run id, or its card), as its log entry's
    target, as far as can be told: from what was sent (a JSON body, a query
    string) or from the request read."""
    if isinstance(request, Query):
        fields: Any = request.items
    elif is_dataclass(request) and not isinstance(request, type):
        fields = vars(request)
    else:
        fields = request
    if not isinstance(fields, dict):
        return ""
    for key, said in (("run_id", "{}"), ("card", "card {}")):
        value = fields.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return said.format(value)
    return ""
