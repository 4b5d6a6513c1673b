"""What is read of the node: the readings, the cards' history, usage, the caller as seen, the node's view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.usage import USAGE_BY
from tpnode_tui.port.fields import Query
from tpnode_tui.port.types.parsing import Limits, given_fields, read_moment

#
# These are written as JSON too (``to_json``), and sent as a query string
# (:func:`tpnode_tui.port.fields.query_of`), which their ``parse`` reads.


@dataclass(frozen=True)
class Nothing:
    """A request that takes nothing (status, whoami, the readings, the queue):
    a parameter given is refused, never ignored."""

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> Nothing:
        q.only()
        return cls()

    def to_json(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class HistoryRequest:
    """Each card's last hour, or one card's."""

    card: Optional[int] = None

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> HistoryRequest:
        q.only("card")
        return cls(q.card("card"))

    def to_json(self) -> dict[str, Any]:
        return given_fields(card=self.card)


@dataclass(frozen=True)
class UsageRequest:
    """Who used which cards from ``since`` to ``until`` (unix seconds), a row
    per account, card or job (``by``). The client turns ``--since 7d`` into a
    time (:func:`tpnode_tui.state.usage.usage_span`), so the node is asked
    for a span, never for words; both ends are required, so a span is never
    the node's guess."""

    since: float
    until: float
    by: str = "user"

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> UsageRequest:
        q.only("since", "until", "by")
        since, until = read_moment(q, "since"), read_moment(q, "until")
        if since >= until:
            raise BadRequest(f"since ({since:.0f}) is not before until ({until:.0f}): a span ends after it starts")
        return cls(since, until, q.choice("by", USAGE_BY, "user"))

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "by": self.by}


@dataclass(frozen=True)
class Reading:
    """What the node last learned of itself, as it is handed to every reader."""

    seq: int
    #: the last good snapshot (None until one poll succeeded)
    snapshot: Optional[NodeSnapshot]
    #: why the latest poll failed; None when it succeeded
    error: Optional[str] = None
    #: when polls started failing (None while they succeed)
    stale_since: Optional[float] = None


@dataclass(frozen=True)
class You:
    """The caller as the node sees them: for the header and ``status --json``."""

    user: str
    uid: int
    operator: bool
    cards_held: int
    card_limit: Optional[int]
    #: who operates the node, as its refusals name them ("root, group tpnode-operators"); "" where not said
    operators: str = ""


@dataclass(frozen=True)
class WhoAmI:
    """The caller as the node sees them, and the pid the kernel named."""

    you: You
    pid: Optional[int]


@dataclass(frozen=True)
class NodeView:
    """One reading of the node, and the caller as the node sees them then."""

    reading: Reading
    you: You

    @property
    def snapshot(self) -> Optional[NodeSnapshot]:
        return self.reading.snapshot
