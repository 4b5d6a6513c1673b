"""The requests for the node's log and the audit log, and a page of either."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tpnode_tui.port.fields import Query
from tpnode_tui.port.types.parsing import Limits, given_fields, page_limit


@dataclass(frozen=True)
class AuditRequest:
    """The logged actions of the last ``since_s`` seconds (all kept: None), the
    newest ``limit`` (at most the node's page) before ``before`` (unix seconds)."""

    since_s: Optional[float] = None
    limit: Optional[int] = None
    before: Optional[float] = None

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> AuditRequest:
        q.only("since", "limit", "before")
        return cls(q.seconds("since"), q.count("limit", page_limit(limits)), q.time("before"))

    def to_json(self) -> dict[str, Any]:
        return given_fields(since=self.since_s, limit=self.limit, before=self.before)


@dataclass(frozen=True)
class EventsRequest:
    """The node's log, as :class:`AuditRequest`, about ``card`` when one is
    given; ``follow``: then each new entry as it is written."""

    since_s: Optional[float] = None
    card: Optional[int] = None
    follow: bool = False
    limit: Optional[int] = None
    before: Optional[float] = None

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> EventsRequest:
        q.only("since", "card", "follow", "limit", "before")
        return cls(
            q.seconds("since"), q.card("card"), q.flag("follow"), q.count("limit", page_limit(limits)), q.time("before")
        )

    def to_json(self) -> dict[str, Any]:
        follow = True if self.follow else None
        return given_fields(since=self.since_s, card=self.card, follow=follow, limit=self.limit, before=self.before)


@dataclass(frozen=True)
class AuditPage:
    """One answer of the audit: logged actions, oldest first (the caller's own,
    or everyone's for an operator), and whether older ones were left out."""

    entries: tuple[dict[str, Any], ...]
    everyone: bool
    more: bool = False


@dataclass(frozen=True)
class EventsPage:
    """One answer of the node's log, oldest first, and whether older entries were left out."""

    entries: tuple[dict[str, Any], ...]
    more: bool = False
