"""NodeService: the parts of the node's service put together, and what every caller calls.

Each part holds its own state and is handed the parts it uses, so what one
part may touch of another is in its constructor: the readings (and the node
as last read), the journal (every action logged before it is answered), and
the changes every action counts so that a reading after it shows it. This
class only puts them together and answers for them: the CLI, the agent's
API, the dashboard, the fleet publisher and the metrics all call it.

Every operation of the port's table (:mod:`tpnode_tui.port.operations`) is
done by one method here, bound to it by :func:`handles`, taking the caller (as
the kernel named them) and the operation's request: the agent's door and the
in-process node both come in through :meth:`NodeService.read` (the request
read from what was sent, a refusal logged) and :meth:`NodeService.do`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import is_dataclass, replace
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Optional, TypeVar, cast

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.sections import DEFAULT_XID_DRAIN, LimitSettings, NotifySettings
from tpnode_tui.config.settings import Settings
from tpnode_tui.core.policy import Policy, counted, held_by
from tpnode_tui.core.xid import XidRules
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import AllocationLock
from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.errors import BadRequest, Conflict, NotAllowed, RuntimeUnavailable, TpnodeError
from tpnode_tui.model.jobs import JobOutput, JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.notify.post import Post
from tpnode_tui.port import operations as ops
from tpnode_tui.port.fields import Query
from tpnode_tui.port.operations import Operation, Request, Source
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
from tpnode_tui.port.types.readings import HistoryRequest, NodeView, Nothing, Reading, UsageRequest, WhoAmI, You
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest, ShellRequest
from tpnode_tui.service.accounts import group_names
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.checks import Checks
from tpnode_tui.service.exited import ExitedRecords
from tpnode_tui.service.idle import IdleReservations
from tpnode_tui.service.jobs import JobActions
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.launches import Launches
from tpnode_tui.service.notices import Notices
from tpnode_tui.service.operators import OperatorActions
from tpnode_tui.service.readings import Readings
from tpnode_tui.service.xids import Xids
from tpnode_tui.state.addresses import AddressBook
from tpnode_tui.state.checks import CheckStore
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
Q = TypeVar("Q", bound=Request)

#: what does an operation: a method of NodeService taking the caller and the request
Handler = Callable[["NodeService", Caller, Q], Awaitable[Any]]

#: each operation's handler, by the operation's name: bound by :func:`handles`, once each
HANDLERS: dict[str, Handler[Any]] = {}


def handles(op: Operation[Q, Any]) -> Callable[[Handler[Q]], Handler[Q]]:
    """Bind the method below to ``op``: the one that does it, whoever asks
    (the agent's door or an in-process node). A second handler for one
    operation is a mistake in this module, refused as it is loaded."""

    def bind(method: Handler[Q]) -> Handler[Q]:
        if op.name in HANDLERS:
            raise TypeError(f"{op.name} has two handlers")
        HANDLERS[op.name] = method
        return method

    return bind


#: the limits of a service made without settings (a test's): the settings' defaults
DEFAULT_LIMITS = LimitSettings()

#: what a node that tells nobody answers ``notify``
NO_NOTICES = (
    "notices are sent by the node's agent: this node is served in this process, without one, and "
    "nobody is told anything from here; run the agent (tpnode-tui agent, as root or by its systemd unit) "
    "and ask it"
)

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
        notify: Optional[NotifySettings] = None,
        addresses: Optional[AddressBook] = None,
        exited_per_user: Optional[int] = None,
    ) -> None:
        """``notify`` and ``addresses``: what the node tells each account, and the
        URLs they gave; both or neither (nobody is told: a test's service, an
        in-process node). ``exited_per_user``: the most exited jobs of one account
        kept listed, the oldest beyond it removed once the ledger has them (None:
        all kept; only a service with a ledger removes any)."""
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
            ending_before_s=notify.before_end_s if notify is not None and addresses is not None else None,
            output=allocator.runtime.output_of,
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
            boot=self.boot,
        )
        #: each card's last check (checks.json): what a check keeps, and undrain reads
        check_store = CheckStore(allocator.settings.state.dir)
        self.checks = Checks(
            allocator,
            policy,
            check_store,
            clock=clock,
            readings=self.readings,
            journal=self.journal,
            changes=self.changes,
            boot=self.boot,
            xids_seen=self._xids_seen,
            xids_unwatched=lambda: self.xids.watching[1] if not self.xids.watching[0] else None,
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
            allocator,
            policy,
            clock=clock,
            evict_grace_s=evict_grace_s,
            readings=self.readings,
            journal=self.journal,
            boot=self.boot,
            checks=check_store,
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
        #: what the node tells each account (the agent's only; see from_settings)
        self.notices: Optional[Notices] = None
        if notify is not None and addresses is not None:
            post = Post(
                queue=notify.queue,
                urls=notify.urls,
                event_per_hour=notify.event_per_hour,
                account_per_hour=notify.account_per_hour,
                timeout_s=notify.timeout_s,
                clock=clock,
            )
            self.notices = Notices(
                addresses,
                post,
                journal=self.journal,
                readings=self.readings,
                operators=policy.operators,
                settings=notify,
                clock=clock,
            )
        self.exited = ExitedRecords(allocator, self.readings, most=exited_per_user)

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
        ledger in the state dir, gives idle reservations back, removes the exited
        jobs beyond an account's limit (once the ledger has them) and tells each
        account what concerns it: it is the one process that reads the node all
        the time, and two would count every hold twice and warn every owner twice. ``clock``: the service's time (a
        test's, so that hours pass at once)."""
        usage = settings.usage
        ledger = None
        if agent:  # imported here: only the agent keeps one, and sqlite3 is a command's cost otherwise
            from tpnode_tui.state.ledger import UsageLedger

            ledger = UsageLedger(settings.state.dir, days=usage.days, clock=clock, holds_per_user=usage.holds_per_user)
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
            notify=settings.notify if agent else None,
            addresses=AddressBook(settings.state.dir) if agent else None,
            exited_per_user=settings.limits.exited_per_user if agent else None,
        )

    def boot(self) -> Optional[str]:
        """This boot's id (TUNEPLANE_BOOT_ID); None when it cannot be read."""
        from tpnode_tui.runtimes.liveness import boot_id  # the process runtime's reader, loaded only to drain or check

        try:
            return boot_id(self.allocator.settings.triage.boot_id) or None
        except RuntimeUnavailable:
            return None

    def _xids_seen(self, card: int) -> list[tuple[int, float]]:
        """The card's last XID as watched since the service started, and when."""
        xid, at = self.xids.last_xid.get(card), self.xids.last_xid_at.get(card)
        return [] if xid is None or at is None else [(xid, at)]

    def _as_read(self, raw: NodeSnapshot) -> NodeSnapshot:
        """The allocator's snapshot as readers get it: with the queue, idle
        reservations (and those to be released), idle-held jobs, recent XIDs,
        whether XIDs are watched, each card's last check, and what lifts a
        drain here (a check, where the node returns cards after one; this boot,
        read only while a card is drained until a reboot). A queue file
        that cannot be read is said in the snapshot (``queue_problem``), never
        made the whole reading's failure: the cards are still known, and
        everyone's status must still answer."""
        xid_watch, xid_problem = self.xids.watching
        snap = self.checks.dress(self.triage.decorate(raw, self.clock(), xid_watch=xid_watch, xid_problem=xid_problem))
        try:
            queue, problem = self.launches.queued(), self.launches.queue.problem()
        except TpnodeError as e:
            queue, problem = (), str(e)
        return replace(
            snap,
            queue=queue,
            queue_problem=problem,
            releases=self.idle_reservations.releases(),
            return_after_check=self.checks.return_after,
            boot=self.boot() if any(c.drain is not None and c.drain.reboot for c in snap.cards) else None,
        )

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
        await self.checks.ready()
        self._polling = True
        try:
            while True:
                self.changes.wake.clear()
                await self.poll()
                await self._after_poll()
                self.give_back_idle()
                await self.prune_exited()
                await self._pause()
        finally:
            self._polling = False

    async def _after_poll(self) -> None:
        """Start the XID watcher and a round over the queue. What stops them (a
        broken queue file, say) is said by the readings, and once in the
        agent's log, not after every poll: the polls go on."""
        try:
            await self.xids.start_watcher()
            if self.readings.raw is not None and self.readings.reading.error is None:
                await self.checks.count_ecc(self.readings.raw)
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

    async def prune_exited(self) -> None:
        """Remove each account's exited jobs beyond its limit, once the ledger has them."""
        try:
            await self.exited.prune()
        except Exception:  # what is tidied after a reading must never stop the polls
            log.warning("could not remove the exited jobs beyond the limit", exc_info=True)

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
            result: A = await HANDLERS[op.name](self, caller, request)
        except (BadRequest, NotAllowed, Conflict) as e:
            if op.method == "GET":  # a read: allowed, it is not logged; refused, it is
                self.refused(caller, op, _named(request), e)
            raise
        return result

    def refused(self, caller: Caller, op: Operation[Any, Any], target: str, error: TpnodeError) -> None:
        """Log ``op`` refused before its action began, as ``caller``'s, in the table's words."""
        self.journal.refused(caller, op.name, op.says, target, error)

    async def stream(self, caller: Caller, op: Operation[Any, A], request: Any) -> AsyncIterator[A]:
        """``op``'s stream for ``caller``, once what it names is checked (a refusal
        comes before the first item, as any answer's, and is logged as a read's):
        each item as it comes, until closed."""
        items: AsyncIterator[A] = await self.do(caller, cast("Operation[Any, AsyncIterator[A]]", op), request)
        return items

    # ── reading ──────────────────────────────────────────────────────────────

    @handles(ops.STATUS)
    async def status(self, caller: Caller, request: Nothing) -> NodeView:
        """The node now: the latest reading where this service polls for
        everyone (once it shows every action answered so far), else read now."""
        if self._polling:
            reading = await self.current()
            if reading.error is not None or reading.snapshot is None:
                raise RuntimeUnavailable(reading.error or "the agent has not read the node yet; try again")
        else:
            await self.checks.ready()
            await self.read_now()
            reading = self.reading
        return NodeView(reading, self.you(caller, reading.snapshot))

    @handles(ops.VIEWS)
    async def views(self, caller: Caller, request: Nothing) -> AsyncIterator[NodeView]:
        """Every new reading, as ``caller`` sees it."""
        return self._views(caller)

    async def _views(self, caller: Caller) -> AsyncIterator[NodeView]:
        async for reading in self.subscribe():
            yield NodeView(reading, self.you(caller, reading.snapshot))

    @handles(ops.WHOAMI)
    async def whoami(self, caller: Caller, request: Nothing) -> WhoAmI:
        return WhoAmI(self.you(caller, self.reading.snapshot), caller.pid)

    @handles(ops.QUEUED)
    async def queued(self, caller: Caller, request: Nothing) -> tuple[QueuedLaunch, ...]:
        return self.launches.queued()

    @handles(ops.HISTORY)
    async def history(self, caller: Caller, request: HistoryRequest) -> dict[int, list[Sample]]:
        return self.readings.card_history(request.card)

    @handles(ops.USAGE)
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

    @handles(ops.AUDIT)
    async def audit(self, caller: Caller, request: AuditRequest) -> AuditPage:
        return await self.journal.audit(caller, request)

    @handles(ops.EVENTS)
    async def events(self, caller: Caller, request: EventsRequest) -> EventsPage:
        await self._known_card(request.card)
        return await self.journal.events(caller, request)

    @handles(ops.FOLLOW_EVENTS)
    async def follow_events(self, caller: Caller, request: EventsRequest) -> AsyncIterator[dict[str, Any]]:
        await self._known_card(request.card)
        return self.journal.follow_events(caller, request)

    # ── where each account is told what concerns it ──────────────────────────

    def _notices(self) -> Notices:
        if self.notices is None:
            raise RuntimeUnavailable(NO_NOTICES)
        return self.notices

    @handles(ops.NOTIFY_LIST)
    async def notify_list(self, caller: Caller, request: Nothing) -> NotifyList:
        return await self._notices().listed(caller)

    @handles(ops.NOTIFY_ADD)
    async def notify_add(self, caller: Caller, request: NotifyAddRequest) -> NotifyList:
        return await self._notices().add(caller, request)

    @handles(ops.NOTIFY_REMOVE)
    async def notify_remove(self, caller: Caller, request: NotifyRemoveRequest) -> NotifyList:
        return await self._notices().remove(caller, request)

    async def _known_card(self, card: Optional[int]) -> None:
        """Refuse a card the node does not have, as drain does: a log asked about
        card 99 of an 8-card node would otherwise answer, wrongly, that nothing
        happened to it. The node is read first where it was not yet; while it
        cannot be read, every card is taken (the log is still there to read)."""
        if card is None:
            return
        if self.readings.raw is None:
            await self.readings.poll()
        self.readings.check_card(card)

    # ── taking cards out of service ──────────────────────────────────────────

    @handles(ops.DRAIN)
    async def drain(self, caller: Caller, request: DrainRequest) -> Drain:
        return await self.operator_actions.drain(caller, request)

    @handles(ops.UNDRAIN)
    async def undrain(self, caller: Caller, request: UndrainRequest) -> Drain:
        return await self.operator_actions.undrain(caller, request)

    @handles(ops.EVICT)
    async def evict(self, caller: Caller, request: EvictRequest) -> EvictReport:
        return await self.operator_actions.evict(caller, request)

    @handles(ops.CHECK)
    async def check(self, caller: Caller, request: CheckRequest) -> CardCheck:
        return await self.checks.check(caller, request)

    # ── launching, and the queue ─────────────────────────────────────────────

    @handles(ops.LAUNCH)
    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        return await self.launches.launch(caller, request)

    @handles(ops.RESERVE)
    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        return await self.launches.reserve(caller, request)

    @handles(ops.CANCEL)
    async def cancel(self, caller: Caller, request: CancelRequest) -> QueuedLaunch:
        return await self.launches.cancel(caller, request)

    # ── changing and ending jobs ─────────────────────────────────────────────

    @handles(ops.STOP)
    async def stop(self, caller: Caller, request: StopRequest) -> JobState:
        return await self.job_actions.stop(caller, request)

    @handles(ops.EXTEND)
    async def extend(self, caller: Caller, request: ExtendRequest) -> JobState:
        return await self.job_actions.extend(caller, request)

    @handles(ops.SHELL)
    async def shell(self, caller: Caller, request: ShellRequest) -> ShellEntry:
        return await self.job_actions.shell(caller, request)

    @handles(ops.RECLAIM)
    async def reclaim(self, caller: Caller, request: ReclaimRequest) -> list[JobState]:
        return await self.job_actions.reclaim(caller, request)

    @handles(ops.LOGS)
    async def logs(self, caller: Caller, request: LogsRequest) -> JobOutput:
        return await self.job_actions.logs(caller, request)

    @handles(ops.FOLLOW_LOGS)
    async def follow_logs(self, caller: Caller, request: LogsRequest) -> AsyncIterator[JobOutput]:
        return await self.job_actions.follow_logs(caller, request)

    async def close(self) -> None:
        await self.xids.close()
        await self.launches.close()
        await self.idle_reservations.close()
        if self.notices is not None:
            await self.notices.close()
        self._reports.shutdown(wait=False, cancel_futures=True)
        if self.ledger is not None:  # what was read of the minute under way is written
            await asyncio.to_thread(self.ledger.close)
        self.journal.close()


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
