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
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import grp
import logging
import os
import pwd
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, TypeVar

from .allocator import GpuAllocator, new_run_id
from .identity import Caller, account_groups
from .launchqueue import LaunchQueue, MemoryQueue, QueueEntry
from .model import (
    BadRequest,
    JobNotFound,
    JobSpec,
    JobState,
    Launched,
    NoCapacity,
    NodeSnapshot,
    NotAllowed,
    QueuedLaunch,
    RunAs,
    TpnodeError,
    check_run_id,
)
from .nodelog import NodeLog
from .policy import Policy, held_by
from .render import cards_words, format_duration

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how many log entries one audit answer holds at most (the newest)
AUDIT_LIMIT = 10_000


class OverQuota(NotAllowed):
    """The owner holds as many cards as they may: a queued launch waits for their own jobs."""


class Cancelled(TpnodeError):
    """A launch cancelled while it waited for its turn."""


@dataclass(frozen=True)
class LaunchRequest:
    """A launch as a client asks for it; the service fills in who and how."""

    cards: int
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    run_id: Optional[str] = None
    #: another owner than the caller: operators only
    owner: str = ""
    #: the caller's environment and working directory, for a process job
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: wait in the queue when the node has no room now, instead of refusing
    queue: bool = False


@dataclass(frozen=True)
class ReserveRequest:
    cards: int
    duration_s: float
    run_id: Optional[str] = None
    owner: str = ""


@dataclass(frozen=True)
class LaunchResult:
    """What a launch got: cards now, or a place in the queue."""

    launched: Optional[Launched] = None
    queued: Optional[QueuedLaunch] = None


@dataclass(frozen=True)
class Reading:
    """What the service last learned of the node, as it is handed to every reader."""

    seq: int
    #: the last good snapshot (None until one poll succeeded)
    snapshot: Optional[NodeSnapshot]
    #: why the latest poll failed; None when it succeeded
    error: Optional[str] = None
    #: when polls started failing (None while they succeed)
    stale_since: Optional[float] = None


