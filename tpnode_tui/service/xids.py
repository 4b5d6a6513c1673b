"""XIDs as the node's service meets them: the watcher that fits the probe, and what each event does.

The watcher runs beside the polls (an agent and an in-process dashboard both
have it) and starts once a poll has found which probe reads the cards. Its
events are queued to the event loop and handled in order; each one's verdict
drains the card through the drain file (an XID that says the card must be
reset), or is logged and shown on the card as a warning for a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.xid import REBOOT, REBOOT_NODE, Verdict, XidRules
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import Drain
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.readings import Readings
from tpnode_tui.triage.compare import Triage

if TYPE_CHECKING:
    from tpnode_tui.triage.watch import XidEvent, XidWatcher

log = logging.getLogger(__name__)


class Xids:
    def __init__(
        self,
        allocator: GpuAllocator,
        rules: XidRules,
        *,
        watch: bool,
        triage: Triage,
        readings: Readings,
        journal: Journal,
        changes: Changes,
        boot: Callable[[], Optional[str]],
    ) -> None:
        """``boot``: this boot's id (None when it cannot be read), kept on each drain:
        a drain for an XID whose cure is a reboot lasts until it changes."""
        self.allocator = allocator
        self.boot = boot
        self.rules = rules
        self.watch = watch
        self.triage = triage
        self.readings = readings
        self.journal = journal
        self.changes = changes
        self._watcher: Optional[XidWatcher] = None
        self._problem = "XID events are watched only while the node is served (the agent, or an open dashboard)"
        self._events: asyncio.Queue[XidEvent] = asyncio.Queue()
        self._handler: Optional[asyncio.Task[None]] = None
        #: each card's last XID since the service started (for /metrics, as dcgm-exporter gives it)
        self.last_xid: dict[int, int] = {}
        #: and when it came: a check of the card looks for one since its drain
        self.last_xid_at: dict[int, float] = {}

    @property
    def watching(self) -> tuple[str, Optional[str]]:
        """What watches XIDs (empty while nothing does), and why nothing does."""
        w = self._watcher
        if w is not None and w.problem is None:
            return w.source, None
        return "", w.problem if w is not None else self._problem

    def listen(self) -> None:
        """Handle events from now on (the watcher starts later, after a poll)."""
        if self._handler is None:
            self._handler = asyncio.ensure_future(self._handle())

    async def start_watcher(self) -> None:
        """Start the watcher that fits the probe; until one does, each poll tries
        again and the reason none fits is what the readings say."""
        if not self.watch or self._watcher is not None:
            return
        # The watchers (and every probe they fit) are imported only by a
        # service that polls: one read and closed (a command) never watches.
        from tpnode_tui.triage.watch import watcher_for

        watcher, why = await asyncio.to_thread(watcher_for, self.allocator.probe, self._card_of_pci, self._logged)
        if watcher is None:
            self._problem = why
            return
        self._watcher = watcher
        await watcher.start(self._events.put_nowait)

    def _logged(self) -> list[tuple[int, str]]:
        """The (card, event id) of the XIDs the node's log names (blocking)."""
        return [
            (e["cards"][0], e["event"])
            for e in self.journal.logged(LOGGED) or ()
            if isinstance(e.get("event"), str) and isinstance(e.get("cards"), list) and len(e["cards"]) == 1
        ]

    def _card_of_pci(self, pci: str) -> Optional[int]:
        from tpnode_tui.triage.watch import card_by_pci

        snap = self.readings.raw
        return None if snap is None else card_by_pci(snap.probe.cards)(pci)

    async def _handle(self) -> None:
        """Each event in the order it came; one that cannot be handled is logged
        and the next is handled all the same."""
        while True:
            event = await self._events.get()
            try:
                await self.on_xid(event)
            except Exception:
                log.warning("could not handle XID event %s", event, exc_info=True)

    async def on_xid(self, event: XidEvent) -> Verdict:
        """Drain, log or show one XID event by its verdict."""
        if event.xid is None:  # lost, or "unavailable": no XID, and no reset will reach it
            verdict = Verdict(None, REBOOT, event.text or "GPU is lost", REBOOT_NODE)
        else:
            verdict = self.rules.judge(event.xid, event.recovery_action)
        if event.card is not None and event.xid is not None:
            self.last_xid[event.card] = event.xid
            self.last_xid_at[event.card] = event.at
        job = self.readings.job_on(event.card)
        if verdict.drains and event.card is not None:
            # one change of the card, one entry: its drain, saying which XID did it; an XID on
            # a card drained already is news of its own
            try:
                drained = await self._drain(event, event.card, verdict, job)
            except BaseException:
                self._log(event, verdict, job)
                raise
            if not drained:
                self._log(event, verdict, job)
            self.changes.acted()
            return verdict
        if event.card is not None and event.xid is not None and verdict.kind != "ignored":
            # on a drained card it is kept with the drain: a check looks for one since
            await asyncio.to_thread(self.allocator.drains.note_xid, event.card, event.xid, event.at)
        self._log(event, verdict, job)
        if event.card is not None and verdict.kind != "ignored":
            self.triage.note_xid(event.card, verdict, event.at, job)
            self.readings.republish()
        self.changes.poll_soon()
        return verdict

    def _log(self, event: XidEvent, verdict: Verdict, job: Optional[JobState]) -> None:
        """The event in the node's log: where, what it means, whose job held the card, what to do."""
        where = f"card {event.card}" if event.card is not None else f"PCI device {event.pci}, no card here,"
        self.journal.event(
            "xid",
            f"{where}: {_said(verdict, job)}",
            cards=[] if event.card is None else [event.card],
            user=job.owner if job else None,
            **_fields(event, verdict, job),
        )

    async def _drain(self, event: XidEvent, card: int, verdict: Verdict, job: Optional[JobState]) -> bool:
        """Take the card out of service for the XID, and log it with the XID when
        it was not already; whether it was not."""
        drain = Drain(
            card=card,
            reason=verdict.words(),
            by="xid",
            at=event.at,
            source="xid",
            xid=event.xid,
            boot=self.boot(),
            reboot=verdict.kind == REBOOT,
        )
        _kept, new = await asyncio.to_thread(self.allocator.drains.drain, drain)
        if not new and event.xid is not None:  # drained already: kept with that drain
            await asyncio.to_thread(self.allocator.drains.note_xid, card, event.xid, event.at)
        if new:
            self.journal.event(
                "drain",
                f"card {card} drained: {_said(verdict, job)}",
                cards=[card],
                user=job.owner if job else None,
                **(_fields(event, verdict, job) | {"source": "xid", "by": "xid", "watcher": event.source}),
            )
        return new

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        if self._handler is not None:
            self._handler.cancel()
            with contextlib.suppress(BaseException):
                await self._handler


#: the kinds of the node's log an XID is logged as: its own, or its card's drain
LOGGED = frozenset({"xid", "drain"})


def _said(verdict: Verdict, job: Optional[JobState]) -> str:
    """What the XID means, whose job held the card, and what to do."""
    against = f" while {job.key} of {job.owner or 'nobody recorded'} held it" if job is not None else ""
    what = verdict.meaning if verdict.xid is None else f"XID {verdict.xid}: {verdict.meaning}"
    then = f"; {verdict.action}" if verdict.action else ""
    return f"{what}{against}{then}"


def _fields(event: XidEvent, verdict: Verdict, job: Optional[JobState]) -> dict[str, Any]:
    """What the log keeps of an XID event besides its words."""
    fields: dict[str, Any] = {"xid": event.xid, "verdict": verdict.kind, "source": event.source}
    if event.pid is not None:
        fields["pid"] = event.pid
    if event.process is not None:
        fields["process"] = event.process
    if event.text is not None:
        fields["driver_says"] = event.text
    if job is not None:
        fields.update(run_id=job.key, owner=job.owner)
    if event.id is not None:
        fields["event"] = event.id
    return fields
