"""What the service learns by comparing one reading with the ones before it.

A snapshot says what is true now; some things a person needs are about
change: an intruder who has just appeared (or gone), a card that has just
started reporting a fault, a reservation whose hour ran out, one whose owner
has not touched its cards for 45 minutes, an XID a minute ago that killed a
job and left no trace on the card, the last hour of a card's utilisation.
The service keeps that here, in memory, and only for as long as it runs:
none of it decides who holds a card (the runtime, the driver and the drain
file do), so none of it needs to survive a restart.

Each change is written to the node's log through ``record(kind, message,
cards=..., user=..., **fields)``; each reading given out is ``decorate``-d
with what the readers should see of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from tpnode_tui.core.display import intruder_words
from tpnode_tui.core.xid import APPLICATION, Verdict
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import INTRUDER, holder_on_card, holder_on_slice
from tpnode_tui.text.render import clock_time
from tpnode_tui.triage.history import History

Record = Callable[..., Any]

#: how long an XID that drained nothing stays on its card's warning
XID_SHOWN_S = 15 * 60
#: the newest XIDs a card's warning names; a storm of them is counted, not listed
XIDS_NAMED = 3
#: at most this many recent XIDs are kept in all, whatever the rate they come at
XIDS_KEPT = 1000


@dataclass(frozen=True)
class _Seen:
    card: int
    pid: int
    words: str
    user: Optional[str]


@dataclass(frozen=True)
class _RecentXid:
    card: int
    at: float
    words: str


class Triage:
    def __init__(
        self, *, idle_after_s: float, mem_busy_mib: int, history: History, record: Record, started_at: float
    ) -> None:
        self.idle_after_s = idle_after_s
        self.mem_busy_mib = mem_busy_mib
        self.history = history
        self.record = record
        self.started_at = started_at
        #: live reservation run id -> when its owner last used one of its cards
        self.last_used: dict[str, float] = {}
        #: (card, pid, process start) -> the intruder as first seen
        self._intruders: dict[tuple[int, int, Optional[float]], _Seen] = {}
        #: card -> the health problems it reported at the last reading (None before the first)
        self._health: Optional[dict[int, tuple[str, ...]]] = None
        #: live job key -> the job, at the last reading (None before the first)
        self._live: Optional[dict[str, JobState]] = None
        self._xids: list[_RecentXid] = []

    # ── each fresh reading ──────────────────────────────────────────────────

    def observe(self, snap: NodeSnapshot, now: float) -> None:
        self.history.record(now, [(c.index, c.facts) for c in snap.cards])
        self._track_idle(snap, now)
        self._track_intruders(snap)
        self._track_health(snap)
        self._track_jobs(snap, now)

    def _track_idle(self, snap: NodeSnapshot, now: float) -> None:
        cards = {c.index: c for c in snap.cards}
        live = {j.key: j for j in snap.jobs if j.live and j.kind == "reservation"}
        for key in list(self.last_used):
            if key not in live:
                del self.last_used[key]
        slices = {(c.index, s.facts.uuid): s for c in snap.cards for s in c.slices if s.facts.uuid}
        for key, job in live.items():
            busy = self.mem_busy_mib
            if any(holder_on_card(cards[i], busy) is True for i in job.gpus if i in cards) or any(
                holder_on_slice(slices[(ref.card, ref.uuid)], busy) is True
                for ref in job.slices
                if (ref.card, ref.uuid) in slices
            ):
                self.last_used[key] = now
            elif key not in self.last_used:
                # Unused when first seen: idle since it began, or since this service
                # did (what happened before that is not known here).
                self.last_used[key] = max(job.started_at or now, self.started_at)

    def idle(self, now: float) -> dict[str, float]:
        return {k: t for k, t in self.last_used.items() if now - t >= self.idle_after_s}

    def _track_intruders(self, snap: NodeSnapshot) -> None:
        now_seen: dict[tuple[int, int, Optional[float]], _Seen] = {}
        for card in snap.cards:
            on_slice = {h.pid: s for s in card.slices for h in s.holders}
            for h in card.holders:
                if h.belongs == INTRUDER:
                    s = on_slice.get(h.pid)
                    if s is not None:
                        words = intruder_words(h, card.index, s.job, s.run_id or "", on=s.facts)
                    else:
                        words = intruder_words(h, card.index, card.job, card.run_id or "")
                    now_seen[(card.index, h.pid, h.started_at)] = _Seen(card.index, h.pid, words, h.user)
        for key, seen in now_seen.items():
            if key not in self._intruders:
                self.record("intruder", seen.words, cards=[seen.card], user=seen.user, pid=seen.pid, state="seen")
        for key, seen in self._intruders.items():
            if key not in now_seen:
                who = seen.user or "someone"
                self.record(
                    "intruder",
                    f"{who}'s pid {seen.pid} is no longer on card {seen.card}",
                    cards=[seen.card],
                    user=seen.user,
                    pid=seen.pid,
                    state="gone",
                )
        self._intruders = now_seen

    def _track_health(self, snap: NodeSnapshot) -> None:
        health = {
            c.index: (c.facts.health if c.facts is not None else ("not reported by the driver",)) for c in snap.cards
        }
        if self._health is not None:
            for index, problems in health.items():
                before = self._health.get(index, ())
                for problem in problems:
                    if problem not in before:
                        self.record("health", f"card {index}: {problem}", cards=[index], state="started")
                for problem in before:
                    if problem not in problems:
                        self.record(
                            "health", f"card {index} no longer reports: {problem}", cards=[index], state="cleared"
                        )
        self._health = health

    def _track_jobs(self, snap: NodeSnapshot, now: float) -> None:
        live = {j.key: j for j in snap.jobs if j.live}
        if self._live is not None:
            ended = {j.key: j for j in snap.jobs if not j.live}
            for key, job in self._live.items():
                if key not in live:
                    self._record_end(job, ended.get(key), now)
        self._live = live

    def _record_end(self, job: JobState, after: Optional[JobState], now: float) -> None:
        """A job live at the last reading and not now (``after``: its record now, if
        any): a reservation that reached its end expired; anything else ended."""
        key = job.key
        owner = f" of {job.owner}" if job.owner else ""
        cards = list(job.gpus) or sorted({ref.card for ref in job.slices})
        held = job.holding
        expires_at = after.expires_at if after is not None else job.expires_at
        if job.kind == "reservation" and expires_at is not None and expires_at <= now + 1:
            self.record(
                "expiry",
                f"reservation {key}{owner} expired; {held} "
                f"{'is' if len(cards) == 1 or job.slices else 'are'} no longer held by it",
                cards=cards,
                user=job.owner or None,
                run_id=key,
            )
            return
        self.record(
            "ended",
            f"{job.kind} {key}{owner} ended{_how_ended(after)}; it no longer holds {held}",
            cards=cards,
            user=job.owner or None,
            run_id=key,
        )

    # ── XIDs that drained nothing ──────────────────────────────────────────

    def note_xid(self, card: int, verdict: Verdict, at: float, job: Optional[JobState]) -> None:
        words = f"XID {verdict.xid} at {clock_time(at, at)}: {verdict.meaning}"
        if verdict.kind == APPLICATION and job is not None:
            words += f" (the program of {job.key}" + (f" of {job.owner}" if job.owner else "") + ")"
        self._xids.append(_RecentXid(card, at, words))
        if len(self._xids) > XIDS_KEPT:  # a storm: each card's newest are what is shown
            del self._xids[: len(self._xids) - XIDS_KEPT]

    # ── each reading given out ──────────────────────────────────────────────

    def decorate(self, snap: NodeSnapshot, now: float, *, xid_watch: str, xid_problem: Optional[str]) -> NodeSnapshot:
        self._xids = [x for x in self._xids if now - x.at < XID_SHOWN_S]
        cards = snap.cards
        if self._xids:
            notes: dict[int, list[str]] = {}
            for x in self._xids:
                notes.setdefault(x.card, []).append(x.words)
            for card, said in notes.items():
                if len(said) > XIDS_NAMED:
                    notes[card] = [
                        f"{len(said) - XIDS_NAMED} more XIDs in the last {XID_SHOWN_S // 60} min",
                        *said[-XIDS_NAMED:],
                    ]
            cards = tuple(
                replace(c, warning="; ".join(filter(None, [c.warning, *notes[c.index]]))) if c.index in notes else c
                for c in cards
            )
        return replace(snap, cards=cards, idle=self.idle(now), xid_watch=xid_watch, xid_problem=xid_problem)


def _how_ended(after: Optional[JobState]) -> str:
    """ " (exit 1)" when its exit code is known; " and its record is gone" when it is no longer listed."""
    if after is None:
        return " and its record is gone"
    return f" (exit {after.exit_code})" if after.exit_code is not None else ""
