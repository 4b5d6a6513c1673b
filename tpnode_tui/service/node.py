"""NodeService: the parts of the node's service put together, and what every caller calls.

Each part holds its own state and is handed the parts it uses, so what one
part may touch of another is in its constructor: the readings (and the node
as last read), the journal (every action logged before it is answered), and
the changes every action counts so that a reading after it shows it. This
class only puts them together and answers for them: the CLI, the agent's
API, the dashboard, the fleet publisher and the metrics all call it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.sections import DEFAULT_XID_DRAIN
from tpnode_tui.config.settings import Settings
from tpnode_tui.core.policy import Policy, counted, held_by
from tpnode_tui.core.xid import XidRules
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import AllocationLock
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port.types import LaunchRequest, LaunchResult, Reading, ReserveRequest, You
from tpnode_tui.service.accounts import group_names
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.idle import IdleReservations
from tpnode_tui.service.jobs import JobActions
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.launches import Launches
from tpnode_tui.service.operators import OperatorActions
from tpnode_tui.service.readings import Readings
from tpnode_tui.service.xids import Xids
from tpnode_tui.state.ledger import UsageLedger
from tpnode_tui.state.nodelog import NodeLog
from tpnode_tui.state.queue import LaunchQueue, MemoryQueue
from tpnode_tui.triage.compare import Triage
from tpnode_tui.triage.history import History

log = logging.getLogger(__name__)

DEFAULT_XID_RULES = XidRules.of(DEFAULT_XID_DRAIN)


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
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.interval = interval
        self.clock = clock
        self.changes = Changes()
        self.journal = Journal(node_log, clock, self.changes)
        self.history = History(interval)
        self.triage = Triage(
            idle_after_s=idle_after_s,
            mem_busy_mib=allocator.settings.cards.mem_busy_mib,
            history=self.history,
            record=self.journal.event,
            started_at=clock(),
            idle_job_after_s=idle_job_after_s,
        )
        #: the usage ledger, written from every reading: the agent's only (see from_settings)
        self.ledger = ledger
        self.readings = Readings(allocator, self.triage, self.history, self.changes, clock, self._as_read, ledger)
        self.xids = Xids(
            allocator,
            xid_rules,
            watch=watch_xids,
            triage=self.triage,
            readings=self.readings,
            journal=self.journal,
            changes=self.changes,
        )
        self.launches = Launches(
            allocator,
            policy,
            queue if queue is not None else MemoryQueue(),
            clock=clock,
            readings=self.readings,
            journal=self.journal,
            changes=self.changes,
        )
        self.operator_actions = OperatorActions(
            allocator, policy, clock=clock, evict_grace_s=evict_grace_s, readings=self.readings, journal=self.journal
        )
        self.job_actions = JobActions(allocator, policy, clock=clock, journal=self.journal)
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
        ledger = UsageLedger(settings.state.dir, days=usage.days, clock=clock) if agent else None
        return cls(
            GpuAllocator.from_settings(settings, lock=lock),
            Policy.from_settings(settings),
            queue=queue,
            node_log=NodeLog(settings.state.dir, max_bytes=int(settings.state.log_max_mb * 1024 * 1024)),
            interval=interval,
            xid_rules=XidRules.of(settings.triage.xid_drain, settings.triage.xid_ignore),
            idle_after_s=settings.triage.idle_reservation_min * 60.0,
            evict_grace_s=settings.triage.evict_grace_s,
            clock=clock,
            ledger=ledger,
            idle_job_after_s=usage.flag_idle_job_after_s,
            reclaim_idle_after_s=usage.reclaim_idle_after_s if agent else None,
            reclaim_grace_s=usage.reclaim_grace_s,
        )

    def _as_read(self, raw: NodeSnapshot) -> NodeSnapshot:
        """The allocator's snapshot as readers get it: with the queue, idle
        reservations (and those to be released), idle-held jobs, recent XIDs and
        whether XIDs are watched."""
        xid_watch, xid_problem = self.xids.watching
        snap = self.triage.decorate(raw, self.clock(), xid_watch=xid_watch, xid_problem=xid_problem)
        return replace(snap, queue=self.launches.queued(), releases=self.idle_reservations.releases())

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
        while True:
            self.changes.wake.clear()
            await self.poll()
            try:
                await self.xids.start_watcher()
                self.launches.try_queue()
            except Exception:  # a broken queue file, say: said by the readings, and the polls go on
                log.warning("could not try the queue", exc_info=True)
            self.give_back_idle()
            await self._pause()

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

    def card_history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        return self.readings.card_history(card)

    # ── who is asking, and the node's log ─────────────────────────────────────

    def you(self, caller: Caller, snap: Optional[NodeSnapshot]) -> You:
        jobs = snap.jobs if snap is not None else ()
        return You(
            user=caller.user,
            uid=caller.uid,
            operator=caller.operator,
            cards_held=sum(counted(j) for j in held_by(caller, jobs)),
            card_limit=self.policy.limits.limit_for(caller, group_names(caller.groups)),
        )

    def audit(self, caller: Caller, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        return self.journal.audit(caller, since_s)

    def events(
        self, caller: Caller, since_s: Optional[float] = None, card: Optional[int] = None
    ) -> list[dict[str, Any]]:
        return self.journal.events(caller, since_s, card)

    def follow_events(
        self, caller: Caller, card: Optional[int] = None, since_s: Optional[float] = None
    ) -> AsyncIterator[dict[str, Any]]:
        return self.journal.follow_events(caller, card, since_s)

    # ── taking cards out of service ──────────────────────────────────────────

    async def drain_card(self, caller: Caller, card: int, reason: str) -> Drain:
        return await self.operator_actions.drain_card(caller, card, reason)

    async def undrain_card(self, caller: Caller, card: int) -> Drain:
        return await self.operator_actions.undrain_card(caller, card)

    async def evict(
        self,
        caller: Caller,
        card: int,
        pid: Optional[int] = None,
        *,
        kill: bool = False,
        dry_run: bool = False,
        started_at: Optional[float] = None,
    ) -> EvictReport:
        return await self.operator_actions.evict(caller, card, pid, kill=kill, dry_run=dry_run, started_at=started_at)

    # ── launching, and the queue ─────────────────────────────────────────────

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        return await self.launches.launch(caller, request)

    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        return await self.launches.reserve(caller, request)

    def queued(self) -> tuple[QueuedLaunch, ...]:
        return self.launches.queued()

    async def cancel(self, caller: Caller, run_id: str) -> QueuedLaunch:
        return await self.launches.cancel(caller, run_id)

    # ── changing and ending jobs ─────────────────────────────────────────────

    async def stop(self, caller: Caller, run_id: str) -> JobState:
        return await self.job_actions.stop(caller, run_id)

    async def extend(self, caller: Caller, run_id: str, duration_s: float) -> JobState:
        return await self.job_actions.extend(caller, run_id, duration_s)

    async def reclaim(self, caller: Caller, run_id: Optional[str]) -> list[JobState]:
        return await self.job_actions.reclaim(caller, run_id)

    async def close(self) -> None:
        await self.xids.close()
        await self.launches.close()
        await self.idle_reservations.close()
        if self.ledger is not None:  # what was read of the minute under way is written
            await asyncio.to_thread(self.ledger.close)
