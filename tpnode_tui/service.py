"""The node as a service: one reading for every reader, every action checked against who asks.

Whoever serves a node (the agent for every account, or an in-process
allocator for its own) runs one :class:`NodeService`. It polls the node once
per interval, however many dashboards watch: twenty dashboards cost one probe
and one ``ps()`` per interval, not twenty, and they all see the same reading.
Every action arrives with a :class:`~tpnode_tui.identity.Caller` the kernel
named, is checked against the :class:`~tpnode_tui.policy.Policy`, goes through
the one :class:`~tpnode_tui.allocator.GpuAllocator` and its lock, and is
written to the node's log before its answer is given.

Launches that wait are visible: one waiting for the allocation lock, one
placing its job, and one queued for cards are all listed in the snapshot's
queue, and each can be cancelled by its owner or an operator until it holds
cards. A launch whose asker goes away while it waits for the lock is dropped;
once it holds the lock it is finished, so a job is never left half-made.

Triage lives here too, so an agent and an in-process dashboard both have it:
the XID watcher runs beside the polls and drains a card an XID says must be
reset; each reading is compared with the last (intruders appearing and
leaving, health changes, ends and expiries go to the node's log; idle
reservations are marked); each card's last hour is kept in fixed rings; and
operators drain, undrain and evict through the same checks and log.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import grp
import json
import logging
import os
import pwd
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Optional, TypeVar

from . import evict as evicting
from .allocator import GpuAllocator
from .config import DEFAULT_XID_DRAIN, Settings
from .history import History
from .identity import Caller, account_groups
from .launchqueue import LaunchQueue, MemoryQueue, QueueEntry
from .model import (
    BadRequest,
    Conflict,
    Drain,
    EvictReport,
    JobNotFound,
    JobSpec,
    JobState,
    Launched,
    LockWaitTimeout,
    NoCapacity,
    NodeSnapshot,
    NotAllowed,
    QueuedLaunch,
    RunAs,
    RuntimeUnavailable,
    Sample,
    TpnodeError,
    check_run_id,
)
from .nodelog import NodeLog
from .policy import Policy, held_by
from .port import (
    DRAIN_REASON_MOST,
    Cancelled,
    LaunchRequest,
    LaunchResult,
    OverQuota,
    Reading,
    ReserveRequest,
    You,
    new_run_id,
)
from .printable import printable
from .render import cards_words, format_duration
from .triage import Triage
from .xid import REBOOT, REBOOT_NODE, Verdict, XidRules
from .xidwatch import XidEvent, XidWatcher, card_by_pci, watcher_for

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how many log entries one audit or events answer holds at most (the newest)
AUDIT_LIMIT = 10_000
#: how many new log entries a follower may fall behind before it misses some
FOLLOW_BACKLOG = 1000

DEFAULT_XID_RULES = XidRules.of(DEFAULT_XID_DRAIN)


@dataclass
class _Pending:
    """A launch in flight: waiting for the allocation lock, or placing its job."""

    entry: QueueEntry
    phase: str = "waiting"
    task: Optional[asyncio.Future[Launched]] = None
    cancelled_by: Optional[Caller] = None


def group_names(gids: tuple[int, ...]) -> list[str]:
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


class NodeService:
    def __init__(self, allocator: GpuAllocator, policy: Policy, *,
                 queue: Optional[LaunchQueue] = None, node_log: Optional[NodeLog] = None,
                 interval: float = 1.0, clock: Callable[[], float] = time.time,
                 xid_rules: XidRules = DEFAULT_XID_RULES, idle_after_s: float = 30 * 60,
                 evict_grace_s: float = 10.0, watch_xids: bool = True) -> None:
        self.allocator = allocator
        self.policy = policy
        self.queue: LaunchQueue = queue if queue is not None else MemoryQueue()
        self.log = node_log
        self.interval = interval
        self.clock = clock
        self.xid_rules = xid_rules
        self.evict_grace_s = evict_grace_s
        self.watch_xids = watch_xids
        self.history = History(interval)
        self.triage = Triage(idle_after_s=idle_after_s, mem_busy_mib=allocator.settings.mem_busy_mib,
                             history=self.history, record=self._event, started_at=clock())
        #: the allocator's last snapshot, before this service added what it knows
        self._raw: Optional[NodeSnapshot] = None
        self._watcher: Optional[XidWatcher] = None
        self._xid_problem = ("XID events are watched only while the node is served "
                             "(the agent, or an open dashboard)")
        self._xids: asyncio.Queue[XidEvent] = asyncio.Queue()
        self._xid_task: Optional[asyncio.Task[None]] = None
        self._followers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._reading = Reading(seq=0, snapshot=None)
        self._poll_lock = asyncio.Lock()
        self._pending: dict[str, _Pending] = {}
        self._subscribers: set[asyncio.Queue[Reading]] = set()
        self._wake = asyncio.Event()
        self._draining: Optional[asyncio.Task[None]] = None
        #: bumped by every action; a reading taken before it may not show its effect
        self._changes = 0
        self._reading_changes = 0
        self._fresh = asyncio.Condition()
        #: launches and reservations by result since the service started (for /metrics)
        self.launch_results: collections.Counter[str] = collections.Counter()
        #: each card's last XID since the service started (for /metrics, as dcgm-exporter gives it)
        self.last_xid: dict[int, int] = {}

    # ── reading ───────────────────────────────────────────────────────────────

    @property
    def reading(self) -> Reading:
        return self._reading

    async def poll(self) -> Reading:
        """Read the node now; a poll already under way is waited for instead of
        doubled, so readers never pile probes onto a slow driver."""
        with contextlib.suppress(Exception):
            await self.read_now()
        return self._reading

    async def read_now(self) -> NodeSnapshot:
        """Poll as :meth:`poll` does, but raise what stopped the reading, as it
        was raised: a one-shot ``status`` reports it and exits by its kind."""
        if self._poll_lock.locked():
            async with self._poll_lock:
                if self._reading.error is None and self._reading.snapshot is not None:
                    return self._reading.snapshot
        async with self._poll_lock:
            changes = self._changes
            try:
                snap = await self.allocator.snapshot()
            except Exception as e:
                if not isinstance(e, TpnodeError):  # a poll must never take the service down
                    log.warning("poll failed", exc_info=True)
                self._set_reading(error=str(e) or type(e).__name__, changes=changes)
                raise
            self._raw = snap
            try:
                self.triage.observe(snap, self.clock())
            except Exception:  # what is learnt from a reading must never lose the reading
                log.warning("could not compare the reading with the last one", exc_info=True)
            try:
                self._set_reading(snapshot=snap, changes=changes)
            except TpnodeError as e:  # the queue's file cannot be read: the reading says so, and is stale
                self._set_reading(error=str(e), changes=changes)
                raise
            assert self._reading.snapshot is not None
            return self._reading.snapshot

    def _set_reading(self, *, snapshot: Optional[NodeSnapshot] = None, error: Optional[str] = None,
                     changes: int) -> None:
        old = self._reading
        if error is None:
            reading = Reading(old.seq + 1, self._with_queue(snapshot))
        else:
            reading = Reading(old.seq + 1, old.snapshot, error,
                              old.stale_since if old.stale_since is not None else self.clock())
        self._reading_changes = changes
        self._publish(reading)

    def _with_queue(self, snap: Optional[NodeSnapshot]) -> Optional[NodeSnapshot]:
        """The allocator's snapshot as readers get it: with the queue, idle
        reservations, recent XIDs and whether XIDs are watched. Always built
        from the allocator's own snapshot, so nothing is added twice."""
        if snap is None:
            return None
        watching = self._watcher is not None and self._watcher.problem is None
        snap = self.triage.decorate(
            self._raw if self._raw is not None else snap, self.clock(),
            xid_watch=self._watcher.source if watching and self._watcher is not None else "",
            xid_problem=None if watching else (self._watcher.problem if self._watcher else self._xid_problem))
        return replace(snap, queue=self.queued())

    def _publish(self, reading: Reading) -> None:
        self._reading = reading
        for sub in self._subscribers:
            if sub.full():
                sub.get_nowait()  # a slow reader gets the latest, never a backlog
            sub.put_nowait(reading)
        asyncio.get_running_loop().create_task(self._notify_fresh())

    async def _notify_fresh(self) -> None:
        async with self._fresh:
            self._fresh.notify_all()

    def _queue_changed(self) -> None:
        """Show a queue change at once, on the last reading, without a new poll."""
        r = self._reading
        self._publish(replace(r, seq=r.seq + 1, snapshot=self._with_queue(r.snapshot)))

    async def current(self, timeout_s: float = 30.0) -> Reading:
        """The latest reading, once it shows every action answered so far: a
        ``status`` right after a ``launch`` must not miss the launch."""
        if self._reading_changes < self._changes or self._reading.snapshot is None:
            self.poll_soon()
            with contextlib.suppress(asyncio.TimeoutError):
                async with self._fresh:
                    await asyncio.wait_for(
                        self._fresh.wait_for(lambda: self._reading_changes >= self._changes
                                             and self._reading.seq > 0), timeout_s)
        return self._reading

    async def subscribe(self) -> AsyncIterator[Reading]:
        """Every new reading, latest first; a reader that falls behind skips to the newest."""
        sub: asyncio.Queue[Reading] = asyncio.Queue(maxsize=1)
        sub.put_nowait(self._reading)
        self._subscribers.add(sub)
        try:
            while True:
                yield await sub.get()
        finally:
            self._subscribers.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def poll_soon(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Poll once per interval (or sooner when an action asks), then try the
        queue. Polls never overlap: the next waits for the last to end. The
        XID watcher starts once a poll has found which probe reads the cards."""
        if self._xid_task is None:
            self._xid_task = asyncio.ensure_future(self._handle_xids())
        while True:
            self._wake.clear()
            await self.poll()
            try:
                if self.watch_xids and self._watcher is None:
                    await self._start_watcher()
                self._start_drain()
            except Exception:  # a broken queue file, say: said by the readings, and the polls go on
                log.warning("could not try the queue", exc_info=True)
            await self._pause()

    async def _pause(self) -> None:
        """Wait for the interval, or less if an action asks for a poll.

        Not ``wait_for``: before Python 3.12 it can swallow a cancellation that
        arrives as the wait ends, and a cancelled ``run`` would then poll on for
        ever while whoever cancelled it waits (a dashboard that never quits)."""
        waiter = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({waiter}, timeout=self.interval)
        finally:
            waiter.cancel()

    # ── XIDs ──────────────────────────────────────────────────────────────────

    def _card_of_pci(self, pci: str) -> Optional[int]:
        snap = self._raw
        return None if snap is None else card_by_pci(snap.probe.cards)(pci)

    async def _start_watcher(self) -> None:
        watcher, why = watcher_for(self.allocator.probe, self._card_of_pci)
        if watcher is None:
            self._xid_problem = why
            return
        self._watcher = watcher
        await watcher.start(self._xids.put_nowait)

    async def _handle_xids(self) -> None:
        """Each event in the order it came; one that cannot be handled is logged
        and the next is handled all the same."""
        while True:
            event = await self._xids.get()
            try:
                await self.on_xid(event)
            except Exception:
                log.warning("could not handle XID event %s", event, exc_info=True)

    def _job_on(self, card: Optional[int]) -> Optional[JobState]:
        snap = self._raw
        if snap is None or card is None or not 0 <= card < len(snap.cards):
            return None
        return snap.cards[card].job

    async def on_xid(self, event: XidEvent) -> Verdict:
        """Drain, log or show one XID event by its verdict."""
        if event.xid is None:  # lost, or "unavailable": no XID, and no reset will reach it
            verdict = Verdict(None, REBOOT, event.text or "GPU is lost", REBOOT_NODE)
        else:
            verdict = self.xid_rules.judge(event.xid, event.recovery_action)
        words = verdict.words()
        if event.card is not None and event.xid is not None:
            self.last_xid[event.card] = event.xid
        job = self._job_on(event.card)
        cards = [] if event.card is None else [event.card]
        where = f"card {event.card}" if event.card is not None else f"PCI device {event.pci}, no card here,"
        fields: dict[str, Any] = {"xid": event.xid, "verdict": verdict.kind, "source": event.source}
        if event.pid is not None:
            fields["pid"] = event.pid
        if event.process is not None:
            fields["process"] = event.process
        if event.text is not None:
            fields["driver_says"] = event.text
        if job is not None:
            fields.update(run_id=job.key, owner=job.owner)
        against = f" while {job.key} of {job.owner or 'nobody recorded'} held it" if job is not None else ""
        what = verdict.meaning if verdict.xid is None else f"XID {verdict.xid}: {verdict.meaning}"
        then = f"; {verdict.action}" if verdict.action else ""
        self._event("xid", f"{where}: {what}{against}{then}", cards=cards, user=job.owner if job else None,
                    **fields)
        if verdict.drains and event.card is not None:
            drain = Drain(card=event.card, reason=words, by="xid", at=event.at, source="xid",
                          xid=event.xid)
            kept, new = await asyncio.to_thread(self.allocator.drains.drain, drain)
            if new:
                self._event("drain", f"card {event.card} drained: {words}", cards=cards, source="xid",
                            xid=event.xid, by="xid")
            self._changes += 1
        elif event.card is not None and verdict.kind != "ignored":
            self.triage.note_xid(event.card, verdict, event.at, job)
            self._queue_changed()
        self.poll_soon()
        return verdict

    # ── who is asking ────────────────────────────────────────────────────────

    def you(self, caller: Caller, snap: Optional[NodeSnapshot]) -> You:
        jobs = snap.jobs if snap is not None else ()
        return You(user=caller.user, uid=caller.uid, operator=caller.operator,
                   cards_held=sum(len(j.gpus) for j in held_by(caller, jobs)),
                   card_limit=self.policy.limits.limit_for(caller, group_names(caller.groups)))

    def _record(self, caller: Caller, action: str, target: str, result: str, message: str,
                *, counted: Optional[str] = None, cards: Iterable[int] = (), **fields: object) -> None:
        if action in ("launch", "reserve"):
            self.launch_results[counted or result.replace(" ", "_")] += 1
        if cards:
            fields["cards"] = sorted(set(cards))
        self._event("action", message, action=action, target=target, result=result,
                    uid=caller.uid, user=caller.user, pid=caller.pid, **fields)

    def _event(self, kind: str, message: str, **fields: Any) -> dict[str, Any]:
        """Write one entry to the node's log and hand it to everyone following it."""
        if self.log is not None:
            entry = self.log.append(kind, message, **fields)
        else:
            entry = {"time": self.clock(), "kind": kind, "message": message, **fields}
        for follower in self._followers:
            if follower.full():
                follower.get_nowait()  # a follower that stopped reading loses the oldest
            follower.put_nowait(entry)
        return entry

    async def _audited(self, caller: Caller, action: str, target: str,
                       work: Awaitable[T], done: Callable[[T], str],
                       cards: Callable[[T], Iterable[int]] = lambda _r: (),
                       asked: Iterable[int] = (), finish: bool = True) -> T:
        """Run ``work``, and log the attempt, allowed or not, before answering.
        ``asked`` are the cards the request names, for an attempt that failed.

        ``finish``: once asked, it is done even if the asker goes away (a drain
        half-written, or signals sent with nobody logging them, would be worse),
        and logged as it ended. Launches say False: one still waiting for the
        lock is dropped when its asker goes (see :meth:`_place`)."""
        task = asyncio.ensure_future(work)
        try:
            result = await (asyncio.shield(task) if finish else task)
        except asyncio.CancelledError:
            if finish:  # logged as it ends, whenever that is
                task.add_done_callback(lambda t: self._ended(caller, action, target, t, done, cards, asked))
            else:
                self._record(caller, action, target, "abandoned",
                             f"{caller.user} went away before {target} was placed")
            raise
        except Exception:
            self._ended(caller, action, target, task, done, cards, asked)
            raise
        self._ended(caller, action, target, task, done, cards, asked)
        return result

    def _ended(self, caller: Caller, action: str, target: str, task: asyncio.Future[T],
               done: Callable[[T], str], cards: Callable[[T], Iterable[int]], asked: Iterable[int]) -> None:
        """Log how an action ended (allowed, refused, failed), and show its effect."""
        if task.cancelled():
            self._record(caller, action, target, "abandoned", f"{target}: stopped before it ended")
            return
        e = task.exception()
        if e is not None:
            how = "no capacity" if isinstance(e, NoCapacity) else "refused" if isinstance(e, NotAllowed) else "failed"
            self._record(caller, action, target, how, str(e) or type(e).__name__, cards=asked)
            return
        outcome = task.result()
        queued = isinstance(outcome, LaunchResult) and outcome.queued is not None
        self._record(caller, action, target, "ok", done(outcome), counted="queued" if queued else "placed",
                     cards=cards(outcome))
        self._changes += 1
        self.poll_soon()

    def audit(self, caller: Caller, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        """The logged actions of the last ``since_s`` seconds (all of them for
        None), newest last: everyone's for an operator, else the caller's own;
        and whether they are everyone's."""
        if self.log is None:
            return [], caller.operator
        since = None if since_s is None else self.clock() - since_s
        entries = collections.deque((e for e in self.log.read(since=since, kinds={"action"})
                                     if caller.operator or e.get("uid") == caller.uid), maxlen=AUDIT_LIMIT)
        return list(entries), caller.operator

    def _visible(self, caller: Caller, entry: dict[str, Any], card: Optional[int]) -> bool:
        """Actions are the caller's own unless they operate (as for audit); what
        happened to the cards is everyone's to see."""
        if entry.get("kind") == "action" and not caller.operator and entry.get("uid") != caller.uid:
            return False
        if card is not None:
            cards = entry.get("cards")
            return isinstance(cards, list) and card in cards
        return True

    def events(self, caller: Caller, since_s: Optional[float] = None,
               card: Optional[int] = None) -> list[dict[str, Any]]:
        """The node's log of the last ``since_s`` seconds (all of it for None),
        oldest first, at most the newest AUDIT_LIMIT: health events, XIDs,
        drains, intruders, ends and expiries, evictions, and the actions the
        caller may see; only those about ``card`` when one is given.

        Reads every kept log file (up to TUNEPLANE_LOG_MAX_MB a file): blocking,
        so the agent calls it in a thread; only the newest are ever held."""
        if self.log is None:
            return []
        since = None if since_s is None else self.clock() - since_s
        return list(collections.deque((e for e in self.log.read(since=since) if self._visible(caller, e, card)),
                                      maxlen=AUDIT_LIMIT))

    async def follow_events(self, caller: Caller, card: Optional[int] = None,
                            since_s: Optional[float] = None) -> AsyncIterator[dict[str, Any]]:
        """What :meth:`events` shows for ``since_s`` (nothing for None), then every
        entry as it is written, none twice and none missed in between. A follower
        that falls FOLLOW_BACKLOG entries behind loses the oldest."""
        follower: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=FOLLOW_BACKLOG)
        self._followers.add(follower)
        try:
            past = await asyncio.to_thread(self.events, caller, since_s, card) if since_s is not None else []
            # Entries written while the past was read are in both: skip them once.
            overlap = {json.dumps(e, sort_keys=True) for e in past[-FOLLOW_BACKLOG:]}
            for entry in past:
                yield entry
            while True:
                entry = await follower.get()
                if overlap and json.dumps(entry, sort_keys=True) in overlap:
                    continue
                overlap = set()
                if self._visible(caller, entry, card):
                    yield entry
        finally:
            self._followers.discard(follower)

    # ── a card's last hour ───────────────────────────────────────────────────

    def card_history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        """The last hour of ``card`` (every card for None), oldest first: every
        poll of the last five minutes, 10-second averages before."""
        now = self.clock()
        if card is not None:
            self._check_card(card)
            return {card: self.history.samples(card, now)}
        return {i: self.history.samples(i, now) for i in sorted(self.history.cards)}

    def _check_card(self, card: int) -> None:
        snap = self._raw
        total = snap.occupancy.total if snap is not None else None
        if card < 0 or (total is not None and card >= total):
            cards = f"0-{total - 1}" if total else "none"
            raise BadRequest(f"card {card} is not a card of this node (its cards: {cards})")

    # ── taking cards out of service ──────────────────────────────────────────

    def _operators_only(self, caller: Caller, what: str) -> None:
        if not caller.operator:
            raise NotAllowed(f"{caller.user} may not {what}: only an operator "
                             f"({self.policy.operators.describe()}) may")

    async def drain_card(self, caller: Caller, card: int, reason: str) -> Drain:
        """Take ``card`` out of service (operators): it is never handed out again
        until undrained; a job already on it keeps running."""
        async def work() -> Drain:
            self._operators_only(caller, f"drain card {card}")
            if not reason.strip():
                raise BadRequest("say why the card is drained (a reason), so the next operator knows")
            if len(reason) > DRAIN_REASON_MOST:
                raise BadRequest(f"a drain reason is at most {DRAIN_REASON_MOST} characters")
            if self._raw is None:
                await self.read_now()  # to know which cards the node has
            self._check_card(card)
            drain = Drain(card=card, reason=reason.strip(), by=caller.user, at=self.clock(), source="operator")
            kept, new = await asyncio.to_thread(self.allocator.drains.drain, drain)
            if not new:
                raise Conflict(f"card {card} is drained already, by {kept.by}: {kept.reason}")
            self._event("drain", f"card {card} drained by {caller.user}: {kept.reason}", cards=[card],
                        user=caller.user, source="operator", by=caller.user)
            return kept

        def done(d: Drain) -> str:
            job = self._job_on(card)
            under = f"; {job.key} keeps running on it" if job is not None else ""
            return f"{caller.user} drained card {card}: {d.reason}{under}"

        return await self._audited(caller, "drain", f"card {card}", work(), done, lambda d: [d.card], [card])

    async def undrain_card(self, caller: Caller, card: int) -> Drain:
        """Put ``card`` back in service (operators); refused while the driver
        still reports a problem with it, which is named."""
        async def work() -> Drain:
            self._operators_only(caller, f"undrain card {card}")
            self._check_card(card)
            drains = await asyncio.to_thread(self.allocator.drains.read)
            if card not in drains:
                raise JobNotFound(f"card {card} is not drained")
            snap = await self.read_now()
            view = snap.cards[card] if card < len(snap.cards) else None
            facts = view.facts if view is not None else None
            if facts is None:
                raise Conflict(f"card {card} stays drained: the driver does not report it "
                               f"({snap.probe.problem or 'it is missing from the reading'}); "
                               f"{drains[card].reason}")
            if facts.health:
                raise Conflict(f"card {card} stays drained: it still reports {'; '.join(facts.health)}. "
                               f"Drained for: {drains[card].reason}")
            removed = await asyncio.to_thread(self.allocator.drains.undrain, card)
            if removed is None:
                raise JobNotFound(f"card {card} is not drained")
            self._event("undrain", f"card {card} is back in service, undrained by {caller.user} "
                        f"(drained by {removed.by}: {removed.reason})", cards=[card], user=caller.user,
                        by=caller.user)
            return removed

        return await self._audited(
            caller, "undrain", f"card {card}", work(),
            lambda d: f"{caller.user} put card {card} back in service (drained by {d.by}: {d.reason})",
            lambda d: [d.card], [card])

    async def evict(self, caller: Caller, card: int, pid: Optional[int] = None, *,
                    kill: bool = False, dry_run: bool = False,
                    started_at: Optional[float] = None) -> EvictReport:
        """SIGTERM the card's external or intruding processes, or the one named
        (operators); SIGKILL what is left after the grace period when ``kill``.
        ``dry_run`` only lists what would be signalled; ``started_at`` names the
        very process (as a dry run listed it) that ``pid`` must still be."""
        async def work() -> EvictReport:
            self._operators_only(caller, f"evict processes from card {card}")
            snap = await self.read_now()
            self._check_card(card)
            view = snap.cards[card]
            chosen = evicting.targets(view, pid, started_at)
            if dry_run:
                done = evicting.listed(view, chosen, kill)
            else:
                done = await asyncio.to_thread(evicting.evict, view, chosen, grace_s=self.evict_grace_s,
                                               kill=kill)
                for e in done:
                    who = e.user or (f"uid {e.uid}" if e.uid is not None else "someone")
                    self._event("evict", f"card {card}: {who}'s pid {e.pid} ({e.command or 'command unknown'}), "
                                f"evicted by {caller.user}: {e.fate}", cards=[card], user=e.user, pid=e.pid,
                                outcome=e.outcome, by=caller.user)
            return EvictReport(card=card, dry_run=dry_run, kill=kill, grace_s=self.evict_grace_s,
                               processes=tuple(done))

        def said(r: EvictReport) -> str:
            what = "would evict" if r.dry_run else "evicted"
            return f"{caller.user} {what} from card {card}: " + "; ".join(
                f"pid {e.pid} of {e.user or e.uid}: {e.fate}" for e in r.processes)

        target = f"card {card}" + (f" pid {pid}" if pid is not None else "")
        return await self._audited(caller, "evict", target, work(), said, lambda r: [r.card], [card])

    # ── launching ────────────────────────────────────────────────────────────

    def _spec(self, caller: Caller, *, run_id: str, cards: int, owner: str,
              command: tuple[str, ...] = (), image: Optional[str] = None, kind: str = "job",
              env: Optional[tuple[tuple[str, str], ...]] = None, cwd: Optional[str] = None,
              slice: Optional[str] = None) -> JobSpec:
        check_run_id(run_id)
        if cards <= 0:
            raise BadRequest(f"a job needs at least 1 card, not {cards}")
        owner = self.policy.owner_for(caller, owner)
        self.policy.check_image(image)
        named = caller if owner == caller.user else _account(owner)
        # Being an operator is not being root: a job an operator places for alice is
        # hers (her uid, so she may stop it and her processes are its own) but runs
        # as the operator. Only root, who could anyway, starts it as her.
        runner = named if named is not None and caller.uid == 0 else caller
        return JobSpec(run_id=run_id, cards=cards, command=command, image=image, kind=kind,
                       owner=owner, uid=named.uid if named is not None else None,
                       env=env, cwd=cwd, run_as=_run_as(runner), slice=slice)

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        run_id = request.run_id or new_run_id()
        spec = self._spec(caller, run_id=run_id, cards=request.cards, owner=request.owner,
                          command=request.command, image=request.image, env=request.env,
                          cwd=request.cwd, slice=request.slice)
        entry = QueueEntry(spec, caller, self.clock())

        async def work() -> LaunchResult:
            # A launch that agrees to wait takes its place behind the ones already
            # waiting, so it cannot pass a larger launch queued before it.
            if not (request.queue and self.queue.entries()):
                try:
                    return LaunchResult(launched=await self._place(entry))
                except (NoCapacity, OverQuota):
                    if not request.queue:
                        raise
            self.queue.add(entry)
            self._queue_changed()
            self.poll_soon()
            return LaunchResult(queued=entry.public())

        def done(result: LaunchResult) -> str:
            if result.queued is not None:
                return f"{run_id} queued for {cards_words(spec.cards)}"
            return _placed(result.launched)

        return await self._audited(caller, "launch", run_id, work(), done,
                                   lambda r: r.launched.gpus if r.launched is not None else (), finish=False)

    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        if not request.duration_s >= 1:
            raise BadRequest(f"a reservation lasts at least 1 second, not {request.duration_s:g}")
        run_id = request.run_id or new_run_id("rsv")
        spec = self._spec(caller, run_id=run_id, cards=request.cards, owner=request.owner,
                          kind="reservation", slice=request.slice)
        spec = replace(spec, expires_at=self.clock() + request.duration_s)
        entry = QueueEntry(spec, caller, self.clock())
        return await self._audited(caller, "reserve", run_id,
                                   self._place(entry, hold_for_s=request.duration_s), _placed,
                                   lambda launched: launched.gpus, finish=False)

    async def _place(self, entry: QueueEntry, hold_for_s: Optional[float] = None) -> Launched:
        """Launch ``entry`` as a cancellable pending launch, listed in the
        snapshot's queue from the next reading on while it waits.

        The allocator runs in a task of its own, awaited through a shield: if
        the asker goes away (or cancels) while the launch still waits for the
        lock, the launch is dropped; once it holds the lock it is finished,
        because a job cancelled half-way would hold cards with nobody to start it.
        """
        spec, caller = entry.spec, entry.caller
        if spec.run_id in self._pending:
            raise BadRequest(f"{spec.run_id} is being launched already; wait for it or cancel it")
        pending = _Pending(entry)
        groups = group_names(caller.groups)

        def admit(jobs: list[JobState]) -> None:
            # Under the allocation lock, on the jobs just read: a quota checked
            # before the lock could be passed by two launches at once.
            taken = next((j for j in jobs if j.live and j.key == spec.run_id), None)
            if taken is not None and taken.owner != spec.owner:
                # a retry gets its own job back; someone else's is not "already placed" for them
                raise Conflict(f"run id {spec.run_id} is taken by {taken.owner or 'another account'}'s "
                               f"{taken.kind}; choose another run id (or leave it out for a new one)")
            if taken is None:
                self.policy.check_quota_ever(caller, spec.cards, groups)
                try:
                    self.policy.check_quota(caller, jobs, spec.cards, groups)
                except NotAllowed as e:
                    raise OverQuota(str(e)) from None
            pending.phase = "placing"

        pending.task = asyncio.ensure_future(
            self.allocator.launch(spec, hold_for_s=hold_for_s, admit=admit))
        self._pending[spec.run_id] = pending
        try:
            return await asyncio.shield(pending.task)
        except asyncio.CancelledError:
            if pending.cancelled_by is not None:
                by = pending.cancelled_by
                raise Cancelled(f"{spec.run_id} was cancelled by {by.user} while it waited for "
                                "the allocation lock; nothing was placed") from None
            if pending.phase == "waiting":
                pending.task.cancel()
            raise
        finally:
            if self._pending.get(spec.run_id) is pending:
                del self._pending[spec.run_id]

    def queued(self) -> tuple[QueuedLaunch, ...]:
        """Launches in flight first (in the order they began), then the queue in
        its order. A launch is shown waiting only while the allocation lock really
        keeps it waiting, and says for what: a queued launch being tried, as
        each round tries it, keeps its place and its "queued" meanwhile."""
        waiting = self.allocator.lock.waiting
        entries = self.queue.entries()
        in_queue = {e.spec.run_id for e in entries}

        def trying(p: _Pending, otherwise: QueuedLaunch) -> QueuedLaunch:
            if p.phase == "waiting" and waiting:
                return p.entry.public("waiting", waiting)
            if p.phase == "placing":
                return p.entry.public("placing", "placing its job")
            return otherwise

        shown = [trying(p, p.entry.public("placing", "placing its job"))
                 for run_id, p in self._pending.items() if run_id not in in_queue]
        for n, entry in enumerate(entries):
            place = entry.public("queued", f"{cards_words(entry.spec.cards)}, #{n + 1} in the queue")
            pending = self._pending.get(entry.spec.run_id)
            shown.append(place if pending is None else trying(pending, place))
        return tuple(shown)

    def _start_drain(self) -> None:
        if self._draining is None or self._draining.done():
            if self.queue.entries():
                self._draining = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        """One round over the queue, in order. The first launch that does not fit
        ends the round (no starving a large job with small ones), and so does a
        problem of the node's that passes (the engine restarting, a broken
        drains file, the lock not had): nobody's launch is dropped for it. One
        over its owner's quota waits without holding back anyone else's; one
        that fails for its own reasons leaves the queue, said in the node's log."""
        for entry in self.queue.entries():
            spec = entry.spec
            if spec.run_id in self._pending:
                continue
            try:
                launched = await self._place(entry)
            except (NoCapacity, LockWaitTimeout, RuntimeUnavailable) as e:
                if not isinstance(e, NoCapacity):
                    log.warning("the queue waits: %s", printable(str(e)))
                return
            except OverQuota:
                continue
            except TpnodeError as e:
                if self.queue.remove(spec.run_id) is not None:
                    self._record(entry.caller, "launch", spec.run_id, "dropped",
                                 f"queued launch {spec.run_id} left the queue: {e}")
                continue
            if self.queue.remove(spec.run_id) is not None:
                self._record(entry.caller, "launch", spec.run_id, "ok",
                             f"queued launch: {_placed(launched)}", counted="placed")
            self._changes += 1
            self.poll_soon()

    async def cancel(self, caller: Caller, run_id: str) -> QueuedLaunch:
        """Drop a queued launch, or one still waiting for the lock; the owner or an operator."""
        async def work() -> QueuedLaunch:
            pending = self._pending.get(run_id)
            queued = next((e for e in self.queue.entries() if e.spec.run_id == run_id), None)
            entry = pending.entry if pending is not None else queued
            if entry is None:
                raise JobNotFound(f"no launch {run_id} is queued or waiting")
            self.policy.check_cancel(caller, run_id, entry.spec.owner, entry.spec.uid)
            if pending is not None:
                if pending.phase != "waiting":
                    raise TpnodeError(f"{run_id} already holds the allocation lock and is placing "
                                      f"its job: too late to cancel; stop it once it runs "
                                      f"(tpnode-tui stop {run_id})")
                pending.cancelled_by = caller
                if pending.task is not None:
                    pending.task.cancel()
            self.queue.remove(run_id)
            self._queue_changed()
            return entry.public("cancelled")

        return await self._audited(caller, "cancel", run_id, work(),
                                   lambda q: f"{q.run_id} of {q.owner} was cancelled")

    # ── changing and ending jobs ─────────────────────────────────────────────

    async def _job(self, run_id: str, *, live: Optional[bool] = None) -> JobState:
        for job in await self.allocator.runtime.ps():
            if job.key == run_id and (live is None or job.live == live):
                return job
        state = {True: "running ", False: "exited ", None: ""}[live]
        raise JobNotFound(f"no {state}platform job has run id {run_id}")

    async def stop(self, caller: Caller, run_id: str) -> JobState:
        async def work() -> JobState:
            job = await self._job(run_id, live=True)
            self.policy.check_may(caller, job, "stop", card=min(job.gpus, default=None))
            return await self.allocator.stop(run_id)

        return await self._audited(caller, "stop", run_id, work(),
                                   lambda j: f"{caller.user} stopped {j.key} ({cards_words(j.gpus)})",
                                   lambda j: j.gpus)

    async def extend(self, caller: Caller, run_id: str, duration_s: float) -> JobState:
        async def work() -> JobState:
            if not duration_s >= 1:
                raise BadRequest(f"extend by at least 1 second, not {duration_s:g}")
            job = await self._job(run_id, live=True)
            self.policy.check_may(caller, job, "extend", card=min(job.gpus, default=None))
            return await self.allocator.extend(run_id, duration_s)

        def done(job: JobState) -> str:
            left = format_duration((job.expires_at or 0) - self.clock())
            return f"{caller.user} extended {job.key} by {format_duration(duration_s)}; {left} left"

        return await self._audited(caller, "extend", run_id, work(), done, lambda j: j.gpus)

    async def reclaim(self, caller: Caller, run_id: Optional[str]) -> list[JobState]:
        """Remove exited jobs' records: one run id (its owner or an operator), or
        all the caller may remove (an operator: every exited job)."""
        async def work() -> list[JobState]:
            if run_id is not None:
                jobs = [j for j in await self.allocator.runtime.ps() if j.key == run_id]
                for job in jobs:
                    self.policy.check_may(caller, job, "reclaim")
                return await self.allocator.reclaim(run_id)
            removed: list[JobState] = []
            for job in await self.allocator.runtime.ps():
                if not job.live and self.policy.may(caller, job):
                    with contextlib.suppress(JobNotFound):
                        removed += await self.allocator.release(job.key)
            return removed

        def done(jobs: list[JobState]) -> str:
            return f"{caller.user} reclaimed " + (", ".join(j.key for j in jobs) or "nothing")

        return await self._audited(caller, "reclaim", run_id or "*", work(), done,
                                   lambda jobs: [i for j in jobs for i in j.gpus])

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        if self._xid_task is not None:
            self._xid_task.cancel()
            with contextlib.suppress(BaseException):
                await self._xid_task
        for pending in list(self._pending.values()):
            if pending.task is not None and pending.phase == "waiting":
                pending.task.cancel()
        if self._draining is not None:
            self._draining.cancel()
            with contextlib.suppress(BaseException):
                await self._draining


def triage_options(settings: Settings) -> dict[str, Any]:
    """The service's triage settings, as the agent and an in-process node both give them."""
    return {
        "xid_rules": XidRules.of(settings.xid_drain, settings.xid_ignore),
        "idle_after_s": settings.idle_reservation_min * 60.0,
        "evict_grace_s": settings.evict_grace_s,
    }


def _placed(launched: Optional[Launched]) -> str:
    if launched is None:
        return "nothing placed"
    job = launched.job
    if launched.existing:
        return f"{job.key} already held {launched.holding}"
    return f"{job.key} of {job.owner or 'nobody'} got {launched.holding}"


def _account(user: str) -> Optional[Caller]:
    """The account an operator named as a job's owner; None when the name has
    no account here (the job then has no owner uid)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return Caller(uid=entry.pw_uid, gid=entry.pw_gid, user=user,
                  groups=account_groups(entry.pw_uid, entry.pw_gid))


def _run_as(caller: Caller) -> Optional[RunAs]:
    """The account a process job must switch to: none when it is this process's own."""
    if caller.uid == os.getuid():
        return None
    try:
        home = pwd.getpwuid(caller.uid).pw_dir
    except KeyError:
        home = "/"
    return RunAs(uid=caller.uid, gid=caller.gid, groups=caller.groups, user=caller.user, home=home)
