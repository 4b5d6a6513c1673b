"""The usage report: ``usage [--since 7d|2026-12-01] [--until ...] [--by user|card|job]``, from the ledger.

Beside the ledger because it reads the ledger's file, and reading is where
the time goes: a hold whose minutes all lie inside the span is taken from its
summed row, so only holds cut by the span's edges have their minutes read.
What is made of the figures is a pure function, :func:`build_report`. Held
is never less than used, nor than idle. See docs/architecture.md, section
'The usage ledger and idle cards'.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional
from urllib.parse import quote

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import BadRequest, RuntimeUnavailable
from tpnode_tui.model.jobs import SliceRef
from tpnode_tui.model.owners import is_owner
from tpnode_tui.model.usage import USAGE_BY, UsageFigures, UsageReport, UsageRow
from tpnode_tui.state.ledger import (
    Unwritten,
    UsageLedger,
    cards_from_text,
    decoded,
    encoded,
    error_words,
    slices_from_text,
)

# ── what the ledger says of the span ───────────────────────────────────────


@dataclass(frozen=True)
class UnitUsage:
    """What one held card (``slice`` "") or MIG slice's minutes inside the span add up to."""

    card: int
    slice: str
    seconds: float
    used_s: float
    idle_s: float
    #: the most memory the holder used in a minute
    peak_memory_mib: Optional[int]
    #: how long someone else's process was on it, and the most memory those used
    intruded_s: float = 0.0
    intruder_peak_mib: Optional[int] = None

    def plus(self, m: Unwritten) -> UnitUsage:
        """With a minute read and not yet written."""
        return replace(
            self,
            seconds=self.seconds + m.seconds,
            used_s=self.used_s + m.used_s,
            idle_s=self.idle_s + m.idle_s,
            peak_memory_mib=_larger(self.peak_memory_mib, m.memory_mib),
            intruded_s=self.intruded_s + m.intruded_s,
            intruder_peak_mib=_larger(self.intruder_peak_mib, m.intruder_mib),
        )


