"""The usage ledger: every hold of the node's cards, and each held card's minutes, in SQLite.

Who used how much is asked after the fact, and nothing else on the node
remembers it once jobs are reclaimed. So the agent writes it down from the
readings it takes anyway (:meth:`UsageLedger.update`), in ``usage.sqlite``:
``holds`` (one row a job), ``samples`` (one row a held card's minute) and
``units`` (the samples summed, so a report reads thousands of rows, not a
million). What was read and not yet written is :meth:`UsageLedger.unwritten`.
It records history only: a ledger that cannot write never stops a poll
(:attr:`UsageLedger.problem`). See docs/architecture.md, section 'The usage
ledger and idle cards'.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from tpnode_tui.model.jobs import JobState, SliceRef
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.usage import IDLE_UTIL_PCT
from tpnode_tui.model.views import CardView, holder_memory, holder_on_card, holder_on_slice, intruders_memory

log = logging.getLogger(__name__)

LEDGER_FILE = "usage.sqlite"
#: PRAGMA user_version of the tables below; a file from a newer version is never written
SCHEMA_VERSION = 2
#: TUNEPLANE_USAGE_DAYS's default: what is older is pruned
DEFAULT_DAYS = 90
#: TUNEPLANE_USAGE_HOLDS_PER_USER's default: an account's older ended holds are pruned
DEFAULT_HOLDS_PER_USER = 10_000
MINUTE = 60
#: A reading stands for the time since the one before it, up to this long: a
#: longer gap (the agent stopped, polls hung) is time nobody read the cards,
#: counted as held (the runtime says so) but in no sample.
MAX_GAP_S = 60.0
#: how often what is older than the days kept is deleted
PRUNE_EVERY_S = 3600.0
#: finished minutes kept in memory while the file cannot be written (a day of 8
#: cards); older ones are dropped rather than let the agent grow without bound
MAX_PENDING = 8 * 24 * 60

_SCHEMA = f"""
BEGIN;
CREATE TABLE holds (
    id INTEGER PRIMARY KEY,
    run_id BLOB NOT NULL,
    kind BLOB NOT NULL,
    user BLOB NOT NULL,
    uid INTEGER,
    cards TEXT NOT NULL,
    slices TEXT NOT NULL,
    job_started REAL,
    started REAL NOT NULL,
    last_seen REAL NOT NULL,
    ended REAL
);
CREATE INDEX holds_started ON holds (started);
CREATE INDEX holds_ended ON holds (ended);
CREATE TABLE samples (
    hold_id INTEGER NOT NULL,
    card INTEGER NOT NULL,
    slice BLOB NOT NULL,
    at INTEGER NOT NULL,
    seconds REAL NOT NULL,
    util_pct REAL,
    measured_s REAL NOT NULL,
    used_s REAL NOT NULL,
    idle_s REAL NOT NULL,
    mem_mib INTEGER,
    holder INTEGER,
    intruded_s REAL NOT NULL DEFAULT 0,
    intruder_mem_mib INTEGER,
    PRIMARY KEY (hold_id, card, slice, at)
) WITHOUT ROWID;
CREATE TABLE units (
    hold_id INTEGER NOT NULL,
    card INTEGER NOT NULL,
    slice BLOB NOT NULL,
    seconds REAL NOT NULL,
    measured_s REAL NOT NULL,
    used_s REAL NOT NULL,
    idle_s REAL NOT NULL,
    peak_mem_mib INTEGER,
    first_at INTEGER NOT NULL,
    last_at INTEGER NOT NULL,
    intruded_s REAL NOT NULL DEFAULT 0,
    intruder_peak_mib INTEGER,
    PRIMARY KEY (hold_id, card, slice)
) WITHOUT ROWID;
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""

#: schema 1 to 2: someone else's use of a held card, kept apart from its holder's (a
#: minute written before kept every process's memory as the holder's, and no intruder's)
_TO_2 = """
BEGIN;
ALTER TABLE samples ADD COLUMN intruded_s REAL NOT NULL DEFAULT 0;
ALTER TABLE samples ADD COLUMN intruder_mem_mib INTEGER;
ALTER TABLE units ADD COLUMN intruded_s REAL NOT NULL DEFAULT 0;
ALTER TABLE units ADD COLUMN intruder_peak_mib INTEGER;
PRAGMA user_version = 2;
COMMIT;
"""

