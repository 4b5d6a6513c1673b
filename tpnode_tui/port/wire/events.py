"""An entry of the node's log, as the agent sends it."""

from __future__ import annotations

from typing import Any

from tpnode_tui.port.wire.reader import Reader


def event_from_json(doc: Any, where: str = "event") -> dict[str, Any]:
    """One entry of the node's log as the agent sent it: an object with at least
    a time, a kind and a message; everything else is kept as it came."""
    r = Reader(doc, where)
    r.number("time")
    r.text("kind")
    r.text("message")
    return dict(r.doc)