def _larger(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class HoldUsage:
    """One hold that overlaps the span, and its minutes inside it."""

    run_id: str
    kind: str
    user: str
    uid: Optional[int]
    cards: tuple[int, ...]
    slices: tuple[SliceRef, ...]
    started: float
    #: None while it still holds its cards
    ended: Optional[float]
    units: tuple[UnitUsage, ...] = ()


_HOLDS = (
    "SELECT id, run_id, kind, user, uid, cards, slices, started, ended FROM holds "
    "WHERE started < ? AND COALESCE(ended, ?) > ? ORDER BY started, id"
)
_UNITS = (
    "SELECT u.hold_id, u.card, u.slice, u.seconds, u.used_s, u.idle_s, u.peak_mem_mib, u.intruded_s, "
    "u.intruder_peak_mib, u.first_at, u.last_at "
    "FROM units u JOIN holds h ON h.id = u.hold_id WHERE h.started < ? AND COALESCE(h.ended, ?) > ?"
)
#: one unit's minutes inside the span, for a unit the span cuts (a range of the samples' key)
_CUT = (
    "SELECT COALESCE(SUM(seconds), 0), COALESCE(SUM(used_s), 0), COALESCE(SUM(idle_s), 0), "
    "MAX(mem_mib), COALESCE(SUM(intruded_s), 0), MAX(intruder_mem_mib) "
    "FROM samples WHERE hold_id = ? AND card = ? AND slice = ? AND at >= ? AND at < ?"
)


def read_usage(
    conn: sqlite3.Connection, since: float, until: float, now: float, unwritten: Iterable[Unwritten] = ()
) -> list[HoldUsage]:
    """Every hold overlapping [since, until) and its minutes that start inside it,
    in one read transaction, with those of ``unwritten`` (read, not yet written)."""
    conn.execute("BEGIN")
    try:
        found: dict[tuple[int, int, bytes], UnitUsage] = {}
        for hold_id, card, piece, *figures, first, last in conn.execute(_UNITS, (until, now, since)).fetchall():
            if last < since or first >= until:
                continue
            if not (first >= since and last < until):
                figures = conn.execute(_CUT, (hold_id, card, piece, since, until)).fetchone()
            found[(hold_id, card, piece)] = UnitUsage(card, decoded(piece), *figures)
        for m in unwritten:
            if since <= m.at < until:
                key = (m.hold_id, m.card, encoded(m.slice))
                found[key] = found.get(key, UnitUsage(m.card, m.slice, 0.0, 0.0, 0.0, None)).plus(m)
        units: dict[int, list[UnitUsage]] = {}
        for (hold_id, _card, _piece), unit in found.items():
            units.setdefault(hold_id, []).append(unit)
        holds = [
            HoldUsage(
                run_id=decoded(run_id),
                kind=decoded(kind),
                user=decoded(user),
                uid=uid,
                cards=cards_from_text(cards),
                slices=slices_from_text(slices),
                started=started,
                ended=ended,
                units=tuple(units.get(hold_id, ())),
            )
            for hold_id, run_id, kind, user, uid, cards, slices, started, ended in conn.execute(
                _HOLDS, (until, now, since)
            ).fetchall()
        ]
    finally:
        conn.execute("COMMIT")
    return holds


# ── the report made of it ──────────────────────────────────────────────────


@dataclass
class _Sum:
    held_card_s: float = 0.0
    used_card_s: float = 0.0
    idle_card_s: float = 0.0
    held_slice_s: float = 0.0
    idle_slice_s: float = 0.0
    peak: Optional[int] = None
    intruded_card_s: float = 0.0
    intruder_peak: Optional[int] = None
    holds: set[int] = field(default_factory=set)
    reservations: set[int] = field(default_factory=set)

    def add(self, n: int, hold: HoldUsage, held_s: float, units: tuple[UnitUsage, ...]) -> None:
        """Hold number ``n``'s ``units`` (all of them, or one card's), held ``held_s`` each."""
        (self.reservations if hold.kind == "reservation" else self.holds).add(n)
        for unit in units:
            if unit.slice:
                self.held_slice_s += held_s
                self.idle_slice_s += unit.idle_s
            else:
                self.held_card_s += held_s
                self.used_card_s += unit.used_s
                self.idle_card_s += unit.idle_s
                self.intruded_card_s += unit.intruded_s
            self.peak = _larger(self.peak, unit.peak_memory_mib)
            self.intruder_peak = _larger(self.intruder_peak, unit.intruder_peak_mib)

    def figures(self) -> UsageFigures:
        return UsageFigures(
            held_card_hours=self.held_card_s / 3600.0,
            used_card_hours=self.used_card_s / 3600.0,
            idle_card_hours=self.idle_card_s / 3600.0,
            held_slice_hours=self.held_slice_s / 3600.0,
            idle_slice_hours=self.idle_slice_s / 3600.0,
            peak_memory_mib=self.peak,
            intruded_card_hours=self.intruded_card_s / 3600.0,
            intruder_peak_memory_mib=self.intruder_peak,
            jobs=len(self.holds),
            reservations=len(self.reservations),
        )


def _units(hold: HoldUsage) -> tuple[UnitUsage, ...]:
    """Every card and slice the hold held, with its minutes in the span (none: nothing was read)."""
    read = {(u.card, u.slice): u for u in hold.units}
    held = [(c, "") for c in hold.cards] + [(s.card, s.uuid) for s in hold.slices]
    return tuple(read.get(key) or UnitUsage(key[0], key[1], 0.0, 0.0, 0.0, None) for key in held)


def _groups(
    n: int, hold: HoldUsage, units: tuple[UnitUsage, ...], by: str
) -> list[tuple[object, UsageRow, tuple[UnitUsage, ...]]]:
    """The rows ``hold`` counts in: its key, the row's naming fields, and its ``units`` in that row."""
    if by == "card":
        cards = sorted({u.card for u in units})
        return [
            (card, UsageRow(UsageFigures(), card=card), tuple(u for u in units if u.card == card)) for card in cards
        ]
    if by == "job":
        row = UsageRow(
            UsageFigures(),
            user=hold.user,
            uid=hold.uid,
            run_id=hold.run_id,
            kind=hold.kind,
            cards=hold.cards,
            slices=hold.slices,
            start=hold.started,
            end=hold.ended,
        )
        return [(n, row, units)]
    key = ("uid", hold.uid) if hold.uid is not None else ("user", hold.user)
    return [(key, UsageRow(UsageFigures(), user=hold.user, uid=hold.uid), units)]


def _overlap(start: float, end: float, since: float, until: float) -> float:
    return max(0.0, min(end, until) - max(start, since))


def build_report(
    holds: list[HoldUsage], since: float, until: float, by: str, caller: Caller, now: float, kept_days: int
) -> UsageReport:
    """The report as ``caller`` may see it: their own rows (an operator: everyone's), and the node's total.

    A hold still open is held up to ``now``. A hold with no uid recorded is
    matched by its owner's name, as the node's rules match it.
    """
    if by not in USAGE_BY:
        raise BadRequest(f"--by {by!r} is not one of {', '.join(USAGE_BY)}")
    total = _Sum()
    rows: dict[object, tuple[UsageRow, _Sum]] = {}
    for n, hold in enumerate(holds):  # in the order they began: a later name for a uid is its name now
        held_s = _overlap(hold.started, hold.ended if hold.ended is not None else now, since, until)
        units = _units(hold)
        total.add(n, hold, held_s, units)
        if not (caller.operator or is_owner(hold.uid, hold.user, caller.uid, caller.user)):
            continue
        for key, row, in_row in _groups(n, hold, units, by):
            _, acc = rows.get(key, (row, _Sum()))
            acc.add(n, hold, held_s, in_row)
            rows[key] = (row, acc)
    made = [replace(row, figures=acc.figures()) for row, acc in rows.values()]
    if by == "user":
        made.sort(key=lambda r: (-r.figures.held_card_hours - r.figures.held_slice_hours, r.user or ""))
    elif by == "card":
        made.sort(key=lambda r: r.card or 0)
    return UsageReport(
        since=since,
        until=until,
        by=by,
        rows=tuple(made),
        total=total.figures(),
        everyone=caller.operator,
        kept_days=kept_days,
    )


def within(report: UsageReport, most: int) -> UsageReport:
    """``report`` with at most ``most`` rows (the node's page): the latest jobs,
    or the largest accounts and the first cards, and how many were left out.

    One account's report by job over 90 days is a row for each of its jobs,
    and an account that launched a job a minute would have its 130,000 rows
    encoded by the agent's event loop while every other client waited (20,000
    rows took half a second). The total still counts every row.
    """
    left = len(report.rows) - max(most, 1)
    if left <= 0:
        return report
    rows = report.rows[left:] if report.by == "job" else report.rows[: max(most, 1)]
    return replace(report, rows=rows, left_out=report.left_out + left)


def usage_report(ledger: UsageLedger, since: float, until: float, by: str, caller: Caller) -> UsageReport:
    """The span's use as ``caller`` may see it, read from ``ledger``'s file at its clock's now.

    Read on a connection of its own, so a report never waits for the
    ledger's writes (WAL: readers and the writer do not block each other).
    Nothing older than the days kept is reported, even before a pruning has
    come round to it. A ledger with no file yet has recorded nothing.
    """
    now = ledger.clock()
    kept_from = now - ledger.days * 86400.0
    since = max(since, kept_from)
    if until <= since:
        return build_report([], since, max(until, since), by, caller, now, ledger.days)
    holds: list[HoldUsage] = []
    if ledger.path.exists():
        try:
            conn = sqlite3.connect(f"file:{quote(str(ledger.path))}?mode=ro", uri=True, timeout=5.0)
            try:
                holds = read_usage(conn, since, until, now, ledger.unwritten())
            finally:
                conn.close()
        except (sqlite3.Error, ValueError) as e:  # ValueError: a row that is not what the ledger writes
            raise RuntimeUnavailable(f"cannot read the usage ledger {ledger.path}: {error_words(e)}") from None
    return build_report(holds, since, until, by, caller, now, ledger.days)