#: made in any file of this schema, older ones too: finding a run id's holds (an exited
#: job found after a restart) and an account's newest ended ones (its bound) read an
#: index instead of every hold
_INDEXES = """
CREATE INDEX IF NOT EXISTS holds_run_id ON holds (run_id);
CREATE INDEX IF NOT EXISTS holds_owner ON holds (uid, user, started);
"""

# The larger of two values either of which may be NULL (SQLite's max() of a NULL is NULL).
_MAX = "MAX(COALESCE({a}, {b}), COALESCE({b}, {a}))"

#: one finished minute; the same minute written twice (a restart within it) is merged
_PUT_SAMPLE = f"""
INSERT INTO samples (
    hold_id, card, slice, at, seconds, util_pct, measured_s, used_s, idle_s, mem_mib, holder,
    intruded_s, intruder_mem_mib
)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hold_id, card, slice, at) DO UPDATE SET
    util_pct = CASE WHEN measured_s + excluded.measured_s > 0 THEN
        (COALESCE(util_pct, 0) * measured_s + COALESCE(excluded.util_pct, 0) * excluded.measured_s)
        / (measured_s + excluded.measured_s) END,
    seconds = seconds + excluded.seconds,
    measured_s = measured_s + excluded.measured_s,
    used_s = used_s + excluded.used_s,
    idle_s = idle_s + excluded.idle_s,
    mem_mib = {_MAX.format(a="mem_mib", b="excluded.mem_mib")},
    holder = {_MAX.format(a="holder", b="excluded.holder")},
    intruded_s = intruded_s + excluded.intruded_s,
    intruder_mem_mib = {_MAX.format(a="intruder_mem_mib", b="excluded.intruder_mem_mib")}
"""

_ADD_UNIT = f"""
INSERT INTO units (
    hold_id, card, slice, seconds, measured_s, used_s, idle_s, peak_mem_mib, first_at, last_at,
    intruded_s, intruder_peak_mib
)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hold_id, card, slice) DO UPDATE SET
    seconds = seconds + excluded.seconds,
    measured_s = measured_s + excluded.measured_s,
    used_s = used_s + excluded.used_s,
    idle_s = idle_s + excluded.idle_s,
    peak_mem_mib = {_MAX.format(a="peak_mem_mib", b="excluded.peak_mem_mib")},
    first_at = MIN(first_at, excluded.first_at),
    last_at = MAX(last_at, excluded.last_at),
    intruded_s = intruded_s + excluded.intruded_s,
    intruder_peak_mib = {_MAX.format(a="intruder_peak_mib", b="excluded.intruder_peak_mib")}
"""

#: a unit's sums made again from its samples, after the oldest were pruned
_RESUM_UNIT = """
INSERT INTO units (
    hold_id, card, slice, seconds, measured_s, used_s, idle_s, peak_mem_mib, first_at, last_at,
    intruded_s, intruder_peak_mib
)
SELECT hold_id, card, slice, SUM(seconds), SUM(measured_s), SUM(used_s), SUM(idle_s), MAX(mem_mib), MIN(at), MAX(at),
    SUM(intruded_s), MAX(intruder_mem_mib)
FROM samples WHERE hold_id = ? AND card = ? AND slice = ? GROUP BY hold_id, card, slice
"""


def encoded(text: str) -> bytes:
    """Someone else's text (a run id, an owner's name) as the bytes stored.

    Stored as a BLOB, not TEXT: a command line or a label may hold a lone
    surrogate, which is not UTF-8 and which SQLite's TEXT would refuse, or an
    escape sequence or NUL, which must come back exactly as they went in
    (making them printable is the renderer's job, not the record's).
    """
    return text.encode("utf-8", "surrogatepass")


def decoded(data: bytes) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


def cards_to_text(cards: Iterable[int]) -> str:
    """ "0,1": read back for every hold a report spans, so plainer than JSON."""
    return ",".join(map(str, cards))