@dataclass(frozen=True)
class You:
    """The caller as the node sees them: for the header and ``status --json``."""

    user: str
    uid: int
    operator: bool
    cards_held: int
    card_limit: Optional[int]


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
                 interval: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self.allocator = allocator
        self.policy = policy
        self.queue: LaunchQueue = queue if queue is not None else MemoryQueue()
        self.log = node_log
        self.interval = interval
        self.clock = clock
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
            self._set_reading(snapshot=snap, changes=changes)
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
        return None if snap is None else replace(snap, queue=self.queued())

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
        queue. Polls never overlap: the next waits for the last to end."""
        while True:
            self._wake.clear()
            await self.poll()
            self._start_drain()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)

    # ── who is asking ────────────────────────────────────────────────────────

    def you(self, caller: Caller, snap: Optional[NodeSnapshot]) -> You:
        jobs = snap.jobs if snap is not None else ()
        return You(user=caller.user, uid=caller.uid, operator=caller.operator,
                   cards_held=sum(len(j.gpus) for j in held_by(caller, jobs)),
                   card_limit=self.policy.limits.limit_for(caller, group_names(caller.groups)))

    def _record(self, caller: Caller, action: str, target: str, result: str, message: str,
                *, counted: Optional[str] = None, **fields: object) -> None:
        if action in ("launch", "reserve"):
            self.launch_results[counted or result.replace(" ", "_")] += 1
        if self.log is not None:
            self.log.append("action", message, action=action, target=target, result=result,
                            uid=caller.uid, user=caller.user, pid=caller.pid, **fields)

    async def _audited(self, caller: Caller, action: str, target: str,
                       work: Awaitable[T], done: Callable[[T], str]) -> T:
        """Run ``work``, and log the attempt, allowed or not, before answering."""
        try:
            result = await work
        except NoCapacity as e:
            self._record(caller, action, target, "no capacity", str(e))
            raise
        except NotAllowed as e:
            self._record(caller, action, target, "refused", str(e))
            raise
        except TpnodeError as e:
            self._record(caller, action, target, "failed", str(e))
            raise
        except asyncio.CancelledError:
            self._record(caller, action, target, "abandoned", f"{caller.user} went away before {target} was placed")
            raise
        queued = isinstance(result, LaunchResult) and result.queued is not None
        self._record(caller, action, target, "ok", done(result), counted="queued" if queued else "placed")
        self._changes += 1
        self.poll_soon()
        return result

    def audit(self, caller: Caller, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        """The logged actions of the last ``since_s`` seconds (all of them for
        None), newest last: everyone's for an operator, else the caller's own;
        and whether they are everyone's."""
        if self.log is None:
            return [], caller.operator
        since = None if since_s is None else self.clock() - since_s
        entries = [e for e in self.log.read(since=since, kinds={"action"})
                   if caller.operator or e.get("uid") == caller.uid]
        return entries[-AUDIT_LIMIT:], caller.operator

    # ── launching ────────────────────────────────────────────────────────────

    def _spec(self, caller: Caller, *, run_id: str, cards: int, owner: str,
              command: tuple[str, ...] = (), image: Optional[str] = None, kind: str = "job",
              env: Optional[tuple[tuple[str, str], ...]] = None, cwd: Optional[str] = None) -> JobSpec:
        check_run_id(run_id)
        if cards <= 0:
            raise BadRequest(f"a job needs at least 1 card, not {cards}")
        owner = self.policy.owner_for(caller, owner)
        self.policy.check_image(image)
        account = caller if owner == caller.user else _account(owner) or caller
        return JobSpec(run_id=run_id, cards=cards, command=command, image=image, kind=kind,
                       owner=owner, uid=account.uid if account.user == owner else None,
                       env=env, cwd=cwd, run_as=_run_as(account))

    async def launch(self, caller: Caller, request: LaunchRequest) -> LaunchResult:
        run_id = request.run_id or new_run_id()
        spec = self._spec(caller, run_id=run_id, cards=request.cards, owner=request.owner,
                          command=request.command, image=request.image, env=request.env,
                          cwd=request.cwd)
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

        return await self._audited(caller, "launch", run_id, work(), done)

    async def reserve(self, caller: Caller, request: ReserveRequest) -> Launched:
        if not request.duration_s >= 1:
            raise BadRequest(f"a reservation lasts at least 1 second, not {request.duration_s:g}")
        run_id = request.run_id or new_run_id("rsv")
        spec = self._spec(caller, run_id=run_id, cards=request.cards, owner=request.owner,
                          kind="reservation")
        spec = replace(spec, expires_at=self.clock() + request.duration_s)
        entry = QueueEntry(spec, caller, self.clock())
        return await self._audited(caller, "reserve", run_id,
                                   self._place(entry, hold_for_s=request.duration_s), _placed)

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
            if not any(j.live and j.key == spec.run_id for j in jobs):
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
        """Launches in flight first (in the order they began), then the queue."""
        waiting = self.allocator.lock.waiting
        shown = [p.entry.public(p.phase, waiting if p.phase == "waiting" else "placing its job")
                 for p in self._pending.values()]
        for n, entry in enumerate(e for e in self.queue.entries() if e.spec.run_id not in self._pending):
            shown.append(entry.public("queued", f"{cards_words(entry.spec.cards)}, #{n + 1} in the queue"))
        return tuple(shown)

    def _start_drain(self) -> None:
        if self._draining is None or self._draining.done():
            if self.queue.entries():
                self._draining = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        """One round over the queue, in order. The first launch that does not fit
        ends the round (no starving a large job with small ones); one over its
        owner's quota waits without holding back anyone else's; one that fails
        otherwise leaves the queue with its reason in the node's log."""
        for entry in self.queue.entries():
            spec = entry.spec
            if spec.run_id in self._pending:
                continue
            try:
                launched = await self._place(entry)
            except NoCapacity:
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
                                   lambda j: f"{caller.user} stopped {j.key} ({cards_words(j.gpus)})")

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

        return await self._audited(caller, "extend", run_id, work(), done)

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

        return await self._audited(caller, "reclaim", run_id or "*", work(), done)

    async def close(self) -> None:
        for pending in list(self._pending.values()):
            if pending.task is not None and pending.phase == "waiting":
                pending.task.cancel()
        if self._draining is not None:
            self._draining.cancel()
            with contextlib.suppress(BaseException):
                await self._draining


def _placed(launched: Optional[Launched]) -> str:
    if launched is None:
        return "nothing placed"
    job = launched.job
    if launched.existing:
        return f"{job.key} already held {cards_words(launched.gpus)}"
    return f"{job.key} of {job.owner or 'nobody'} got {cards_words(launched.gpus)}"


def _account(user: str) -> Optional[Caller]:
    """The account an operator named as a job's owner, so the job runs as them;
    None when the name has no account here (the job then runs as the operator)."""
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
