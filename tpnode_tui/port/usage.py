"""The usage report as JSON, and back: what ``usage --json`` prints and the agent answers.

``{"since", "until", "by", "everyone", "kept_days", "rows": [...], "total": {...}}``:
times in unix seconds, figures under the names :class:`~tpnode_tui.model.usage.UsageFigures`
gives them, and ``left_out`` only where the node left rows out of its answer
(more than its page). A row names what it counts by ``by``: ``user`` and
``uid``; or ``card``; or ``run_id`` with its ``kind``, owner (``user``,
``uid``), ``cards``, ``slices`` and ``start``/``end`` (``end`` null while it
still holds them).

Read back as strictly as a snapshot (:mod:`tpnode_tui.port.wire.snapshot`): a
document that is not what this module writes raises WireError naming the
first thing wrong.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

from tpnode_tui.model.jobs import SliceRef
from tpnode_tui.model.usage import USAGE_BY, UsageFigures, UsageReport, UsageRow
from tpnode_tui.port.wire.reader import Reader

_FIGURES = tuple(UsageFigures.__dataclass_fields__)
_NAMES = {
    "user": ("user", "uid"),
    "card": ("card",),
    "job": ("run_id", "kind", "user", "uid", "cards", "slices", "start", "end"),
}


def usage_to_json(report: UsageReport) -> dict[str, Any]:
    doc = {
        "since": report.since,
        "until": report.until,
        "by": report.by,
        "everyone": report.everyone,
        "kept_days": report.kept_days,
        "rows": [_row_json(row, report.by) for row in report.rows],
        "total": asdict(report.total),
    }
    return doc | ({"left_out": report.left_out} if report.left_out else {})


def _row_json(row: UsageRow, by: str) -> dict[str, Any]:
    names: dict[str, Any] = {}
    for key in _NAMES[by]:
        value = getattr(row, key)
        if key == "cards":
            value = list(value)
        elif key == "slices":
            value = [asdict(s) for s in value]
        names[key] = value
    return names | asdict(row.figures)


def _figures(r: Reader) -> UsageFigures:
    return UsageFigures(
        held_card_hours=r.number("held_card_hours"),
        used_card_hours=r.number("used_card_hours"),
        idle_card_hours=r.number("idle_card_hours"),
        held_slice_hours=r.number("held_slice_hours"),
        idle_slice_hours=r.number("idle_slice_hours"),
        peak_memory_mib=r.opt_whole("peak_memory_mib"),
        intruded_card_hours=r.number("intruded_card_hours"),
        intruder_peak_memory_mib=r.opt_whole("intruder_peak_memory_mib"),
        jobs=r.whole("jobs"),
        reservations=r.whole("reservations"),
    )


def _slice(r: Reader) -> SliceRef:
    r.only("card", "uuid", "profile")
    return SliceRef(card=r.whole("card"), uuid=r.text("uuid"), profile=r.text("profile", ""))


def _row(by: str) -> Callable[[Reader], UsageRow]:
    def read(r: Reader) -> UsageRow:
        r.only(*_NAMES[by], *_FIGURES)
        figures = _figures(r)
        if by == "card":
            return UsageRow(figures, card=r.whole("card"))
        if by == "user":
            return UsageRow(figures, user=r.text("user"), uid=r.opt_whole("uid"))
        return UsageRow(
            figures,
            user=r.text("user"),
            uid=r.opt_whole("uid"),
            run_id=r.text("run_id"),
            kind=r.text("kind"),
            cards=r.wholes("cards"),
            slices=tuple(r.each("slices", _slice)),
            start=r.number("start"),
            end=r.opt_number("end"),
        )

    return read


def usage_from_json(doc: Any, where: str = "usage") -> UsageReport:
    r = Reader(doc, where).only("since", "until", "by", "everyone", "kept_days", "rows", "total", "left_out")
    by = r.choice("by", USAGE_BY)
    return UsageReport(
        since=r.number("since"),
        until=r.number("until"),
        by=by,
        rows=tuple(r.each("rows", _row(by))),
        total=_figures(Reader(r.obj("total"), f"{where}.total").only(*_FIGURES)),
        everyone=r.flag("everyone"),
        kept_days=r.whole("kept_days"),
        left_out=r.whole("left_out", 0),
    )
