"""The usage ledger: what it records of the readings it is given, and what survives a restart or a kill -9.

Readings are made by hand (tests/helpers/usage.py: which jobs hold which
cards, what each card reads) at times the test names, so hours and days of
a node's life run in a loop. What is checked is what a person would check
afterwards: the report agrees with the holds the test made, to the minute.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
from dataclasses import replace

import pytest

from helpers.callers import ALICE, BOB, ROOT
from helpers.paths import LEDGER_CHILD, TESTS
from helpers.service_node import ServiceNode
from helpers.usage import HOUR, T0, Scene, rows, run
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.facts import ProcessFacts
from tpnode_tui.model.jobs import SliceRef
from tpnode_tui.state.ledger import LEDGER_FILE, SCHEMA_VERSION, UsageLedger
from tpnode_tui.state.usage import usage_report

#: a minute of one card, in card-hours: "to the minute"
MINUTE_H = 1 / 60
CAROL = Caller(uid=5003, gid=5003, user="carol", pid=14)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger_at(tmp_path, clock: Clock, **kw) -> UsageLedger:
    return UsageLedger(tmp_path / "state", clock=clock, **kw)


def near(got: float, want: float, cards: int = 1) -> bool:
    return abs(got - want) <= cards * MINUTE_H


def by_user(report) -> dict:
    return {row.user: row.figures for row in report.rows}


def units_equal_samples(state) -> None:
    """The summed rows the report reads are their samples' sums, always."""
    summed = rows(
        state,
        "SELECT hold_id, card, slice, SUM(seconds), SUM(used_s), SUM(idle_s), MAX(mem_mib), MIN(at), MAX(at) "
        "FROM samples GROUP BY hold_id, card, slice ORDER BY 1, 2, 3",
    )
    kept = rows(
        state,
        "SELECT hold_id, card, slice, seconds, used_s, idle_s, peak_mem_mib, first_at, last_at FROM units "
        "ORDER BY 1, 2, 3",
    )
    assert [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in summed] == [
        tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in kept
    ]


# ── a day of the node, as the holds made it ───────────────────────────────


def a_day(tmp_path, clock: Clock, step: float = 10.0) -> tuple[UsageLedger, float]:
    """alice: a job on cards 0,1 from T0 to T0+3h at 80 %; a job on card 3 from
    T0+2h to T0+2h30 at 2 % (idle: under 5 %). bob: a reservation of card 2 from
    T0+1h to T0+5h, unused for 2 h, then at 40 %. carol: a job on card 4 from
    T0+4h to T0+6h at 100 %, with no uid recorded (matched by name).
    """
    scene = Scene(8)
    ledger = ledger_at(tmp_path, clock)

    def carol() -> None:
        job = scene.hold("carol-1", CAROL, [4], started_at=T0 + 4 * HOUR)
        scene.jobs["carol-1"] = replace(job, uid=None)
        scene.set(4, util=100, mem=80_000)

    events = {
        T0: lambda: (
            scene.hold("train", ALICE, [0, 1], started_at=T0),
            scene.set(0, 80, 40_000),
            scene.set(1, 80, 50_000),
        ),
        T0 + HOUR: lambda: scene.hold("desk", BOB, [2], kind="reservation", started_at=T0 + HOUR),
        T0 + 2 * HOUR: lambda: (scene.hold("eval", ALICE, [3], started_at=T0 + 2 * HOUR), scene.set(3, 2, 3_000)),
        T0 + 2.5 * HOUR: lambda: scene.exit("eval"),
        T0 + 3 * HOUR: lambda: (scene.remove("train"), scene.set(2, 40, 10_000)),
        T0 + 4 * HOUR: carol,
        T0 + 5 * HOUR: lambda: scene.remove("desk"),
        T0 + 6 * HOUR: lambda: scene.remove("carol-1"),
    }
    last = run(ledger, scene, T0 - 600, T0 + 7 * HOUR, step, events)
    clock.now = last
    return ledger, last


def test_the_report_agrees_with_the_holds_to_the_minute(tmp_path):
    clock = Clock()
    ledger, _ = a_day(tmp_path, clock)
    report = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "user", ROOT)
    got = by_user(report)
    assert set(got) == {"alice", "bob", "carol"}
    alice, bob, carol = got["alice"], got["bob"], got["carol"]
    assert near(alice.held_card_hours, 2 * 3 + 0.5, cards=3)
    assert near(alice.used_card_hours, 2 * 3 * 0.8 + 0.5 * 0.02, cards=3)
    assert near(alice.idle_card_hours, 0.5, cards=1)  # the 2 % job
    assert (alice.jobs, alice.reservations, alice.peak_memory_mib) == (2, 0, 50_000)
    assert near(bob.held_card_hours, 4) and near(bob.used_card_hours, 2 * 0.4) and near(bob.idle_card_hours, 2)
    assert (bob.jobs, bob.reservations) == (0, 1)
    assert near(carol.held_card_hours, 2) and near(carol.used_card_hours, 2) and carol.idle_card_hours == 0
    assert [r.uid for r in report.rows] == [5001, 5002, None]  # most held first; carol recorded no uid
    total = report.total
    assert near(total.held_card_hours, 12.5, cards=5) and near(total.used_card_hours, 4.8 + 0.01 + 0.8 + 2, cards=5)
    assert (total.jobs, total.reservations) == (3, 1)
    assert report.everyone and report.by == "user"
    units_equal_samples(tmp_path / "state")


