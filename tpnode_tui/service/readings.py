"""One poll for every reader: the latest :class:`~tpnode_tui.port.types.readings.Reading`, its subscribers,
the cards' history.

However many dashboards watch, the node is read once per interval, a poll
under way is joined, and each reading reaches every subscriber through a
one-slot queue, so a slow reader gets the newest and never a backlog. Each
snapshot is compared with the last (triage) before readers get it, then
handed to the usage ledger in order, off the loop; a reading the ledger has
written is :attr:`Readings.recorded`. See docs/architecture.md, sections 'A
shared node' and 'The usage ledger and idle cards'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, AsyncIterator, Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.model.errors import BadRequest, TpnodeError
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.port.types.readings import Reading
from tpnode_tui.service.changes import Changes
from tpnode_tui.triage.compare import Triage
from tpnode_tui.triage.history import History

if TYPE_CHECKING:
    from tpnode_tui.state.ledger import UsageLedger

log = logging.getLogger(__name__)


class Readings:
    def __init__(
        self,
        allocator: GpuAllocator,
        triage: Triage,
        history: History,
        changes: Changes,
        clock: Callable[[], float],
        dress: Callable[[NodeSnapshot], NodeSnapshot],
        ledger: Optional[UsageLedger] = None,
    ) -> None:
        """``dress`` makes the allocator's snapshot what readers get (the queue,
        triage's marks, whether XIDs are watched); ``ledger``: the agent's usage
        ledger, written from every reading (an in-process node keeps none)."""
        self.allocator = allocator
        self.triage = triage
        self.history = history
        self.changes = changes
        self.clock = clock
        self.dress = dress
        self.ledger = ledger
        #: the allocator's last snapshot, before the service added what it knows
        self.raw: Optional[NodeSnapshot] = None
        #: the allocator's last snapshot whose holds and exited jobs the usage
        #: ledger has all written (None: none yet, or the ledger could not write)
        self.recorded: Optional[NodeSnapshot] = None
        self._reading = Reading(seq=0, snapshot=None)
        self._poll_lock = asyncio.Lock()
        self._subscribers: set[asyncio.Queue[Reading]] = set()
        #: the count of changes the latest reading's poll began with
        self._reading_changes = 0
        #: whether triage has read back what the node's log said before this service started
        self._recalled = False
        self._fresh = asyncio.Condition()

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
        was raised: a one-shot ``status`` reports it and exits by its kind.

        A poll under way is waited for and its reading taken only when it began
        after every action answered so far: one begun before a launch was
        answered would show its card free, and a check would go ahead on it."""
        answered = self.changes.count
        if self._poll_lock.locked():
            async with self._poll_lock:
                if (
                    self._reading.error is None
                    and self._reading.snapshot is not None
                    and self._reading_changes >= answered
                ):
                    return self._reading.snapshot
        async with self._poll_lock:
            changes = self.changes.count
            try:
                snap = await self.allocator.snapshot()
            except Exception as e:
                if not isinstance(e, TpnodeError):  # a poll must never take the service down
                    log.warning("poll failed", exc_info=True)
                self._set_reading(error=str(e) or type(e).__name__, changes=changes)
                raise
            self.raw = snap
            now = self.clock()
            try:
                if not self._recalled:
                    self._recalled = True  # once, whatever becomes of it: a log that cannot be read is no news
                    await asyncio.to_thread(self.triage.recall_logged)
                self.triage.observe(snap, now)
            except Exception:  # what is learnt from a reading must never lose the reading
                log.warning("could not compare the reading with the last one", exc_info=True)
            try:
                self._set_reading(snapshot=snap, changes=changes)
            except TpnodeError as e:  # the queue's file cannot be read: the reading says so, and is stale
                self._set_reading(error=str(e), changes=changes)
                raise
            finally:
                await self._record(snap, now)
            assert self._reading.snapshot is not None
            return self._reading.snapshot

    async def _record(self, snap: NodeSnapshot, now: float) -> None:
        """Hand the reading to the usage ledger, at the service's time (a test's, where
        one is injected). It never stops a poll: the ledger says why it cannot write."""
        if self.ledger is None:
            return
        written = False
        try:
            written = await asyncio.to_thread(self.ledger.update, replace(snap, taken_at=now))
        except Exception:
            log.warning("could not add the reading to the usage ledger", exc_info=True)
        self.recorded = snap if written else None

    def _set_reading(
        self, *, snapshot: Optional[NodeSnapshot] = None, error: Optional[str] = None, changes: int
    ) -> None:
        old = self._reading
        if error is None:
            reading = Reading(old.seq + 1, self._dressed(snapshot))
        else:
            reading = Reading(
                old.seq + 1, old.snapshot, error, old.stale_since if old.stale_since is not None else self.clock()
            )
        self._reading_changes = changes
        self._publish(reading)

    def _dressed(self, snap: Optional[NodeSnapshot]) -> Optional[NodeSnapshot]:
        """The snapshot as readers get it, always built from the allocator's own
        snapshot, so nothing is added twice."""
        if snap is None:
            return None
        return self.dress(self.raw if self.raw is not None else snap)

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

    def republish(self) -> None:
        """Show a queue change (or a card's new XID warning) at once, on the
        last reading, without a new poll."""
        r = self._reading
        self._publish(replace(r, seq=r.seq + 1, snapshot=self._dressed(r.snapshot)))

    async def current(self, timeout_s: float = 30.0) -> Reading:
        """The latest reading, once it shows every action answered so far: a
        ``status`` right after a ``launch`` must not miss the launch."""
        if self._reading_changes < self.changes.count or self._reading.snapshot is None:
            self.changes.poll_soon()
            with contextlib.suppress(asyncio.TimeoutError):
                async with self._fresh:
                    await asyncio.wait_for(
                        self._fresh.wait_for(
                            lambda: self._reading_changes >= self.changes.count and self._reading.seq > 0
                        ),
                        timeout_s,
                    )
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

    # ── the cards as last read ───────────────────────────────────────────────

    def job_on(self, card: Optional[int]) -> Optional[JobState]:
        snap = self.raw
        if snap is None or card is None or not 0 <= card < len(snap.cards):
            return None
        return snap.cards[card].job

    def check_card(self, card: int) -> None:
        snap = self.raw
        total = snap.occupancy.total if snap is not None else None
        if card < 0 or (total is not None and card >= total):
            cards = f"0-{total - 1}" if total else "none"
            raise BadRequest(f"card {card} is not a card of this node (its cards: {cards})")

    def card_history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        """The last hour of ``card`` (every card for None), oldest first: every
        poll of the last five minutes, 10-second averages before."""
        now = self.clock()
        if card is not None:
            self.check_card(card)
            return {card: self.history.samples(card, now)}
        return {i: self.history.samples(i, now) for i in sorted(self.history.cards)}