def cards_from_text(text: str) -> tuple[int, ...]:
    return tuple(int(c) for c in text.split(",")) if text else ()


def slices_to_text(slices: Iterable[SliceRef]) -> str:
    """JSON, since a slice's uuid and profile are the driver's text."""
    return json.dumps([[s.card, s.uuid, s.profile] for s in slices])


def slices_from_text(text: str) -> tuple[SliceRef, ...]:
    if text == "[]":  # most holds: whole cards only
        return ()
    return tuple(
        SliceRef(card=int(card), uuid=str(uuid), profile=str(profile)) for card, uuid, profile in json.loads(text)
    )


# ── what one reading says of a held card ───────────────────────────────────


@dataclass(frozen=True)
class CardUse:
    """What one poll read of a held card or slice."""

    #: utilisation, %; None where the driver does not say (MIG slices) or could not be read
    util: Optional[float]
    #: the memory its holder uses (not an intruder's); None when that cannot be told
    memory_mib: Optional[int]
    #: whether a process of the holder is on it; None when that cannot be told
    holder: Optional[bool]
    #: whether someone else's process is on it (None: cannot be told), and the memory those use
    intruded: Optional[bool] = None
    intruder_mib: Optional[int] = None

    @property
    def idle(self) -> Optional[bool]:
        """Idle: no process of the holder on it, or under IDLE_UTIL_PCT; None when neither can be told."""
        if self.holder is False:
            return True
        if self.util is not None:
            return self.util < IDLE_UTIL_PCT
        return None if self.holder is None else False


def card_use(card: Optional[CardView], mem_busy_mib: int) -> CardUse:
    """What a reading says of a held card; whether its holder is on it is the
    dashboard's idle mark's rule (:func:`~tpnode_tui.model.views.holder_present`)."""
    facts = card.facts if card is not None else None
    if card is None or facts is None:
        return CardUse(None, None, None)
    util = None if facts.utilization_pct is None else float(facts.utilization_pct)
    listed = facts.processes is not None
    mine = holder_memory(card.holders, listed, facts.memory_used_mib)
    return CardUse(util, mine, holder_on_card(card, mem_busy_mib), *intruders_memory(card.holders, listed))


def slice_use(card: Optional[CardView], uuid: str, mem_busy_mib: int) -> CardUse:
    """A MIG slice: its own memory and processes; drivers report no utilisation for it."""
    found = next((s for s in card.slices if s.facts.uuid == uuid), None) if card is not None else None
    if found is None:
        return CardUse(None, None, None)
    listed = found.facts.processes is not None
    mine = holder_memory(found.holders, listed, found.facts.memory_used_mib)
    return CardUse(None, mine, holder_on_slice(found, mem_busy_mib), *intruders_memory(found.holders, listed))


# ── what is kept in memory between writes ──────────────────────────────────


@dataclass
class _Minute:
    """One held card's or slice's readings within one minute, summed until it is written."""

    at: int
    seconds: float = 0.0
    measured_s: float = 0.0
    #: utilisation % times seconds, over the seconds it was read
    util_s: float = 0.0
    #: seconds weighted by utilisation, while the holder was on it (or could not be told not to be)
    used_s: float = 0.0
    idle_s: float = 0.0
    memory_mib: Optional[int] = None
    holder: Optional[bool] = None
    #: seconds someone else's process was on it, and the most memory those used
    intruded_s: float = 0.0
    intruder_mib: Optional[int] = None

    def add(self, seconds: float, r: CardUse) -> None:
        self.seconds += seconds
        if r.util is not None:
            self.measured_s += seconds
            self.util_s += r.util * seconds
            if r.holder is not False:  # an intruder's use of the card is not its holder's
                self.used_s += r.util / 100.0 * seconds
        if r.idle:
            self.idle_s += seconds
        if r.memory_mib is not None:
            self.memory_mib = max(self.memory_mib or 0, r.memory_mib)
        if r.holder is not None:
            self.holder = bool(self.holder) or r.holder
        if r.intruded:
            self.intruded_s += seconds
        if r.intruder_mib is not None:
            self.intruder_mib = max(self.intruder_mib or 0, r.intruder_mib)


