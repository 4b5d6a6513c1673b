"""Section 8: the usage ledger: the report over 90 days, and what its writes cost an idle agent.

- 90 days of an 8-card node, written through the ledger's own write path
  (``UsageLedger.update``, one reading a minute of the scene's clock, so
  every minute of every held card is one sample: about a million rows, as
  a node whose cards are nearly always held would have): on cards 0-6 jobs
  of 1 to 12 hours with gaps of up to half an hour between them, owners
  drawn from 12 accounts, utilisation and memory drawn per job; card 7 held
  by one reservation for the first 80 days and jobs after. The long reservation
  is the report's worst case: a span that cuts it reads its minutes.
  ``usage`` is then timed (wall clock, each call on a connection of its own,
  as the agent's would be) over the last 90, 30 and 7 days, by account,
  card and job, as an operator (every row) and as one account.
- The ledger's writes for an idle agent: an hour of the scene's clock read
  once a second (3600 ``update`` calls, each minute written as it ends),
  timed in this thread's CPU time, with every card free and with every card
  held by idle jobs. At the agent's one poll a second, CPU seconds per
  update times one is the share of a core.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from common import Limit, Row, Section
from helpers.usage import Scene
from tpnode_tui.host.identity import Caller
from tpnode_tui.state.ledger import UsageLedger
from tpnode_tui.state.usage import usage_report

TITLE = "8. Usage ledger: the report over 90 days of 8 cards, the ledger's writes for an idle agent"
CARDS = 8
DAYS = 90
SEED = 22
OPERATOR = Caller(uid=0, gid=0, user="root", operator=True)
ACCOUNTS = [Caller(uid=6000 + n, gid=6000 + n, user=f"user{n:02d}") for n in range(12)]
START = 1_780_000_200.0


class _Node:
    """The 8-card node's 90 days, as jobs that begin and end on a schedule drawn beforehand."""

    def __init__(self, rng: random.Random) -> None:
        self.scene = Scene(CARDS)
        #: minute -> what happens then, in order
        self.events: dict[int, list[tuple[str, int, str, Caller, int, int]]] = {}
        end = DAYS * 1440
        n = 0
        for card in range(CARDS):
            minute = rng.randrange(0, 120)
            if card == CARDS - 1:
                n += 1
                self._add(minute, "start", card, f"resv-{n}", rng.choice(ACCOUNTS), 0, 0)
                minute += 80 * 1440
                self._add(minute, "end", card, f"resv-{n}", rng.choice(ACCOUNTS), 0, 0)
                minute += 1
            while minute < end:
                n += 1
                length = rng.randrange(60, 12 * 60)
                owner = rng.choice(ACCOUNTS)
                self._add(minute, "start", card, f"job-{n}", owner, rng.randrange(0, 101), rng.randrange(0, 140_000))
                minute += length
                self._add(minute, "end", card, f"job-{n}", owner, 0, 0)
                minute += rng.randrange(1, 30)
        self.holds = n

    def _add(self, minute: int, what: str, card: int, run_id: str, owner: Caller, util: int, mem: int) -> None:
        self.events.setdefault(minute, []).append((what, card, run_id, owner, util, mem))

    def at(self, minute: int) -> None:
        for what, card, run_id, owner, util, mem in self.events.get(minute, ()):
            if what == "start":
                kind = "reservation" if run_id.startswith("resv") else "job"
                self.scene.hold(run_id, owner, [card], kind=kind, started_at=START + minute * 60)
                self.scene.set(card, util=util, mem=mem, who="none" if kind == "reservation" else "holder")
            else:
                self.scene.remove(run_id)
                self.scene.set(card, util=0, mem=0, who="none")


