"""A card's drain as JSON, and back."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tpnode_tui.model.views import DRAIN_SOURCES, Drain
from tpnode_tui.port.wire.reader import Reader


def drain_to_json(d: Drain) -> dict[str, Any]:
    return asdict(d)


def read_drain(r: Reader) -> Drain:
    return Drain(
        card=r.whole("card"),
        reason=r.text("reason"),
        by=r.text("by"),
        at=r.number("at"),
        source=r.choice("source", DRAIN_SOURCES, "operator"),
        xid=r.opt_whole("xid"),
        # written before checks: none of these was kept
        boot=r.opt_text("boot"),
        reboot=r.flag("reboot", False),
        ecc=r.opt_whole("ecc"),
        later_xid=r.opt_whole("later_xid"),
        later_xid_at=r.opt_number("later_xid_at"),
    )


def drain_from_json(doc: Any, where: str = "drain") -> Drain:
    return read_drain(Reader(doc, where))