def test_a_span_counts_only_the_part_of_each_hold_inside_it(tmp_path):
    clock = Clock()
    ledger, _ = a_day(tmp_path, clock)
    report = usage_report(ledger, T0 + HOUR + 1800, T0 + 2 * HOUR + 1800, "user", ROOT)
    got = by_user(report)
    # alice: cards 0,1 the whole hour, card 3 its first half hour; bob unused all of it
    assert near(got["alice"].held_card_hours, 2.5, cards=3)
    assert near(got["alice"].used_card_hours, 1.6 + 0.01, cards=3)
    assert near(got["bob"].held_card_hours, 1) and near(got["bob"].idle_card_hours, 1)
    assert "carol" not in got
    assert near(report.total.held_card_hours, 3.5, cards=4)
    assert (report.total.jobs, report.total.reservations) == (2, 1)


def test_each_account_sees_its_own_rows_and_the_nodes_total(tmp_path):
    clock = Clock()
    ledger, _ = a_day(tmp_path, clock)
    everyone = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "user", ROOT)
    own = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "user", BOB)
    assert [r.user for r in own.rows] == ["bob"] and not own.everyone
    assert own.total == everyone.total
    assert own.rows[0] == next(r for r in everyone.rows if r.user == "bob")
    # carol's job recorded no uid: she is known by name, as the node's rules know her
    assert [r.user for r in usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "job", CAROL).rows] == ["carol"]
    nobody = Caller(uid=5099, gid=5099, user="dave")
    nothing = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "card", nobody)
    assert nothing.rows == () and nothing.total == everyone.total


def test_by_card_and_by_job(tmp_path):
    clock = Clock()
    ledger, _ = a_day(tmp_path, clock, step=5.0)
    cards = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "card", ROOT)
    assert [r.card for r in cards.rows] == [0, 1, 2, 3, 4]
    held = {r.card: r.figures.held_card_hours for r in cards.rows}
    for card, want in {0: 3, 1: 3, 2: 4, 3: 0.5, 4: 2}.items():
        assert near(held[card], want), (card, held[card])
    assert cards.total == usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "user", ROOT).total
    mine = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "card", ALICE)
    assert [r.card for r in mine.rows] == [0, 1, 3]

    jobs = usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "job", ROOT)
    assert [(r.run_id, r.kind, r.user, r.cards) for r in jobs.rows] == [
        ("train", "job", "alice", (0, 1)),
        ("desk", "reservation", "bob", (2,)),
        ("eval", "job", "alice", (3,)),
        ("carol-1", "job", "carol", (4,)),
    ]
    spans = {r.run_id: (r.start, r.end) for r in jobs.rows}
    for run_id, (start, end) in {
        "train": (T0, T0 + 3 * HOUR),
        "desk": (T0 + HOUR, T0 + 5 * HOUR),
        "eval": (T0 + 2 * HOUR, T0 + 2.5 * HOUR),
        "carol-1": (T0 + 4 * HOUR, T0 + 6 * HOUR),
    }.items():
        got_start, got_end = spans[run_id]
        assert got_start == start and got_end is not None and 0 <= got_end - end <= 60, (run_id, spans[run_id])
    assert [r.run_id for r in usage_report(ledger, T0 - HOUR, T0 + 8 * HOUR, "job", ALICE).rows] == ["train", "eval"]


def test_a_hold_still_open_counts_up_to_now(tmp_path):
    clock = Clock()
    scene = Scene(2)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("open", ALICE, [0, 1], kind="reservation", started_at=T0)
    clock.now = run(ledger, scene, T0, T0 + 2 * HOUR)
    [row] = usage_report(ledger, T0 - HOUR, T0 + 10 * HOUR, "job", ROOT).rows
    assert row.end is None and near(row.figures.held_card_hours, 4, cards=2)
    assert near(row.figures.idle_card_hours, 4, cards=2)  # no process on either card


# ── what counts as idle, and MIG slices ────────────────────────────────────