def _build(state: Path) -> tuple[UsageLedger, float, int]:
    """The 90 days, written; the ledger (its clock at their end), the seconds it took, the holds."""
    node = _Node(random.Random(SEED))
    now = START + DAYS * 86400
    ledger = UsageLedger(state, days=DAYS + 1, clock=lambda: now)
    began = time.perf_counter()
    for minute in range(DAYS * 1440 + 1):
        node.at(minute)
        ledger.update(node.scene.snap(START + minute * 60))
    ledger.close()
    return ledger, time.perf_counter() - began, node.holds


def _report_rows(section: Section, ledger: UsageLedger, rounds: int) -> Row:
    now = ledger.clock()
    cases = [
        (f"usage_report_{days}d_{by}{'' if who is OPERATOR else '_own'}", days, by, who)
        for days in (90, 30, 7)
        for by in ("user", "card", "job")
        for who in (OPERATOR, ACCOUNTS[0])
        if who is OPERATOR or by == "user"
    ]
    rows = {
        key: Row(key, f"usage, last {days} days, by {by}{'' if who is OPERATOR else ', one account'}")
        for key, days, by, who in cases
    }
    for _ in range(rounds):  # round by round, so the machine's load drifts over every case alike
        for key, days, by, who in cases:
            began = time.perf_counter()
            usage_report(ledger, now - days * 86400, now, by, who)
            rows[key].samples.append(time.perf_counter() - began)
    section.rows += rows.values()
    return rows["usage_report_90d_user"]


def _write_cost(state: Path, held: bool) -> Row:
    """CPU seconds per update over an hour read once a second (minute writes included), as % of a core at 1/s."""
    scene = Scene(CARDS)
    if held:
        for card in range(CARDS):
            scene.hold(f"idle-{card}", ACCOUNTS[card], [card], started_at=START)
            scene.set(card, util=0, mem=600, who="holder")
    ledger = UsageLedger(state)
    per_minute: list[float] = []
    t = START
    for _ in range(60):
        began = time.thread_time()
        for _ in range(60):
            ledger.update(scene.snap(t))
            t += 1.0
        per_minute.append(time.thread_time() - began)
    ledger.close()
    key = f"ledger_cpu_pct_{'held' if held else 'free'}_8"
    label = f"ledger writes, 8 cards {'held by idle jobs' if held else 'free'}, 1 poll/s (% of a core)"
    # each minute's CPU seconds over its 60 polls a second apart, as a share of a core
    return Row(key, label, [100 * s / 60 for s in per_minute], "%")


def _snapshot_cost(rounds: int) -> Row:
    """What building the scene's snapshot costs, to subtract by eye: the agent builds its own anyway."""
    scene = Scene(CARDS)
    samples = []
    for _ in range(rounds):
        began = time.thread_time()
        for n in range(60):
            scene.snap(START + n)
        samples.append(100 * (time.thread_time() - began) / 60)
    return Row(
        "ledger_bench_snapshot_pct_8",
        "building the bench's snapshots alone, 1/s (% of a core; in both rows above)",
        samples,
        "%",
    )


def run(quick: bool) -> Section:
    section = Section(TITLE)
    root = Path(tempfile.mkdtemp(prefix="tpn-usage-"))
    try:
        ledger, build_s, holds = _build(root / "ninety")
        samples = ledger_samples(root / "ninety")
        section.notes.append(
            f"90 days written through UsageLedger.update in {build_s:.0f} s: {holds} holds, {samples} samples"
        )
        report = _report_rows(section, ledger, 5 if quick else 20)
        free = _write_cost(root / "free", held=False)
        held = _write_cost(root / "held", held=True)
        section.rows += [free, held, _snapshot_cost(20)]
        section.limits += [
            Limit("usage over 90 days of 8 cards, by account (ms)", report, 300),
            Limit("ledger writes, 8 held cards, 1 poll/s (% of a core)", held, 1),
        ]
        section.notes.append("report times by the wall clock, a connection each; write costs in this thread's CPU time")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return section


def ledger_samples(state: Path) -> int:
    conn = sqlite3.connect(state / "usage.sqlite")
    try:
        return int(conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
    finally:
        conn.close()
