"""What the service learns by comparing one reading with the ones before it.

A snapshot says what is true now; some things a person needs are about
change (an intruder appearing, a fault starting, a job ending, a reservation
unused). The service keeps that here, in memory, deciding nothing about who
holds a card; what it logged is read back at start (``recall``) so a change
is logged once. Changes go to the node's log through ``record``; each
reading given out is ``decorate``-d. See docs/architecture.md, section
'Triage' ("Change between readings").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Optional

from tpnode_tui.core.idle import job_idle_held
from tpnode_tui.core.xid import APPLICATION, Verdict
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import (
    EXTERNAL,
    HOLDER,
    INTRUDER,
    CardView,
    HolderInfo,
    SliceView,
    holder_on_card,
    holder_on_slice,
)
from tpnode_tui.text.render import clock_time, format_duration, intruder_words
from tpnode_tui.triage.history import History

Record = Callable[..., Any]
#: where a job's output is, in words a person can follow ("/var/lib/tpnode-tui/logs/j-1.log"); None: nowhere known
Output = Callable[[JobState], Optional[str]]

#: how long an XID that drained nothing stays on its card's warning
XID_SHOWN_S = 15 * 60
#: the newest XIDs a card's warning names; a storm of them is counted, not listed
XIDS_NAMED = 3
#: at most this many recent XIDs are kept in all, whatever the rate they come at
XIDS_KEPT = 1000


#: the kinds of the node's log ``recall`` reads back
RECALLED = frozenset({"intruder", "health"})
#: what a process no longer an intruder on a card it is still on has become
NO_LONGER = {HOLDER: "it is the holder's now", EXTERNAL: "the card is no longer held"}


@dataclass(frozen=True)
class _Seen:
    card: int
    pid: int
    words: str
    user: Optional[str]
    uid: Optional[int] = None
    #: the account whose job holds where it intrudes
    owner_uid: Optional[int] = None
    #: when the process started (None where it could not be read): a pid given to another is another intruder
    started: Optional[float] = None


@dataclass(frozen=True)
class _RecentXid:
    card: int
    at: float
    words: str


class Triage:
    def __init__(
        self,
        *,
        idle_after_s: float,
        mem_busy_mib: int,
        history: History,
        record: Record,
        started_at: float,
        idle_job_after_s: Optional[float] = None,
        ending_before_s: Optional[float] = None,
        output: Output = lambda _job: None,
        logged: Optional[Callable[[frozenset[str]], Optional[list[dict[str, Any]]]]] = None,
    ) -> None:
        """``idle_job_after_s``: how long a job's cards sit at 0 % with memory held
        before it is marked idle-held (TUNEPLANE_FLAG_IDLE_JOB_AFTER; None: never).
        ``ending_before_s``: how long before a reservation ends its owner is told
        (TUNEPLANE_NOTIFY_BEFORE_END; None: never, as where nobody is told).
        ``output``: where a job's output is, for the line that says it ended.
        ``logged``: the node's log's entries of some kinds, oldest first (None
        where nothing is kept), read back once before the first reading."""
        self.logged = logged
        self.idle_after_s = idle_after_s
        self.idle_job_after_s = idle_job_after_s
        self.ending_before_s = ending_before_s
        self.output = output
        self.mem_busy_mib = mem_busy_mib
        self.history = history
        self.record = record
        self.started_at = started_at
        #: live reservation run id -> when its owner last used one of its cards
        self.last_used: dict[str, float] = {}
        #: live reservation run id -> when its owner last used it, might have (a reading
        #: that could not tell), or extended it: what giving it back counts from
        self.unused_since: dict[str, float] = {}
        #: live reservation run id -> its expiry at the last reading: an extension moves it
        self._expires: dict[str, Optional[float]] = {}
        #: live job run id -> since when its cards have sat at 0 % with memory held
        self._held_since: dict[str, float] = {}
        #: (card, pid) -> the intruder as first seen
        self._intruders: dict[tuple[int, int], _Seen] = {}
        #: card -> the health problems it reported at the last reading (None before the first)
        self._health: Optional[dict[int, tuple[str, ...]]] = None
        #: live job key -> the job, at the last reading (None before the first)
        self._live: Optional[dict[str, JobState]] = None
        #: live reservation run id -> the expiry it was said to end at: said again only once extended
        self._ending: dict[str, float] = {}
        self._xids: list[_RecentXid] = []

    # ── each fresh reading ──────────────────────────────────────────────────

    def observe(self, snap: NodeSnapshot, now: float) -> None:
        self.history.record(now, [(c.index, c.facts) for c in snap.cards])
        self._track_idle(snap, now)
        self._track_idle_jobs(snap, now)
        self._track_intruders(snap)
        self._track_health(snap)
        self._track_jobs(snap, now)
        self._track_ending(snap, now)

    def _track_idle(self, snap: NodeSnapshot, now: float) -> None:
        cards = {c.index: c for c in snap.cards}
        slices = {(c.index, s.facts.uuid): s for c in snap.cards for s in c.slices if s.facts.uuid}
        live = {j.key: j for j in snap.jobs if j.live and j.kind == "reservation"}
        for kept in (self.last_used, self.unused_since, self._expires):
            for key in [k for k in kept if k not in live]:
                del kept[key]
        for key, job in live.items():
            present = self._present(job, cards, slices)
            extended = self._extended(job)
            # Unused when first seen: idle since it began, or since this service
            # did (what happened before that is not known here).
            first = max(job.started_at or now, self.started_at)
            _moved_on(self.last_used, key, present is True, first, now)
            _moved_on(self.unused_since, key, present is not False or extended, first, now)

    def _extended(self, job: JobState) -> bool:
        """Whether the reservation's expiry moved later since the last reading."""
        before = self._expires.get(job.key, job.expires_at)
        self._expires[job.key] = job.expires_at
        return (job.expires_at or 0.0) > (before or 0.0)

    def _present(
        self, job: JobState, cards: dict[int, CardView], slices: dict[tuple[int, str], SliceView]
    ) -> Optional[bool]:
        """Whether a reservation's owner is on any of its cards or slices: True on one,
        None where that cannot be told for all of them, False on none for certain.
        A shell of it that runs (``tpnode-tui shell``) uses it, on a card or not:
        the node never takes the cards from under a shell, as Slurm keeps an
        allocation while its ``salloc`` shell runs."""
        if job.shell_processes:
            return True
        busy = self.mem_busy_mib
        seen = [holder_on_card(cards[i], busy) if i in cards else None for i in job.gpus]
        seen += [
            holder_on_slice(slices[(ref.card, ref.uuid)], busy) if (ref.card, ref.uuid) in slices else None
            for ref in job.slices
        ]
        if True in seen:
            return True
        return None if None in seen else False

    def idle(self, now: float) -> dict[str, float]:
        return {k: t for k, t in self.last_used.items() if now - t >= self.idle_after_s}

    def _track_idle_jobs(self, snap: NodeSnapshot, now: float) -> None:
        """Since when each job's cards have sat at 0 % with memory held. A reading
        that cannot tell neither starts nor ends it; one that shows work ends it."""
        cards = {c.index: c for c in snap.cards}
        live = {j.key: j for j in snap.jobs if j.live and j.kind == "job"}
        for key in [k for k in self._held_since if k not in live]:
            del self._held_since[key]
        for key, job in live.items():
            held = job_idle_held(job, cards, self.mem_busy_mib)
            if held is True:
                self._held_since.setdefault(key, now)
            elif held is False:
                self._held_since.pop(key, None)

    def idle_held(self, now: float) -> dict[str, float]:
        """Jobs idle-held for TUNEPLANE_FLAG_IDLE_JOB_AFTER or longer: run id -> since when."""
        after = self.idle_job_after_s
        if after is None:
            return {}
        return {k: t for k, t in self._held_since.items() if now - t >= after}

    def _track_intruders(self, snap: NodeSnapshot) -> None:
        """Each intruder logged once as seen, and once as gone: when the card's
        processes were read and it is not among them, or it is, no longer an
        intruder. A reading that cannot tell (the list not read, whose it is
        unknown) changes nothing, and neither does a start time read this time
        and not the last."""
        cards = {c.index: c for c in snap.cards}
        now_seen = {(seen.card, seen.pid): seen for seen in _intruders(snap)}
        kept: dict[tuple[int, int], _Seen] = {}
        for key, before in self._intruders.items():
            seen = now_seen.get(key)
            if seen is not None and not _another(before, seen):
                now_seen[key] = before  # the same intruder: as it was first seen
                continue
            gone = _gone_words(before, cards.get(before.card)) if seen is None else ""
            if gone is None:
                kept[key] = before  # nothing can be told of it now
                continue
            gone = gone or f"{before.user or 'someone'}'s pid {before.pid} is no longer on card {before.card}"
            self.record("intruder", gone, cards=[before.card], user=before.user, pid=before.pid, state="gone")
        for key, seen in now_seen.items():
            if self._intruders.get(key) is not seen:
                self.record(
                    "intruder",
                    seen.words,
                    cards=[seen.card],
                    user=seen.user,
                    pid=seen.pid,
                    state="seen",
                    started=seen.started,
                    intruder_uid=seen.uid,
                    owner_uid=seen.owner_uid,
                )
        self._intruders = {**kept, **now_seen}

    def recall_logged(self) -> None:
        """Read back what the node's log last said (blocking: a thread's work).
        Where no log is kept, the first reading is the baseline, as before."""
        entries = self.logged(RECALLED) if self.logged is not None else None
        if entries is not None:
            self.recall(entries)

    def recall(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """What the node's log last said of each intruder and health problem
        (``entries``, oldest first): an intruder last seen is one still, a
        problem last started is reported still, as far as the log knows. The
        next reading logs only what changed since; a problem the log never
        named is logged once when it is first read."""
        intruders: dict[tuple[int, int], _Seen] = {}
        health: dict[int, list[str]] = {}
        for entry in entries:
            card, kind = _card_of(entry), entry.get("kind")
            if card is None:
                continue
            if kind == "intruder":
                _recall_intruder(intruders, card, entry)
            elif kind == "health":
                _recall_health(health, card, entry)
        self._intruders = intruders
        self._health = {card: tuple(problems) for card, problems in health.items()}

    def _track_health(self, snap: NodeSnapshot) -> None:
        health = {
            c.index: (c.facts.health if c.facts is not None else ("not reported by the driver",)) for c in snap.cards
        }
        if self._health is not None:
            for index, problems in health.items():
                before = self._health.get(index, ())
                for problem in problems:
                    if problem not in before:
                        said = f"card {index}: {problem}"
                        self.record("health", said, cards=[index], state="started", problem=problem)
                for problem in before:
                    if problem not in problems:
                        said = f"card {index} no longer reports: {problem}"
                        self.record("health", said, cards=[index], state="cleared", problem=problem)
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
        shelf = _owners_shelf(job)
        expires_at = after.expires_at if after is not None else job.expires_at
        if job.kind == "reservation" and expires_at is not None and expires_at <= now + 1:
            self.record(
                "expiry",
                f"reservation {key}{owner} expired; {held} "
                f"{'is' if len(cards) == 1 or job.slices else 'are'} no longer held by it",
                cards=cards,
                user=job.owner or None,
                run_id=key,
                **shelf,
            )
            return
        ran_s = None if job.started_at is None else max(0.0, now - job.started_at)
        output = self.output(job) if job.kind == "job" else None
        after_words = "" if ran_s is None else f" after {format_duration(ran_s)}"
        self.record(
            "ended",
            f"{job.kind} {key}{owner} ended{_how_ended(after)}{after_words}; it no longer holds {held}"
            + (f"; its output: {output}" if output else ""),
            cards=cards,
            user=job.owner or None,
            run_id=key,
            job_kind=job.kind,
            exit_code=after.exit_code if after is not None else None,
            ran_s=ran_s,
            output=output,
            **shelf,
        )

    def _track_ending(self, snap: NodeSnapshot, now: float) -> None:
        """Say once, ``ending_before_s`` before it, that a live reservation ends, with
        the command that holds it longer; an extension makes it said again before
        its new end. One that was never that long is not said to be ending."""
        before = self.ending_before_s
        live = {j.key: j for j in snap.jobs if j.live and j.kind == "reservation" and j.expires_at is not None}
        for key in [k for k in self._ending if k not in live]:
            del self._ending[key]
        if before is None:
            return
        for key, job in live.items():
            ends = job.expires_at
            assert ends is not None
            if self._ending.get(key) == ends or ends - now > before or ends <= now:
                continue
            self._ending[key] = ends
            if job.started_at is not None and ends - job.started_at <= before:
                continue
            owner = f" of {job.owner}" if job.owner else ""
            self.record(
                "ending",
                f"reservation {key}{owner} ends at {clock_time(ends, now)}, in {format_duration(ends - now)}, "
                f"and lets go of {job.holding}; to hold {'it' if len(job.cards) == 1 else 'them'} an hour "
                f"longer: tpnode-tui extend {key} --for 1h",
                cards=list(job.cards),
                user=job.owner or None,
                run_id=key,
                expires_at=ends,
                **_owners_shelf(job),
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
        return replace(
            snap,
            cards=cards,
            idle=self.idle(now),
            idle_held=self.idle_held(now),
            xid_watch=xid_watch,
            xid_problem=xid_problem,
        )


def _intruders(snap: NodeSnapshot) -> Iterable[_Seen]:
    """Every intruder on the snapshot's cards, as first seen now."""
    for card in snap.cards:
        on_slice = {h.pid: s for s in card.slices for h in s.holders}
        for h in card.holders:
            if h.belongs != INTRUDER:
                continue
            s = on_slice.get(h.pid)
            job = s.job if s is not None else card.job
            if s is not None:
                words = intruder_words(h, card.index, s.job, s.run_id or "", on=s.facts)
            else:
                words = intruder_words(h, card.index, card.job, card.run_id or "")
            owner_uid = job.uid if job is not None else None
            yield _Seen(card.index, h.pid, words, h.user, h.uid, owner_uid, h.started_at)


def _another(before: _Seen, now: _Seen) -> bool:
    """Whether the process with ``before``'s pid is another now: both start times read, and not the same."""
    return before.started is not None and now.started is not None and abs(before.started - now.started) > 1.0


def _gone_words(seen: _Seen, card: Optional[CardView]) -> Optional[str]:
    """What became of an intruder not among this reading's: "" when it is no
    longer on its card, what it is now when it is there and no longer an
    intruder, None when the reading cannot tell (its card's processes not read,
    or whose it is unknown)."""
    if card is None or card.facts is None or card.facts.processes is None:
        return None
    holder: Optional[HolderInfo] = next((h for h in card.holders if h.pid == seen.pid), None)
    if holder is None:
        return ""
    became = NO_LONGER.get(holder.belongs)
    if became is None:
        return None
    who = seen.user or "someone"
    return f"{who}'s pid {seen.pid} is still on card {seen.card}, no longer an intruder: {became}"


def _card_of(entry: Mapping[str, Any]) -> Optional[int]:
    cards = entry.get("cards")
    if isinstance(cards, list) and len(cards) == 1 and isinstance(cards[0], int):
        return int(cards[0])
    return None


def _recall_intruder(intruders: dict[tuple[int, int], _Seen], card: int, entry: Mapping[str, Any]) -> None:
    pid, user, started = entry.get("pid"), entry.get("user"), entry.get("started")
    if not isinstance(pid, int):
        return
    if entry.get("state") == "seen":
        words = entry.get("message")
        uid, owner_uid = entry.get("intruder_uid"), entry.get("owner_uid")
        intruders[(card, pid)] = _Seen(
            card,
            pid,
            words if isinstance(words, str) else "",
            user if isinstance(user, str) else None,
            uid if isinstance(uid, int) else None,
            owner_uid if isinstance(owner_uid, int) else None,
            float(started) if isinstance(started, (int, float)) else None,
        )
    else:
        intruders.pop((card, pid), None)


#: how a health entry's message begins, before the problem itself (for entries that do not name it apart)
_HEALTH_SAID = ("card {card}: ", "card {card} no longer reports: ")


def _recall_health(health: dict[int, list[str]], card: int, entry: Mapping[str, Any]) -> None:
    problem = entry.get("problem")
    if not isinstance(problem, str):
        message = entry.get("message")
        message = message if isinstance(message, str) else ""
        head = next((h.format(card=card) for h in _HEALTH_SAID[::-1] if message.startswith(h.format(card=card))), None)
        if head is None:
            return
        problem = message[len(head) :]
    problems = health.setdefault(card, [])
    if entry.get("state") == "cleared":
        if problem in problems:
            problems.remove(problem)
    elif problem not in problems:
        problems.append(problem)


def _moved_on(times: dict[str, float], key: str, now_too: bool, first: float, now: float) -> None:
    """``key``'s time moved on to ``now`` when this reading counts (``now_too``); else
    kept, or ``first`` for a reservation seen for the first time."""
    if now_too:
        times[key] = now
    else:
        times.setdefault(key, first)


def _owners_shelf(job: JobState) -> dict[str, Any]:
    """Where an entry about what ``job`` did is kept: its owner's shelf, where the
    job recorded whose it is (and that owner named, to be told); else the node's."""
    return {} if job.uid is None else {"account": job.uid, "owner_uid": job.uid}


def _how_ended(after: Optional[JobState]) -> str:
    """ " (exit 1)" when its exit code is known; " and its record is gone" when it is no longer listed."""
    if after is None:
        return " and its record is gone"
    return f" (exit {after.exit_code})" if after.exit_code is not None else ""
