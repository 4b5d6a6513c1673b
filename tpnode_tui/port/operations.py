"""Every operation a client may ask of a node, declared once.

One table (:data:`OPERATIONS`) gives each operation's name, method and path,
request type, how its answer is written and read back, who may ask it and
what it does; the agent's routes, every client's call and stream, the audit
of a refusal and the docs' list are made from it, and the service binds each
to one handler (``handles`` in tpnode_tui/service/node.py). Who may is the
service's to decide every time; :data:`Who` is what the docs and the audit
say. See docs/architecture.md, section 'The door' ("One table").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Generic, Literal, Optional, Protocol, TypeVar
from urllib.parse import urlencode

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JobOutput, JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.usage import UsageReport
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port.fields import Query, query_of
from tpnode_tui.port.types.checks import CheckRequest
from tpnode_tui.port.types.events import AuditPage, AuditRequest, EventsPage, EventsRequest
from tpnode_tui.port.types.jobs import (
    CancelRequest,
    LaunchRequest,
    LaunchResult,
    LogsRequest,
    ReclaimRequest,
    StopRequest,
)
from tpnode_tui.port.types.notify import NotifyAddRequest, NotifyList, NotifyRemoveRequest, NotifyUrl
from tpnode_tui.port.types.operators import DrainRequest, EvictRequest, UndrainRequest
from tpnode_tui.port.types.parsing import Limits
from tpnode_tui.port.types.readings import HistoryRequest, NodeView, Nothing, Reading, UsageRequest, WhoAmI, You
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest, ShellRequest
from tpnode_tui.port.usage import usage_from_json, usage_to_json
from tpnode_tui.port.wire.checks import check_from_json, check_to_json
from tpnode_tui.port.wire.drains import drain_from_json, drain_to_json
from tpnode_tui.port.wire.events import event_from_json
from tpnode_tui.port.wire.evictions import evict_from_json, evict_to_json
from tpnode_tui.port.wire.history import history_from_json, history_to_json
from tpnode_tui.port.wire.jobs import (
    job_from_json,
    job_to_json,
    launched_from_json,
    launched_to_json,
    output_from_json,
    output_to_json,
    queued_from_json,
    queued_to_json,
    shell_from_json,
    shell_to_json,
)
from tpnode_tui.port.wire.reader import Reader, WireError
from tpnode_tui.port.wire.snapshot import snapshot_from_json, snapshot_to_json

Q = TypeVar("Q", bound="Request")
Q_co = TypeVar("Q_co", bound="Request", covariant=True)
A = TypeVar("A")

#: Who may ask, as the docs and the audit say it (the service decides, every time).
Who = Literal["anyone", "owner or operator", "operators"]

#: A POST's body (a JSON document) or a GET's query string (a Query), as it came.
Source = Any


class Request(Protocol):
    """A request: written as JSON by its client (a GET's then as its query string)."""

    def to_json(self) -> dict[str, Any]: ...


class RequestType(Protocol[Q_co]):
    """A request class: read strictly from what a client sent (its ``parse``)."""

    def parse(self, source: Any, limits: Limits, /) -> Q_co: ...


@dataclass(frozen=True)
class Answer(Generic[A]):
    """How an operation's answer is written (the agent) and read back (its client).

    ``encode`` is None for a stream the agent writes itself: one line per
    item, as made (the readings' encoded snapshot is shared by every stream)."""

    decode: Callable[[Any], A]
    encode: Optional[Callable[[A], dict[str, Any]]] = None
    #: the HTTP status of an answer: 200, or 202 for a launch that was queued
    status: Callable[[A], int] = lambda _answer: 200


@dataclass(frozen=True)
class Operation(Generic[Q, A]):
    """One thing a client may ask of a node."""

    #: what the docs, the audit and the node's log call it (unique in the table)
    name: str
    method: Literal["GET", "POST"]
    path: str
    request: RequestType[Q]
    answer: Answer[A]
    who: Who
    #: what it does, in words that follow "asked to": for the docs and the audit
    says: str
    #: answered as a stream of JSON lines, until the client goes (or the agent stops)
    stream: bool = False
    #: two operations on one path are told apart by the request's ``follow``
    follow: Optional[bool] = None

    def read(self, source: Source, limits: Limits) -> Q:
        """The request in what was sent (a body's JSON, or a query string), read
        with every rule and limit; BadRequest naming the first thing wrong."""
        try:
            if self.method == "GET":
                if not isinstance(source, Query):
                    raise BadRequest(f"{self.path} takes its parameters in the query string")
                return self.request.parse(source, limits)
            return self.request.parse(Reader(source, "request"), limits)
        except WireError as e:
            raise BadRequest(str(e)) from None

    def sent(self, request: Q) -> tuple[str, Optional[dict[str, Any]]]:
        """What a client sends for ``request``: the path (a GET's with its query) and the body (a POST's)."""
        if self.method == "GET":
            query = query_of(request.to_json())
            return (self.path + ("?" + urlencode(query) if query else ""), None)
        return self.path, request.to_json()

    def echoed(self, request: Q) -> Source:
        """``request`` as the agent would receive it: what an in-process node
        reads it back from, so that it is checked exactly as the door checks it."""
        if self.method == "GET":
            return Query(query_of(request.to_json()), self.path)
        return json.loads(json.dumps(request.to_json()))

    def selects(self, request: Any) -> bool:
        return self.follow is None or bool(getattr(request, "follow", False)) == self.follow


# ── the answers ──────────────────────────────────────────────────────────────


def you_from_json(doc: Any) -> You:
    r = Reader(doc, "you")
    limit = r.doc.get("card_limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise WireError("you.card_limit is not a whole number")
    return You(
        user=r.text("user"),
        uid=r.whole("uid"),
        operator=r.flag("operator"),
        cards_held=r.whole("cards_held", 0),
        card_limit=limit,
        operators=r.text("operators", ""),
    )


def _view(view: NodeView) -> dict[str, Any]:
    assert view.snapshot is not None  # the service answers a status only with a snapshot
    return snapshot_to_json(view.snapshot) | {"via": "agent", "you": asdict(view.you)}


def _view_from(doc: Any) -> NodeView:
    r = Reader(doc, "answer")
    rest = {k: v for k, v in r.doc.items() if k not in ("you", "via")}
    return NodeView(Reading(seq=0, snapshot=snapshot_from_json(rest)), you_from_json(r.doc.get("you")))


def _reading_from(doc: Any) -> NodeView:
    """One line of the readings' stream."""
    r = Reader(doc, "reading")
    snap = r.doc.get("snapshot")
    reading = Reading(
        seq=r.whole("seq"),
        snapshot=None if snap is None else snapshot_from_json(snap),
        error=r.opt_text("error"),
        stale_since=r.opt_number("stale_since"),
    )
    return NodeView(reading, you_from_json(r.doc.get("you")))


def _whoami_from(doc: Any) -> WhoAmI:
    return WhoAmI(you_from_json(doc), Reader(doc, "answer").opt_whole("pid"))


def _queue_from(doc: Any) -> tuple[QueuedLaunch, ...]:
    return tuple(queued_from_json(q, "queued launch") for q in Reader(doc, "answer").items("queue"))


def _audit_from(doc: Any) -> AuditPage:
    r = Reader(doc, "answer")
    entries = tuple(e for e in r.items("entries") if isinstance(e, dict))
    return AuditPage(entries, r.flag("all", False), r.flag("more", False))


def _events_from(doc: Any) -> EventsPage:
    r = Reader(doc, "answer")
    entries = tuple(event_from_json(e, f"answer.entries[{n}]") for n, e in enumerate(r.items("entries")))
    return EventsPage(entries, r.flag("more", False))


def _launch_result(result: LaunchResult) -> dict[str, Any]:
    if result.queued is not None:
        return {"queued": queued_to_json(result.queued)}
    assert result.launched is not None
    return {"launched": launched_to_json(result.launched)}


def _launch_result_from(doc: Any) -> LaunchResult:
    r = Reader(doc, "answer")
    if "queued" in r.doc:
        return LaunchResult(queued=queued_from_json(r.doc["queued"]))
    return LaunchResult(launched=launched_from_json(r.doc.get("launched")))


def _one(key: str, read: Callable[[Any], A]) -> Callable[[Any], A]:
    """An answer that is one thing under ``key`` ({"job": ...})."""
    return lambda doc: read(Reader(doc, "answer").doc.get(key))


_VIEW: Answer[NodeView] = Answer(_view_from, _view)
_READINGS: Answer[NodeView] = Answer(_reading_from)
_WHO: Answer[WhoAmI] = Answer(_whoami_from, lambda w: asdict(w.you) | {"pid": w.pid})
_QUEUE: Answer[tuple[QueuedLaunch, ...]] = Answer(_queue_from, lambda q: {"queue": [queued_to_json(x) for x in q]})
_AUDIT_PAGE: Answer[AuditPage] = Answer(
    _audit_from, lambda p: {"entries": list(p.entries), "all": p.everyone, "more": p.more}
)
_EVENTS_PAGE: Answer[EventsPage] = Answer(_events_from, lambda p: {"entries": list(p.entries), "more": p.more})
_EVENT_LINES: Answer[dict[str, Any]] = Answer(event_from_json, lambda entry: entry)
_HISTORY: Answer[dict[int, list[Sample]]] = Answer(history_from_json, history_to_json)
_USAGE: Answer[UsageReport] = Answer(usage_from_json, usage_to_json)
_OUTPUT: Answer[JobOutput] = Answer(output_from_json, output_to_json)
_LAUNCHED_OR_QUEUED: Answer[LaunchResult] = Answer(
    _launch_result_from, _launch_result, lambda r: 202 if r.queued is not None else 200
)
_LAUNCHED: Answer[Launched] = Answer(_one("launched", launched_from_json), lambda x: {"launched": launched_to_json(x)})
_JOB: Answer[JobState] = Answer(_one("job", job_from_json), lambda j: {"job": job_to_json(j)})
_SHELL: Answer[ShellEntry] = Answer(shell_from_json, shell_to_json)
_REMOVED: Answer[list[JobState]] = Answer(
    lambda doc: [job_from_json(j) for j in Reader(doc, "answer").items("removed")],
    lambda jobs: {"removed": [job_to_json(j) for j in jobs]},
)
_CANCELLED: Answer[QueuedLaunch] = Answer(
    _one("cancelled", queued_from_json), lambda q: {"cancelled": queued_to_json(q)}
)


def _notify_list(listed: NotifyList) -> dict[str, Any]:
    return {"urls": [asdict(u) for u in listed.urls], "terminals": listed.terminals, "most": listed.most}


def _notify_list_from(doc: Any) -> NotifyList:
    r = Reader(doc, "answer")

    def url(u: Reader) -> NotifyUrl:
        return NotifyUrl(u.whole("number"), u.text("shown"), u.flag("node", False), u.opt_text("failing"))

    return NotifyList(tuple(r.each("urls", url)), r.flag("terminals"), r.whole("most"))


_NOTIFY: Answer[NotifyList] = Answer(_notify_list_from, _notify_list)
_DRAIN: Answer[Drain] = Answer(_one("drain", drain_from_json), lambda d: {"drain": drain_to_json(d)})
_CHECKED: Answer[CardCheck] = Answer(_one("check", check_from_json), lambda c: {"check": check_to_json(c)})
_EVICTED: Answer[EvictReport] = Answer(_one("evict", evict_from_json), lambda e: {"evict": evict_to_json(e)})


# ── the table ────────────────────────────────────────────────────────────────

STATUS = Operation(
    "status", "GET", "/v1/snapshot", Nothing, _VIEW, "anyone", "read the node now (status --json, with who asks)"
)
VIEWS = Operation(
    "views",
    "GET",
    "/v1/stream",
    Nothing,
    _READINGS,
    "anyone",
    "follow every new reading, a line of JSON each",
    stream=True,
)
WHOAMI = Operation("whoami", "GET", "/v1/whoami", Nothing, _WHO, "anyone", "learn who they are to the node")
QUEUED = Operation("queued", "GET", "/v1/queue", Nothing, _QUEUE, "anyone", "list the launches queued or waiting")
AUDIT = Operation(
    "audit",
    "GET",
    "/v1/audit",
    AuditRequest,
    _AUDIT_PAGE,
    "anyone",
    "read who asked the node for what (their own; an operator, everyone's), a page at a time",
)
EVENTS = Operation(
    "events",
    "GET",
    "/v1/events",
    EventsRequest,
    _EVENTS_PAGE,
    "anyone",
    "read what happened on the node (others' actions: operators only), a page at a time",
    follow=False,
)
FOLLOW_EVENTS = Operation(
    "follow_events",
    "GET",
    "/v1/events",
    EventsRequest,
    _EVENT_LINES,
    "anyone",
    "follow the node's log as it is written (follow=true), a line of JSON each",
    stream=True,
    follow=True,
)
HISTORY = Operation("history", "GET", "/v1/history", HistoryRequest, _HISTORY, "anyone", "read each card's last hour")
USAGE = Operation(
    "usage",
    "GET",
    "/v1/usage",
    UsageRequest,
    _USAGE,
    "anyone",
    "read who used which cards over a span (their own rows and the node's total; an operator, everyone's)",
)
LOGS = Operation(
    "logs",
    "GET",
    "/v1/logs",
    LogsRequest,
    _OUTPUT,
    "owner or operator",
    "read a job's output, a page at a time",
    follow=False,
)
FOLLOW_LOGS = Operation(
    "follow_logs",
    "GET",
    "/v1/logs",
    LogsRequest,
    _OUTPUT,
    "owner or operator",
    "follow a job's output as it is written (follow=true), a page of JSON each, until the job has ended",
    stream=True,
    follow=True,
)
LAUNCH = Operation(
    "launch",
    "POST",
    "/v1/launch",
    LaunchRequest,
    _LAUNCHED_OR_QUEUED,
    "anyone",
    "place and start a job as themselves, or queue it (another owner: operators)",
)
RESERVE = Operation(
    "reserve",
    "POST",
    "/v1/reserve",
    ReserveRequest,
    _LAUNCHED,
    "anyone",
    "hold cards for themselves until a time (another owner: operators)",
)
EXTEND = Operation(
    "extend", "POST", "/v1/extend", ExtendRequest, _JOB, "owner or operator", "hold a reservation longer"
)
STOP = Operation(
    "stop", "POST", "/v1/stop", StopRequest, _JOB, "owner or operator", "stop a running job or reservation"
)
SHELL = Operation(
    "shell",
    "POST",
    "/v1/shell",
    ShellRequest,
    _SHELL,
    "owner or operator",
    "move their own process into a reservation's fence, for a shell on its cards (tpnode-tui shell)",
)
RECLAIM = Operation(
    "reclaim", "POST", "/v1/reclaim", ReclaimRequest, _REMOVED, "owner or operator", "remove exited jobs' records"
)
CANCEL = Operation(
    "cancel", "POST", "/v1/queue/cancel", CancelRequest, _CANCELLED, "owner or operator", "drop a queued launch"
)
DRAIN = Operation(
    "drain", "POST", "/v1/drain", DrainRequest, _DRAIN, "operators", "take a card out of service, saying why"
)
UNDRAIN = Operation(
    "undrain", "POST", "/v1/undrain", UndrainRequest, _DRAIN, "operators", "put a drained card back in service"
)
CHECK = Operation(
    "check",
    "POST",
    "/v1/check",
    CheckRequest,
    _CHECKED,
    "operators",
    "check a card before it goes back into service",
)
EVICT = Operation(
    "evict", "POST", "/v1/evict", EvictRequest, _EVICTED, "operators", "end what squats on a card from outside"
)

NOTIFY_LIST = Operation(
    "notify_list",
    "GET",
    "/v1/notify",
    Nothing,
    _NOTIFY,
    "anyone",
    "list where they are told what concerns them (their own URLs, secrets masked)",
)
NOTIFY_ADD = Operation(
    "notify_add",
    "POST",
    "/v1/notify/add",
    NotifyAddRequest,
    _NOTIFY,
    "anyone",
    "be told what concerns them at a URL, through Apprise (for the node's events: operators)",
)
NOTIFY_REMOVE = Operation(
    "notify_remove",
    "POST",
    "/v1/notify/remove",
    NotifyRemoveRequest,
    _NOTIFY,
    "anyone",
    "stop being told at one of their URLs",
)

#: every operation, in the order the docs list them
OPERATIONS: tuple[Operation[Any, Any], ...] = (
    STATUS,
    VIEWS,
    WHOAMI,
    QUEUED,
    AUDIT,
    EVENTS,
    FOLLOW_EVENTS,
    HISTORY,
    USAGE,
    LOGS,
    FOLLOW_LOGS,
    LAUNCH,
    RESERVE,
    EXTEND,
    STOP,
    SHELL,
    RECLAIM,
    CANCEL,
    NOTIFY_LIST,
    NOTIFY_ADD,
    NOTIFY_REMOVE,
    DRAIN,
    UNDRAIN,
    CHECK,
    EVICT,
)