@pytest.mark.parametrize(
    ("util", "who", "idle"),
    [
        (60, "holder", False),
        (3, "holder", True),  # under 5 %
        (90, "none", True),  # no process of the holder
        (90, "intruder", True),  # someone else's process keeps it busy: the holder is not using it
        (None, "unseen", None),  # nothing can be told: neither idle nor used
    ],
)
def test_what_counts_as_idle(tmp_path, util, who, idle):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("j", ALICE, [0], started_at=T0)
    scene.set(0, util=util, mem=100, who=who)
    clock.now = run(ledger, scene, T0, T0 + HOUR, step=10)
    figures = usage_report(ledger, T0, T0 + HOUR, "user", ROOT).total
    assert near(figures.held_card_hours, 1)
    want_idle = 1.0 if idle else 0.0
    assert near(figures.idle_card_hours, want_idle)
    holder = rows(tmp_path / "state", "SELECT DISTINCT holder FROM samples")
    assert holder == [({"holder": 1, "none": 0, "intruder": 0, "unseen": None}[who],)]


def test_a_mig_slice_is_counted_in_slice_hours_not_card_hours(tmp_path):
    clock = Clock()
    scene = Scene(2)
    scene.split(1, ("MIG-a", "1g.18gb"), ("MIG-b", "3g.71gb"))
    ledger = ledger_at(tmp_path, clock)
    scene.hold("small", ALICE, slices=[SliceRef(1, "MIG-a", "1g.18gb")], started_at=T0)
    scene.set_slice("MIG-a", mem=9_000, who="holder")
    scene.hold("whole", BOB, [0], started_at=T0)
    scene.set(0, util=100, mem=1_000)
    clock.now = run(ledger, scene, T0, T0 + 2 * HOUR, step=10)
    got = by_user(usage_report(ledger, T0, T0 + 2 * HOUR, "user", ROOT))
    assert got["alice"].held_card_hours == 0 and near(got["alice"].held_slice_hours, 2)
    assert got["alice"].idle_slice_hours == 0 and got["alice"].peak_memory_mib == 9_000
    assert near(got["bob"].held_card_hours, 2) and got["bob"].held_slice_hours == 0
    [job] = usage_report(ledger, T0, T0 + 2 * HOUR, "job", ALICE).rows
    assert job.slices == (SliceRef(1, "MIG-a", "1g.18gb"),) and job.cards == ()
    assert [r.card for r in usage_report(ledger, T0, T0 + 2 * HOUR, "card", ROOT).rows] == [0, 1]


# ── someone else's use of a held card ──────────────────────────────────────


def test_an_intruder_s_memory_is_not_its_holder_s_and_is_shown_as_such(tmp_path):
    """bob's reservation of card 0 is unused, and mallory's process uses 29.3 GiB
    of it: bob is charged none of that memory, and the report says someone
    else's process was on his card, how long and with how much. On alice's
    card beside her job's 15,000 MiB, an intruder's 5,000 are the intruder's."""
    clock = Clock()
    scene = Scene(2)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("rsv-bob", BOB, [0], kind="reservation", started_at=T0)
    scene.set(0, util=97, mem=30_000, who="intruder")
    scene.hold("train", ALICE, [1], started_at=T0)
    scene.set(1, util=80, mem=20_000, who="holder", intruder_mem=5_000)
    clock.now = run(ledger, scene, T0, T0 + HOUR, step=10)
    got = by_user(usage_report(ledger, T0, T0 + HOUR, "user", ROOT))
    assert got["bob"].peak_memory_mib == 0 and got["bob"].used_card_hours == 0
    assert near(got["bob"].intruded_card_hours, 1) and got["bob"].intruder_peak_memory_mib == 30_000
    assert got["alice"].peak_memory_mib == 15_000 and got["alice"].intruder_peak_memory_mib == 5_000
    assert near(got["alice"].intruded_card_hours, 1)
    [job] = usage_report(ledger, T0, T0 + HOUR, "job", BOB).rows
    assert job.figures.peak_memory_mib == 0 and job.figures.intruder_peak_memory_mib == 30_000
    units_equal_samples(tmp_path / "state")


def test_memory_nobody_s_process_accounts_for_is_the_holder_s_and_an_unread_list_is_unknown(tmp_path):
    """From inside a container the driver lists pids this machine cannot see:
    memory no one else's process accounts for is the holder's, as the idle mark
    counts it. A list that could not be read says nothing of whose it is."""
    clock = Clock()
    scene = Scene(2)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("seen-from-a-container", ALICE, [0], started_at=T0)
    scene.set(0, util=50, mem=12_000, who="unseen")
    scene.hold("unread", BOB, [1], started_at=T0)
    scene.set(1, util=50, mem=12_000, who=None)
    clock.now = run(ledger, scene, T0, T0 + 10 * 60, step=10)
    got = by_user(usage_report(ledger, T0, T0 + HOUR, "user", ROOT))
    assert got["alice"].peak_memory_mib == 12_000 and got["alice"].intruded_card_hours == 0
    assert got["bob"].peak_memory_mib is None and got["bob"].intruder_peak_memory_mib is None