@dataclass(eq=False)
class _Unit:
    """A held card (``slice`` "") or MIG slice (its MIG device's uuid)."""

    card: int
    slice: str = ""
    #: when it was last read, by this process (None: not yet)
    read_at: Optional[float] = None
    minute: Optional[_Minute] = None


@dataclass(eq=False)
class _Hold:
    key: str
    kind: str
    user: str
    uid: Optional[int]
    cards: tuple[int, ...]
    slices: tuple[SliceRef, ...]
    #: the runtime's start time of the job, to tell a run id given again from the same job
    job_started: Optional[float]
    started: float
    last_seen: float
    #: its row, once written
    id: Optional[int] = None
    ended: Optional[float] = None
    units: list[_Unit] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.units:
            self.units = [_Unit(c) for c in self.cards] + [_Unit(s.card, s.uuid) for s in self.slices]

    def same_job(self, job: JobState) -> bool:
        if not self._same_holding(job):
            return False
        return self.job_started is None or job.started_at is None or abs(job.started_at - self.job_started) < 1.0

    def ended_as(self, job: JobState) -> bool:
        """Whether exited ``job`` is this hold's job: the same holding, begun no later.
        An exited container's start is when it was made, a little before it started."""
        if not self._same_holding(job):
            return False
        return self.job_started is None or job.started_at is None or job.started_at < self.job_started + 1.0

    def _same_holding(self, job: JobState) -> bool:
        if job.kind != self.kind or tuple(sorted(job.gpus)) != self.cards:
            return False
        return {s.uuid for s in job.slices} == {s.uuid for s in self.slices}


@dataclass(frozen=True)
class Unwritten:
    """A minute read and not yet written (the one under way, or one the file has
    not taken yet), as the report adds it to what the file holds."""

    #: its hold's row
    hold_id: int
    card: int
    slice: str
    at: int
    seconds: float
    used_s: float
    idle_s: float
    memory_mib: Optional[int]
    intruded_s: float
    intruder_mib: Optional[int]


def _unwritten(hold_id: int, unit: _Unit, m: _Minute) -> Unwritten:
    return Unwritten(
        hold_id, unit.card, unit.slice, m.at, m.seconds, m.used_s, m.idle_s, m.memory_mib, m.intruded_s, m.intruder_mib
    )


@dataclass(frozen=True)
class LedgerCounters:
    """What /metrics serves of the ledger: card-seconds per owner since this agent started
    (whole cards; MIG slices are not cards), and when the ledger last wrote."""

    held_s: dict[str, float]
    idle_s: dict[str, float]
    #: unix seconds of the last successful write; None before the first
    last_write: Optional[float]
    #: why it cannot be written now, in plain words; None while it can
    problem: Optional[str]


class LedgerUnusable(Exception):
    """The file is there but must not be written: not the agent's, or from a newer version."""


