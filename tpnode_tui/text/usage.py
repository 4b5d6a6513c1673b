"""The usage report in plain words: the lines ``tpnode-tui usage`` prints.

Run ids and owners' names come from other people, so every string of the
report is made printable before it is laid out (a column is then as wide as
its escaped text, and no name can move the cursor); ``usage --json`` keeps
them as they are.
"""

from __future__ import annotations

import time
from typing import Optional

from tpnode_tui.model.usage import IDLE_UTIL_PCT, UsageFigures, UsageReport, UsageRow
from tpnode_tui.text.printable import printable_view
from tpnode_tui.text.render import NA, format_mib
from tpnode_tui.text.table import table

_BY_WORDS = {"user": "by account", "card": "by card", "job": "by job and reservation"}


def when(at: Optional[float]) -> str:
    """A moment as the report says it, in the node's local time: "2026-12-01 14:00"."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def hours(value: float) -> str:
    return f"{value:.2f}"


def usage_lines(report: UsageReport) -> list[str]:
    """The report as the CLI prints it: what it covers, then one row per account (card, job) and the total."""
    report = printable_view(report)
    lines = [f"usage of this node's cards from {when(report.since)} to {when(report.until)}, {_BY_WORDS[report.by]}"]
    if not report.everyone:
        lines.append(OWN_ROWS)
    slices = has_slices(report)
    intruded = intruders(report)
    header, right = _header(report.by, slices, intruded)
    body = [[*_names(row, report.by), *_figures(row.figures, report.by, slices, intruded)] for row in report.rows]
    total = _figures(report.total, report.by, slices, intruded)
    body.append(["total", *[""] * (len(header) - len(total) - 1), *total])
    lines += table(header, body, right)
    if not report.rows:
        lines.append(nothing_held(report))
    if report.left_out:
        lines.append(_left_out(report))
    lines.append(figures_explained(report, slices))
    return lines


#: what a report that is not an operator's holds
OWN_ROWS = "your own rows, and the whole node's total (an operator sees every account's)"


def has_slices(report: UsageReport) -> bool:
    """Whether any row of the report (or its total) held MIG slices: then they have columns of their own."""
    return any(f.held_slice_hours for f in (report.total, *(r.figures for r in report.rows)))


def nothing_held(report: UsageReport) -> str:
    """What a report with no rows says instead."""
    return "nothing of yours was held in this span" if not report.everyone else "nothing was held in this span"


def figures_explained(report: UsageReport, slices: bool) -> str:
    """What the figures count, and how long the node keeps them."""
    unit = "in card-hours (MIG slices: slice-hours)" if slices else "in card-hours"
    theirs = (
        " intruded: held time with someone else's process on the card; intruders' peak: the most memory "
        "those used, never the holder's."
        if intruders(report)
        else ""
    )
    return (
        f"{unit}. used: held time weighted by utilisation while the holder was on the card. "
        f"idle: no process of the holder, or under {IDLE_UTIL_PCT:g} % utilisation. "
        f"peak memory: the most the holder's own processes used in a minute.{theirs} "
        f"The node keeps {report.kept_days} days."
    )


def intruders(report: UsageReport) -> bool:
    """Whether someone else's process was on a held card in the report's span: its columns are shown then."""
    total = report.total
    return total.intruded_card_hours > 0 or total.intruder_peak_memory_mib is not None


def intruder_cells(f: UsageFigures) -> list[str]:
    """Someone else's use of a held card: its card-hours and the most memory it used, never the holder's."""
    theirs = f.intruder_peak_memory_mib
    return [hours(f.intruded_card_hours), "-" if theirs is None else format_mib(theirs)]


def _left_out(report: UsageReport) -> str:
    which = {"job": "earlier jobs and reservations", "user": "smaller accounts", "card": "more cards"}[report.by]
    return (
        f"{report.left_out} {which} of this span are left out (the total counts them): an answer holds at "
        "most the node's page of rows (TUNEPLANE_MAX_PAGE); ask for a shorter span with --since and --until"
    )


def _header(by: str, slices: bool, intruded: bool) -> tuple[list[str], frozenset[int]]:
    names = {"user": ["USER", "UID"], "card": ["CARD"], "job": ["RUN ID", "KIND", "USER", "CARDS", "FROM", "TO"]}[by]
    figures = ["HELD", "USED", "IDLE", *(["SLICES HELD", "SLICES IDLE"] if slices else []), "PEAK MEMORY"]
    figures += ["INTRUDED", "INTRUDERS' PEAK"] if intruded else []
    if by != "job":
        figures += ["JOBS", "RESERVATIONS"]
    header = names + figures
    right = frozenset(range(len(names), len(header))) | ({1} if by == "user" else frozenset())
    return header, right


def _names(row: UsageRow, by: str) -> list[str]:
    if by == "user":
        return [row.user or "(no owner recorded)", "-" if row.uid is None else str(row.uid)]
    if by == "card":
        return [str(row.card)]
    held = ",".join([*map(str, row.cards), *(s.short for s in row.slices)]) or "-"
    return [
        row.run_id or "-",
        row.kind or "-",
        row.user or "-",
        held,
        when(row.start),
        when(row.end) if row.end is not None else "still held",
    ]


def _figures(f: UsageFigures, by: str, slices: bool, intruded: bool) -> list[str]:
    cells = [hours(f.held_card_hours), hours(f.used_card_hours), hours(f.idle_card_hours)]
    if slices:
        cells += [hours(f.held_slice_hours), hours(f.idle_slice_hours)]
    cells.append(NA if f.peak_memory_mib is None else format_mib(f.peak_memory_mib))
    if intruded:
        cells += intruder_cells(f)
    if by != "job":  # a job's row is one job
        cells += [str(f.jobs), str(f.reservations)]
    return cells