# ── counters for /metrics ──────────────────────────────────────────────────


def test_counters_and_the_last_write_for_metrics(tmp_path):
    clock = Clock()
    scene = Scene(4)
    ledger = ledger_at(tmp_path, clock)
    assert ledger.counters().last_write is None
    run(ledger, scene, T0, T0 + 125, step=5)  # nothing held: it still writes once a minute
    assert ledger.counters().last_write == T0 + 120
    assert rows(tmp_path / "state", "SELECT value FROM meta WHERE key = 'last_write'") == [(T0 + 120,)]
    scene.hold("a", ALICE, [0, 1], started_at=T0 + 130)
    scene.set(0, util=50)
    scene.set(1, util=1)  # idle: under 5 %
    run(ledger, scene, T0 + 130, T0 + 130 + 600, step=5)
    counters = ledger.counters()
    assert counters.held_s == {"alice": pytest.approx(1200)}
    assert counters.idle_s == {"alice": pytest.approx(600)}
    assert counters.problem is None and counters.last_write == T0 + 720  # the last minute turned at T0+720


def test_the_report_counts_the_minute_under_way_as_the_metrics_do(tmp_path):
    """/metrics counts each reading as it comes; the ledger writes a minute once
    it is over. The report adds what was read and not yet written, so the two
    agree at any moment, not a minute apart."""
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("j", ALICE, [0], started_at=T0)
    scene.set(0, util=1)  # idle: under 5 %
    for end in (T0 + 50, T0 + 170, T0 + 185):
        clock.now = run(ledger, scene, clock.now if end > T0 + 50 else T0, end, step=5)
        figures = usage_report(ledger, T0, T0 + HOUR, "user", ROOT).total
        assert figures.idle_card_hours * 3600 == pytest.approx(ledger.counters().idle_s["alice"]), end


# ── the file ──────────────────────────────────────────────────────────────


def test_the_file_is_the_agents_own_in_wal_mode(tmp_path):
    clock = Clock()
    ledger = ledger_at(tmp_path, clock)
    run(ledger, Scene(1), T0, T0 + 65)
    path = tmp_path / "state" / LEDGER_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    for side in ("-wal", "-shm"):
        assert stat.S_IMODE(path.with_name(LEDGER_FILE + side).stat().st_mode) == 0o600
    assert rows(tmp_path / "state", "PRAGMA journal_mode") == [("wal",)]
    ledger.close()
    os.chmod(path, 0o644)  # loosened by hand: made the agent's own again when opened
    run(ledger_at(tmp_path, clock), Scene(1), T0 + 70, T0 + 75)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


#: the tables a ledger of schema 1 had: before someone else's use was kept apart
SCHEMA_1 = """
CREATE TABLE holds (id INTEGER PRIMARY KEY, run_id BLOB NOT NULL, kind BLOB NOT NULL, user BLOB NOT NULL,
    uid INTEGER, cards TEXT NOT NULL, slices TEXT NOT NULL, job_started REAL, started REAL NOT NULL,
    last_seen REAL NOT NULL, ended REAL);
CREATE TABLE samples (hold_id INTEGER NOT NULL, card INTEGER NOT NULL, slice BLOB NOT NULL, at INTEGER NOT NULL,
    seconds REAL NOT NULL, util_pct REAL, measured_s REAL NOT NULL, used_s REAL NOT NULL, idle_s REAL NOT NULL,
    mem_mib INTEGER, holder INTEGER, PRIMARY KEY (hold_id, card, slice, at)) WITHOUT ROWID;
CREATE TABLE units (hold_id INTEGER NOT NULL, card INTEGER NOT NULL, slice BLOB NOT NULL, seconds REAL NOT NULL,
    measured_s REAL NOT NULL, used_s REAL NOT NULL, idle_s REAL NOT NULL, peak_mem_mib INTEGER,
    first_at INTEGER NOT NULL, last_at INTEGER NOT NULL, PRIMARY KEY (hold_id, card, slice)) WITHOUT ROWID;
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
INSERT INTO holds VALUES (1, X'6f6c64', X'6a6f62', X'616c696365', 5001, '0', '[]', NULL, {t0}, {t1}, {t1});
INSERT INTO samples VALUES (1, 0, X'', {t0}, 60, 50, 60, 30, 0, 9000, 1);
INSERT INTO units VALUES (1, 0, X'', 60, 60, 30, 0, 9000, {t0}, {t0});
PRAGMA user_version = 1;
"""