class UsageLedger:
    """``state_dir/usage.sqlite``, written from the agent's readings. Safe to call from several threads."""

    def __init__(
        self,
        directory: Path,
        *,
        days: int = DEFAULT_DAYS,
        clock: Callable[[], float] = time.time,
        max_gap_s: float = MAX_GAP_S,
        holds_per_user: int = DEFAULT_HOLDS_PER_USER,
    ) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LEDGER_FILE
        self.days = days
        #: the most ended holds one account keeps (TUNEPLANE_USAGE_HOLDS_PER_USER)
        self.holds_per_user = holds_per_user
        self.clock = clock
        self.max_gap_s = max_gap_s
        #: why the ledger cannot be written now, in plain words; None while it can
        self.problem: Optional[str] = None
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._retry_at = -math.inf
        #: holds open now, by job key
        self._holds: dict[str, _Hold] = {}
        #: holds ended and not yet written as ended
        self._ended: list[_Hold] = []
        #: the exited jobs (run id, start) the last reading listed, each taken in by then;
        #: None before the first reading since the file was opened (the file then says)
        self._exited: Optional[set[tuple[str, Optional[float]]]] = None
        #: finished minutes not yet written
        self._done: list[tuple[_Hold, _Unit, _Minute]] = []
        self._changed = False
        self._minute: Optional[int] = None
        self._last_now: Optional[float] = None
        self._pruned_at = -math.inf
        #: the counters /metrics serves, under a lock of their own: a scrape
        #: never waits for a write to the file
        self._counting = threading.Lock()
        self._held_s: dict[str, float] = {}
        self._idle_s: dict[str, float] = {}
        self._last_write: Optional[float] = None
        #: what was read and not yet written, as of the last reading (under the same lock)
        self._unwritten: tuple[Unwritten, ...] = ()

    # ── the write side ─────────────────────────────────────────────────────

    def update(self, snap: NodeSnapshot) -> bool:
        """Take one reading into the ledger; never raises for the file's sake.
        True when every hold the reading opened or closed, and every exited job
        it lists, is in the file: what removing an exited job's record waits for."""
        now = snap.taken_at
        with self._lock:
            if self._last_now is not None and now <= self._last_now:
                if self._last_now - now < self.max_gap_s:
                    return False  # the same reading again, or the clock stepped back a little: nothing new
                self._clock_stepped_back()
            if not self._opened(now):
                return False
            self._follow_jobs(snap, now)
            self._read_cards(snap, now)
            self._last_now = now
            minute = int(now // MINUTE)
            turned = self._minute is None or minute > self._minute
            if turned:
                self._finish_minutes(minute * MINUTE)
                self._minute = minute
            if turned or self._changed:
                self._write(now)
            self._keep_unwritten()
            return self.problem is None and not self._changed and not self._ended

    def close(self) -> None:
        """Write what was read of the minute under way, and close the file.

        Holds stay open: their jobs may well outlive the agent, and the next
        start decides against the runtime whether they still hold their cards.
        """
        with self._lock:
            if self._conn is None:
                return
            for hold in self._holds.values():
                for unit in hold.units:
                    self._finish(hold, unit)
            self._write(self._last_now if self._last_now is not None else self.clock())
            self._conn.close()
            self._conn = None
            # opened again, it starts from the file, as a new agent would
            self._holds.clear()
            self._ended.clear()
            self._done.clear()
            self._minute = self._last_now = None
            self._exited = None
            self._keep_unwritten()

    def _clock_stepped_back(self) -> None:
        """The wall clock was set back (by hand, or by a time sync after a bad start):
        what was read stays as read, and the next reading starts afresh rather
        than the ledger waiting, recording nothing, until the clock is back
        where it was. A minute read twice is merged (see _PUT_SAMPLE)."""
        for hold in self._holds.values():
            for unit in hold.units:
                self._finish(hold, unit)
                unit.read_at = None
        self._minute = None
        self._last_now = None

    def _opened(self, now: float) -> bool:
        if self._conn is not None:
            return True
        if now < self._retry_at:
            return False
        try:
            self._conn = self._connect()
            self._recover(self._conn)
        except (sqlite3.Error, OSError, ValueError, LedgerUnusable) as e:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._retry_at = now + MINUTE
            self._failed(f"cannot open the usage ledger {self.path}: {error_words(e)}")
            return False
        return True

    def _connect(self) -> sqlite3.Connection:
        """The file, made 0600 and checked to be this process's own before SQLite opens it.

        SQLite makes its -wal and -shm files with the database's mode and owner.
        """
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise LedgerUnusable(
                    f"it belongs to uid {st.st_uid}, not to this agent's uid {os.geteuid()}; move it aside"
                )
            if stat.S_IMODE(st.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=5.0)
        try:
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
                raise LedgerUnusable("SQLite would not keep it in WAL mode")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerUnusable(
                    f"a newer version wrote it (schema {version}, this one knows {SCHEMA_VERSION}); "
                    "run that version, or move the file aside"
                )
            if version == 0:
                conn.executescript(_SCHEMA)
            elif version == 1:
                conn.executescript(_TO_2)
            conn.executescript(_INDEXES)
        except BaseException:
            conn.close()
            raise
        return conn

    def _recover(self, conn: sqlite3.Connection) -> None:
        """The holds left open by the last run, to be matched against the first reading."""
        rows = conn.execute(
            "SELECT id, run_id, kind, user, uid, cards, slices, job_started, started, last_seen "
            "FROM holds WHERE ended IS NULL ORDER BY started"
        ).fetchall()
        holds = [  # all read before any is kept: a row that cannot be read keeps none
            _Hold(
                key=decoded(row[1]),
                kind=decoded(row[2]),
                user=decoded(row[3]),
                uid=row[4],
                cards=cards_from_text(row[5]),
                slices=slices_from_text(row[6]),
                job_started=row[7],
                started=row[8],
                last_seen=row[9],
                id=row[0],
            )
            for row in rows
        ]
        for hold in holds:
            older = self._holds.get(hold.key)
            if older is not None:  # two open under one run id: only the later can still hold
                self._end(older, older.last_seen)
            self._holds[hold.key] = hold

    def _follow_jobs(self, snap: NodeSnapshot, now: float) -> None:
        """Close the holds of jobs gone, exited or replaced; open one for each job new
        here; take in the exited jobs no reading saw live."""
        seen_live = dict(self._holds)
        live = {j.key: j for j in snap.jobs if j.live and (j.gpus or j.slices)}
        for key, hold in list(self._holds.items()):
            job = live.get(key)
            if job is None or not hold.same_job(job):
                # Seen held until the last reading: when that was a moment ago the
                # job ended since, so now; after a gap (a restart) nobody saw when.
                self._end(hold, now if now - hold.last_seen <= self.max_gap_s else hold.last_seen)
        for key, job in live.items():
            if key not in self._holds:
                started = job.started_at if job.started_at is not None and job.started_at <= now else now
                self._holds[key] = _Hold(
                    key=key,
                    kind=job.kind,
                    user=job.owner,
                    uid=job.uid,
                    cards=tuple(sorted(job.gpus)),
                    slices=job.slices,
                    job_started=job.started_at,
                    started=started,
                    last_seen=now,
                )
                self._changed = True
        self._take_exited(snap, seen_live, now)

    def _take_exited(self, snap: NodeSnapshot, seen_live: dict[str, _Hold], now: float) -> None:
        """A hold for each exited job that no reading saw live: it began and ended
        between two readings, and is taken to have held its cards until this one
        (as a hold seen until the last reading is closed at this one). Found
        after a restart, or after a gap, nobody saw when it ended: its hold is
        closed where it began. Only the exited jobs the last reading did not list
        are looked at; in the first reading since the file was opened, the file
        says which it has."""
        exited = {(j.key, j.started_at): j for j in snap.jobs if not j.live and (j.gpus or j.slices)}
        known = self._exited
        for ident, job in exited.items():
            if known is not None and ident in known:
                continue
            hold = seen_live.get(job.key)
            if hold is not None and hold.ended_as(job):
                continue  # seen live, and closed above
            if known is None and self._in_file(job):
                continue
            started = job.started_at if job.started_at is not None and job.started_at <= now else now
            ended = now if known is not None and now - started <= self.max_gap_s else started
            self._ended.append(
                _Hold(
                    key=job.key,
                    kind=job.kind,
                    user=job.owner,
                    uid=job.uid,
                    cards=tuple(sorted(job.gpus)),
                    slices=job.slices,
                    job_started=job.started_at,
                    started=started,
                    last_seen=ended,
                    ended=ended,
                )
            )
            self._changed = True
        self._exited = set(exited)

    def _in_file(self, job: JobState) -> bool:
        """Whether the file has a hold of exited ``job`` (its run id, begun no earlier)."""
        assert self._conn is not None
        since = None if job.started_at is None else job.started_at - 1.0
        found = self._conn.execute(
            "SELECT 1 FROM holds WHERE run_id = ? AND (? IS NULL OR job_started IS NULL OR job_started >= ?) LIMIT 1",
            (encoded(job.key), since, since),
        ).fetchone()
        return found is not None

    def _end(self, hold: _Hold, at: float) -> None:
        for unit in hold.units:
            self._finish(hold, unit)
        hold.ended = at
        del self._holds[hold.key]
        self._ended.append(hold)
        self._changed = True

    def _read_cards(self, snap: NodeSnapshot, now: float) -> None:
        cards = {c.index: c for c in snap.cards}
        for hold in self._holds.values():
            for unit in hold.units:
                card = cards.get(unit.card)
                if unit.slice:
                    reading = slice_use(card, unit.slice, snap.mem_busy_mib)
                else:
                    reading = card_use(card, snap.mem_busy_mib)
                if unit.read_at is not None and now - unit.read_at <= self.max_gap_s:
                    self._attribute(hold, unit, unit.read_at, now, reading)
                unit.read_at = now
            hold.last_seen = now

    def _attribute(self, hold: _Hold, unit: _Unit, start: float, end: float, r: CardUse) -> None:
        """The reading stands for the time since the last one, split at the minutes."""
        if not unit.slice:
            with self._counting:
                self._held_s[hold.user] = self._held_s.get(hold.user, 0.0) + (end - start)
                if r.idle:
                    self._idle_s[hold.user] = self._idle_s.get(hold.user, 0.0) + (end - start)
        while start < end:
            at = int(start // MINUTE) * MINUTE
            upto = min(end, at + MINUTE)
            if unit.minute is not None and unit.minute.at != at:
                self._finish(hold, unit)
            if unit.minute is None:
                unit.minute = _Minute(at)
            unit.minute.add(upto - start, r)
            start = upto

    def _finish(self, hold: _Hold, unit: _Unit) -> None:
        if unit.minute is not None and unit.minute.seconds > 0:
            self._done.append((hold, unit, unit.minute))
        unit.minute = None

    def _finish_minutes(self, before: int) -> None:
        for hold in self._holds.values():
            for unit in hold.units:
                if unit.minute is not None and unit.minute.at < before:
                    self._finish(hold, unit)
        if len(self._done) > MAX_PENDING:
            log.warning("usage ledger: dropped %d unwritten minutes", len(self._done) - MAX_PENDING)
            del self._done[: len(self._done) - MAX_PENDING]

    def _write(self, now: float) -> None:
        """Everything read since the last write, in one transaction; kept for the next try when it fails."""
        conn = self._conn
        assert conn is not None
        ids: dict[_Hold, int] = {}
        prune = now - self._pruned_at >= PRUNE_EVERY_S
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for hold in (*self._ended, *self._holds.values()):
                    if hold.id is None:
                        ids[hold] = _insert_hold(conn, hold)
                conn.executemany(_PUT_SAMPLE, [_sample_row(ids.get(h, h.id), u, m) for h, u, m in self._done])
                conn.executemany(_ADD_UNIT, [_unit_row(ids.get(h, h.id), u, m) for h, u, m in self._done])
                conn.executemany(
                    "UPDATE holds SET ended = ?, last_seen = ? WHERE id = ?",
                    [(h.ended, h.last_seen, ids.get(h, h.id)) for h in self._ended],
                )
                conn.executemany(
                    "UPDATE holds SET last_seen = ? WHERE id = ?",
                    [(h.last_seen, ids.get(h, h.id)) for h in self._holds.values()],
                )
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_write', ?)", (now,))
                for uid, user in sorted({(h.uid, h.user) for h in self._ended}, key=str):
                    keep_newest(conn, uid, user, self.holds_per_user)
                if prune:
                    prune_before(conn, now - self.days * 86400.0)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            self._failed(f"cannot write the usage ledger {self.path}: {error_words(e)}")
            return
        for hold, row in ids.items():
            hold.id = row
        self._done.clear()
        self._ended.clear()
        self._changed = False
        if prune:
            self._pruned_at = now
        self._last_write = now
        if self.problem is not None:
            log.info("the usage ledger %s is written again", self.path)
            self.problem = None

    def _failed(self, problem: str) -> None:
        if problem != self.problem:
            log.warning("%s", problem)
        self.problem = problem

    def _keep_unwritten(self) -> None:
        """What a report adds to the file: each minute read and not written, of a
        hold whose row is (a hold is written as soon as it is seen)."""
        minutes = [(h, u, m) for h, u, m in self._done]
        minutes += [(h, u, u.minute) for h in self._holds.values() for u in h.units if u.minute is not None]
        kept = tuple(_unwritten(h.id, u, m) for h, u, m in minutes if h.id is not None and m.seconds > 0)
        with self._counting:
            self._unwritten = kept

    # ── what is read back ──────────────────────────────────────────────────

    def unwritten(self) -> tuple[Unwritten, ...]:
        """The minutes read and not yet written: the one under way, and any the
        file has not taken yet. ``/metrics`` counts each reading as it comes,
        and the file a minute once it is over; a report adds these, so it says
        what ``/metrics`` says, not what it said a minute ago."""
        with self._counting:
            return self._unwritten

    def counters(self) -> LedgerCounters:
        with self._counting:
            return LedgerCounters(dict(self._held_s), dict(self._idle_s), self._last_write, self.problem)


def error_words(e: BaseException) -> str:
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e) or type(e).__name__


def _insert_hold(conn: sqlite3.Connection, hold: _Hold) -> int:
    cursor = conn.execute(
        "INSERT INTO holds (run_id, kind, user, uid, cards, slices, job_started, started, last_seen, ended) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            encoded(hold.key),
            encoded(hold.kind),
            encoded(hold.user),
            hold.uid,
            cards_to_text(hold.cards),
            slices_to_text(hold.slices),
            hold.job_started,
            hold.started,
            hold.last_seen,
            hold.ended,
        ),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _sample_row(hold_id: Optional[int], unit: _Unit, m: _Minute) -> tuple[object, ...]:
    util = m.util_s / m.measured_s if m.measured_s > 0 else None
    holder = None if m.holder is None else int(m.holder)
    return (
        hold_id,
        unit.card,
        encoded(unit.slice),
        m.at,
        m.seconds,
        util,
        m.measured_s,
        m.used_s,
        m.idle_s,
        m.memory_mib,
        holder,
        m.intruded_s,
        m.intruder_mib,
    )


def _unit_row(hold_id: Optional[int], unit: _Unit, m: _Minute) -> tuple[object, ...]:
    return (
        hold_id,
        unit.card,
        encoded(unit.slice),
        m.seconds,
        m.measured_s,
        m.used_s,
        m.idle_s,
        m.memory_mib,
        m.at,
        m.at,
        m.intruded_s,
        m.intruder_mib,
    )


def prune_before(conn: sqlite3.Connection, cutoff: float) -> None:
    """Delete what ended before ``cutoff``, and the older minutes of what is still kept.

    A hold that began before it and ended after keeps its row (its start is
    history) and loses its older minutes; its sums are made again from the
    minutes left, so they always equal its samples.
    """
    _delete_holds(conn, [row[0] for row in conn.execute("SELECT id FROM holds WHERE ended < ?", (cutoff,))])
    straddling = conn.execute("SELECT hold_id, card, slice FROM units WHERE first_at < ?", (cutoff,)).fetchall()
    for key in straddling:
        conn.execute("DELETE FROM samples WHERE hold_id = ? AND card = ? AND slice = ? AND at < ?", (*key, cutoff))
        conn.execute("DELETE FROM units WHERE hold_id = ? AND card = ? AND slice = ?", key)
        conn.execute(_RESUM_UNIT, key)


def keep_newest(conn: sqlite3.Connection, uid: Optional[int], user: str, most: int) -> None:
    """Delete the account's ended holds but the ``most`` begun last, with their minutes
    (the oldest go first, as the agent removes an account's oldest exited jobs). An
    account is its uid and name as the holds recorded them."""
    old = conn.execute(
        "SELECT id FROM holds WHERE uid IS ? AND user = ? AND ended IS NOT NULL "
        "ORDER BY started DESC, id DESC LIMIT -1 OFFSET ?",
        (uid, encoded(user), most),
    ).fetchall()
    _delete_holds(conn, [row[0] for row in old])


def _delete_holds(conn: sqlite3.Connection, ids: list[int]) -> None:
    rows = [(i,) for i in ids]
    conn.executemany("DELETE FROM samples WHERE hold_id = ?", rows)
    conn.executemany("DELETE FROM units WHERE hold_id = ?", rows)
    conn.executemany("DELETE FROM holds WHERE id = ?", rows)
