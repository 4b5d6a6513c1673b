"""What an eviction did, as JSON, and back."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tpnode_tui.model.views import BELONGS, Evicted, EvictReport
from tpnode_tui.port.wire.reader import Reader


def evict_to_json(report: EvictReport) -> dict[str, Any]:
    return asdict(report) | {"processes": [asdict(e) for e in report.processes]}


def _evicted(r: Reader) -> Evicted:
    return Evicted(
        card=r.whole("card"),
        pid=r.whole("pid"),
        user=r.opt_text("user"),
        uid=r.opt_whole("uid"),
        command=r.opt_text("command"),
        belongs=r.choice("belongs", BELONGS),
        used_memory_mib=r.opt_whole("used_memory_mib"),
        outcome=r.text("outcome"),
        fate=r.text("fate"),
        started_at=r.opt_number("started_at"),
    )


def evict_from_json(doc: Any, where: str = "evict") -> EvictReport:
    r = Reader(doc, where)
    return EvictReport(
        card=r.whole("card"),
        dry_run=r.flag("dry_run"),
        kill=r.flag("kill"),
        grace_s=r.number("grace_s"),
        processes=tuple(r.each("processes", _evicted)),
    )