def test_a_ledger_of_the_version_before_is_kept_and_goes_on(tmp_path):
    """A schema 1 file gains the columns for someone else's use; what it held is reported as it was."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    conn = sqlite3.connect(state / LEDGER_FILE)
    conn.executescript(SCHEMA_1.format(t0=T0 - HOUR, t1=T0 - HOUR + 60))
    conn.close()
    os.chmod(state / LEDGER_FILE, 0o600)
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("new", ALICE, [0], started_at=T0)
    scene.set(0, util=80, mem=20_000, who="holder", intruder_mem=5_000)
    clock.now = run(ledger, scene, T0, T0 + 10 * 60, step=10)
    assert rows(state, "PRAGMA user_version") == [(SCHEMA_VERSION,)] and SCHEMA_VERSION == 2
    jobs = {r.run_id: r.figures for r in usage_report(ledger, T0 - 2 * HOUR, T0 + HOUR, "job", ROOT).rows}
    assert jobs["old"].peak_memory_mib == 9000 and jobs["old"].intruded_card_hours == 0
    assert jobs["new"].peak_memory_mib == 15_000 and jobs["new"].intruder_peak_memory_mib == 5_000
    units_equal_samples(state)


def test_a_file_that_is_not_a_ledger_is_left_alone_and_said(tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / LEDGER_FILE).write_bytes(b"not a database at all " * 100)
    clock = Clock()
    ledger = ledger_at(tmp_path, clock)
    scene = Scene(1)
    scene.hold("a", ALICE, [0], started_at=T0)
    run(ledger, scene, T0, T0 + 300)  # never raises: a poll must go on
    counters = ledger.counters()
    assert counters.last_write is None and "cannot open the usage ledger" in (counters.problem or "")
    assert (state / LEDGER_FILE).read_bytes() == b"not a database at all " * 100
    assert sum("cannot open the usage ledger" in r.getMessage() for r in caplog.records) == 1  # said once
    with pytest.raises(RuntimeUnavailable, match="cannot read the usage ledger"):
        usage_report(ledger, T0, T0 + 300, "user", ROOT)


def test_a_ledger_from_a_newer_version_is_not_written(tmp_path):
    clock = Clock()
    ledger = ledger_at(tmp_path, clock)
    run(ledger, Scene(1), T0, T0 + 65)
    ledger.close()
    path = tmp_path / "state" / LEDGER_FILE
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    later = ledger_at(tmp_path, clock)
    run(later, Scene(1), T0 + 70, T0 + 200)
    assert "a newer version wrote it" in (later.problem or "")
    assert rows(tmp_path / "state", "SELECT value FROM meta") == [(T0 + 65,)]


def test_a_write_that_fails_is_kept_and_written_later(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("a", ALICE, [0], started_at=T0)
    scene.set(0, util=100)
    run(ledger, scene, T0, T0 + 60)
    blocker = sqlite3.connect(tmp_path / "state" / LEDGER_FILE, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the file: each write times out
    ledger._conn.execute("PRAGMA busy_timeout = 0")  # each try fails at once, not after 5 s
    run(ledger, scene, T0 + 65, T0 + 300)
    assert "cannot write the usage ledger" in (ledger.problem or "")
    assert ledger.counters().last_write == T0 + 60
    blocker.execute("ROLLBACK")
    blocker.close()
    run(ledger, scene, T0 + 305, T0 + 365)
    assert ledger.problem is None and ledger.counters().last_write == T0 + 360
    [(seconds,)] = rows(tmp_path / "state", "SELECT SUM(seconds) FROM samples")
    assert seconds == pytest.approx(360)  # every finished minute, none lost while the file was locked
    units_equal_samples(tmp_path / "state")


# ── restarts and kill -9 ───────────────────────────────────────────────────


def test_after_a_restart_a_job_that_still_runs_keeps_its_hold(tmp_path):
    clock = Clock()
    scene = Scene(2)
    scene.hold("long", ALICE, [0], started_at=T0)
    scene.hold("short", BOB, [1], started_at=T0)
    scene.set(0, util=100)
    scene.set(1, util=100)
    first = ledger_at(tmp_path, clock)
    last = run(first, scene, T0, T0 + HOUR + 30)
    del first  # the agent dies: nothing closed, nothing flushed
    scene.remove("short")  # ended while the agent was away
    second = ledger_at(tmp_path, clock)
    clock.now = run(second, scene, T0 + 2 * HOUR, T0 + 3 * HOUR)
    jobs = {r.run_id: r for r in usage_report(second, T0, T0 + 4 * HOUR, "job", ROOT).rows}
    assert set(jobs) == {"long", "short"}
    # the job still running: one hold from its start, held while the agent was away, but read only when it was not
    assert jobs["long"].start == T0 and jobs["long"].end is None
    assert near(jobs["long"].figures.held_card_hours, 3)
    assert near(jobs["long"].figures.used_card_hours, 2)
    # the job gone: closed at the last time it was seen held, at most a minute before the agent died
    assert jobs["short"].end is not None and last - 60 <= jobs["short"].end <= last
    assert rows(tmp_path / "state", "SELECT COUNT(*) FROM holds") == [(2,)]


def test_a_run_id_given_again_is_a_hold_of_its_own(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("again", ALICE, [0], started_at=T0)
    run(ledger, scene, T0, T0 + HOUR)
    scene.hold("again", ALICE, [0], started_at=T0 + HOUR + 1)  # ended and launched again between two polls
    clock.now = run(ledger, scene, T0 + HOUR + 5, T0 + 2 * HOUR)
    jobs = usage_report(ledger, T0, T0 + 2 * HOUR, "job", ROOT).rows
    assert [(r.run_id, r.start) for r in jobs] == [("again", T0), ("again", T0 + HOUR + 1)]


def test_kill_9_loses_at_most_the_last_minute_and_never_the_file(tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    start = T0
    for minutes in (10, 23, 41):  # three children, each killed wherever it got to
        child = subprocess.Popen(
            [sys.executable, str(LEDGER_CHILD), str(state), str(start)], env=env, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        try:
            for line in child.stdout:
                if float(line) >= start + minutes * 60 + 17:
                    break
            child.send_signal(signal.SIGKILL)
            last = max([float(line)] + [float(more) for more in child.stdout])
        finally:
            child.kill()
            child.wait()
        conn = sqlite3.connect(state / LEDGER_FILE)  # recovers the WAL as the next agent would
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            [(written_to,)] = conn.execute("SELECT MAX(at) + 60 FROM samples").fetchall()
            holds = conn.execute("SELECT run_id, started, ended, last_seen FROM holds").fetchall()
        finally:
            conn.close()
        # every minute that ended before the last reading printed is there (the child
        # may have read once more before the kill came, and written more)
        assert written_to >= (last // 60) * 60 and last - written_to < 61
        assert holds == [(b"long-run", T0, None, holds[0][3])] and last - holds[0][3] < 61
        units_equal_samples(state)
        start = last + 30  # the next agent starts half a minute later
    clock = Clock(start + HOUR)
    ledger = UsageLedger(state, clock=clock)
    scene = Scene(8)
    scene.hold("long-run", ALICE, range(8), started_at=T0)
    for card in range(8):
        scene.set(card, util=50, mem=1000)
    run(ledger, scene, start, start + HOUR)
    [row] = usage_report(ledger, T0, clock.now, "job", ROOT).rows
    held_h = (clock.now - T0) / 3600
    assert row.end is None and near(row.figures.held_card_hours, 8 * held_h, cards=8)
    # each of the three kills lost at most a minute and the half minute before the next start
    assert 0.5 * 8 * (held_h - 3 * 95 / 3600) <= row.figures.used_card_hours <= 0.5 * 8 * held_h


# ── pruning ───────────────────────────────────────────────────────────────


def test_what_is_older_than_the_days_kept_is_pruned(tmp_path):
    clock = Clock()
    scene = Scene(2)
    ledger = ledger_at(tmp_path, clock, days=2)
    scene.set(0, util=100)
    scene.set(1, util=100)
    scene.hold("reserved", BOB, [1], kind="reservation", started_at=T0)  # held all along
    events = {}
    for day in range(5):  # alice: one job a day, 8:00 to 10:00 into the day
        at = T0 + day * 86400

        def begin(day=day, at=at):
            scene.hold(f"day-{day}", ALICE, [0], started_at=at + 8 * HOUR)

        events[at + 8 * HOUR] = begin
        events[at + 10 * HOUR] = lambda day=day: scene.remove(f"day-{day}")
    clock.now = run(ledger, scene, T0, T0 + 5 * 86400, step=30, events=events)
    cutoff = clock.now - 2 * 86400
    state = tmp_path / "state"
    kept = [r[0] for r in rows(state, "SELECT run_id FROM holds ORDER BY started")]
    # the pruning runs once an hour: what ended more than 2 days and an hour ago is gone
    assert kept == [b"reserved", b"day-3", b"day-4"]
    [(oldest,)] = rows(state, "SELECT MIN(at) FROM samples")
    assert cutoff - PRUNE_SLACK <= oldest
    units_equal_samples(state)
    report = usage_report(ledger, T0, clock.now, "user", ROOT)
    assert report.since == pytest.approx(cutoff)  # nothing older is reported
    got = by_user(report)
    assert near(got["bob"].held_card_hours, 48) and near(got["bob"].used_card_hours, 48)
    assert near(got["alice"].held_card_hours, 4, cards=2) and got["alice"].jobs == 2


#: the pruning runs once an hour
PRUNE_SLACK = 3600 + 60


# ── hostile strings ───────────────────────────────────────────────────────

HOSTILE_USER = "evil\x1b[2J\u202eresu\x00\ud800"
HOSTILE_RUN = "run-\x1b]0;pwned\x07-\u200b-\udcff"


def test_hostile_names_are_kept_and_given_back_intact(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    owner = Caller(uid=6000, gid=6000, user=HOSTILE_USER)
    scene.hold(HOSTILE_RUN, owner, [0], started_at=T0)
    clock.now = run(ledger, scene, T0, T0 + 600)
    [job] = usage_report(ledger, T0, clock.now, "job", ROOT).rows
    assert (job.run_id, job.user) == (HOSTILE_RUN, HOSTILE_USER)
    [user] = usage_report(ledger, T0, clock.now, "user", owner).rows
    assert user.user == HOSTILE_USER and user.uid == 6000
    restarted = ledger_at(tmp_path, clock)  # read back from the file, then matched to the same job
    run(restarted, scene, T0 + 610, T0 + 700)
    assert rows(tmp_path / "state", "SELECT COUNT(*) FROM holds") == [(1,)]


# ── the node's own snapshots ──────────────────────────────────────────────


async def test_the_ledger_reads_the_snapshots_the_node_serves(tmp_path):
    """Launched through the node's service, read by the allocator: the snapshot
    the service would hand the ledger names the owner's uid, and a card's own
    process tells the holder apart from an intruder on the other card."""
    node = ServiceNode(tmp_path / "node", 4, probe="static", runtime="memory")
    try:
        await node.launch(ALICE, "alice-train", 2)
        await node.launch(BOB, "bob-train", 1)
        jobs = {j.run_id: j for j in (await node.service.poll()).snapshot.jobs}
        mine, bobs = jobs["alice-train"].gpus, jobs["bob-train"].gpus
        node.probe.set_card(mine[0], utilization_pct=70, memory_used_mib=5000)
        node.probe.set_card(mine[1], utilization_pct=90, processes=(ProcessFacts(os.getpid(), 2048),))
        node.probe.set_card(bobs[0], utilization_pct=100, memory_used_mib=9000)
        snap = (await node.service.poll()).snapshot
    finally:
        await node.close()
    assert snap is not None and snap.intruder_cards == (mine[1],)  # root's process on alice's card
    clock = Clock()
    ledger = ledger_at(tmp_path, clock)
    for n in range(0, 3601, 10):
        ledger.update(replace(snap, taken_at=T0 + n))
    clock.now = T0 + 3600
    got = by_user(usage_report(ledger, T0, T0 + 3600, "user", ROOT))
    assert {r.uid for r in usage_report(ledger, T0, T0 + 3600, "user", ROOT).rows} == {ALICE.uid, BOB.uid}
    # the card only an intruder's process is on is idle, and its 90 % is not alice's use
    assert near(got["alice"].held_card_hours, 2) and near(got["alice"].used_card_hours, 0.7)
    assert near(got["alice"].idle_card_hours, 1)
    assert near(got["bob"].used_card_hours, 1) and got["bob"].idle_card_hours == 0


def test_a_clock_set_back_does_not_stop_the_ledger(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("a", ALICE, [0], started_at=T0 - 3 * HOUR)
    scene.set(0, util=100)
    run(ledger, scene, T0, T0 + HOUR)
    run(ledger, scene, T0 + HOUR - 30, T0 + HOUR - 10)  # a little back: the same readings again, skipped
    run(ledger, scene, T0 - 2 * HOUR, T0 - HOUR)  # set back two hours: recorded from there on
    [(seconds,)] = rows(tmp_path / "state", "SELECT SUM(seconds) FROM samples")
    assert seconds == pytest.approx(2 * HOUR)  # both hours read, each written to its last minute
    assert ledger.problem is None
    units_equal_samples(tmp_path / "state")


def test_closed_and_opened_again_it_goes_on_from_the_file(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("a", ALICE, [0], started_at=T0)
    scene.set(0, util=100)
    run(ledger, scene, T0, T0 + 90)
    ledger.close()  # writes the half minute under way
    assert rows(tmp_path / "state", "SELECT SUM(seconds), COUNT(*) FROM samples") == [(90.0, 2)]
    clock.now = run(ledger, scene, T0 + 95, T0 + 600)
    assert rows(tmp_path / "state", "SELECT run_id, started, ended FROM holds") == [(b"a", T0, None)]
    [job] = usage_report(ledger, T0, clock.now, "job", ROOT).rows
    assert near(job.figures.used_card_hours, 600 / 3600)
    units_equal_samples(tmp_path / "state")


# ── jobs no reading saw live, and each account's bound ───────────────────


def test_a_job_that_began_and_ended_between_two_readings_has_a_hold_of_its_own(tmp_path):
    """The agent removes exited jobs beyond an account's limit once the ledger has
    them, so a job of a moment, never seen live, must be there too: held until the
    reading that found it exited, as a job seen live is held until the reading after."""
    clock = Clock()
    scene = Scene(4)
    ledger = ledger_at(tmp_path, clock)
    assert ledger.update(scene.snap(T0))
    scene.hold("quick", ALICE, [2], started_at=T0 + 2)
    scene.exit("quick")
    assert ledger.update(scene.snap(T0 + 5))  # written: its record may go now
    for t in (T0 + 10, T0 + 15):  # listed again and again until then: taken in once
        assert ledger.update(scene.snap(t))
    held = rows(tmp_path / "state", "SELECT run_id, user, uid, cards, job_started, started, ended FROM holds")
    assert held == [(b"quick", b"alice", ALICE.uid, "2", T0 + 2, T0 + 2, T0 + 5)]
    [job] = usage_report(ledger, T0 - HOUR, T0 + HOUR, "job", ROOT).rows
    assert (job.run_id, job.user, job.cards, job.start, job.end, job.figures.jobs) == (
        "quick",
        "alice",
        (2,),
        T0 + 2,
        T0 + 5,
        1,
    )


def test_a_job_seen_live_and_then_exited_is_one_hold(tmp_path):
    clock = Clock()
    scene = Scene(2)
    ledger = ledger_at(tmp_path, clock)
    scene.hold("seen", BOB, [0], started_at=T0)
    run(ledger, scene, T0, T0 + 30)
    scene.exit("seen")
    clock.now = run(ledger, scene, T0 + 35, T0 + 60)
    assert rows(tmp_path / "state", "SELECT run_id, started, ended FROM holds") == [(b"seen", T0, T0 + 35)]


def test_after_a_restart_the_exited_jobs_the_file_has_are_not_taken_again(tmp_path):
    """A new agent's first reading lists exited jobs the last one took in, and
    perhaps one that ended while no agent ran: only that one is added, ended
    where it began, since nobody saw when it ended."""
    clock = Clock()
    scene = Scene(4)
    first = ledger_at(tmp_path, clock)
    scene.hold("seen", ALICE, [0], started_at=T0)
    run(first, scene, T0, T0 + 30)
    scene.exit("seen")
    scene.hold("quick", ALICE, [1], started_at=T0 + 31)
    scene.exit("quick")
    run(first, scene, T0 + 35, T0 + 60)
    first.close()
    scene.hold("unseen", BOB, [2], started_at=T0 + 100)  # began and ended while no agent ran
    scene.exit("unseen")
    second = ledger_at(tmp_path, clock)
    assert second.update(scene.snap(T0 + 300))
    clock.now = run(second, scene, T0 + 305, T0 + 400)
    held = rows(tmp_path / "state", "SELECT run_id, started, ended FROM holds ORDER BY started")
    assert held == [(b"seen", T0, T0 + 35), (b"quick", T0 + 31, T0 + 35), (b"unseen", T0 + 100, T0 + 100)]


def test_each_account_keeps_its_newest_ended_holds_and_no_more(tmp_path):
    """One account's churn of quick jobs grows the ledger by its bound at most; the
    holds still open, and another account's, are untouched."""
    clock = Clock()
    scene = Scene(4)
    ledger = ledger_at(tmp_path, clock, holds_per_user=3)
    scene.hold("long", BOB, [0], started_at=T0)
    scene.hold("bobs-old", BOB, [1], started_at=T0)
    scene.exit("bobs-old")
    t = T0
    for n in range(8):
        scene.hold(f"q{n}", ALICE, [2], started_at=t + 1)
        scene.exit(f"q{n}")
        t += 5
        assert ledger.update(scene.snap(t))
        scene.remove(f"q{n}")  # removed as the agent removes it
    clock.now = t
    held = rows(tmp_path / "state", "SELECT run_id, ended FROM holds ORDER BY started, run_id")
    assert [r[0] for r in held] == [b"bobs-old", b"long", b"q5", b"q6", b"q7"]
    assert dict(held)[b"long"] is None
    report = usage_report(ledger, T0 - HOUR, T0 + HOUR, "job", ROOT)
    assert {r.run_id for r in report.rows if r.user == "alice"} == {"q5", "q6", "q7"}


def test_a_reading_the_file_could_not_take_says_so_and_its_exited_jobs_wait(tmp_path):
    clock = Clock()
    scene = Scene(1)
    ledger = ledger_at(tmp_path, clock)
    assert ledger.update(scene.snap(T0))
    blocker = sqlite3.connect(tmp_path / "state" / LEDGER_FILE, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    ledger._conn.execute("PRAGMA busy_timeout = 0")
    scene.hold("quick", ALICE, [0], started_at=T0 + 1)
    scene.exit("quick")
    assert not ledger.update(scene.snap(T0 + 5))  # not written: its record must stay
    assert not ledger.update(scene.snap(T0 + 10))
    blocker.execute("ROLLBACK")
    blocker.close()
    assert ledger.update(scene.snap(T0 + 15))
    assert rows(tmp_path / "state", "SELECT run_id, ended FROM holds") == [(b"quick", T0 + 5)]
