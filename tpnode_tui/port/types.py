"""The words a client and a node speak, wherever the node is served.

The CLI, the dashboard, the agent's API and the node's service all use these
types, so they live below all of them: a client that imported them from the
service would load the allocator, the runtimes and the probes to ask an agent
one question. What a node is asked (one request type per operation of
:mod:`~tpnode_tui.port.operations`: :class:`LaunchRequest`,
:class:`ReserveRequest`, :class:`EvictRequest` ...), what it answers
(:class:`LaunchResult`, :class:`Reading`, :class:`You`, :class:`NodeView`,
a page of the log) and the refusals only the port has (:class:`OverQuota`,
:class:`Cancelled`, :class:`AgentUnavailable`) are all here; the calls
themselves are :class:`tpnode_tui.node.Node`.

Each request is read in one place, its ``parse``: at the agent's door from
the body (or a GET's query string) an account sent, in-process from the same
JSON, and from the agent's queue file when a queued launch is read back. So
nothing the door takes can fail to load later, and every rule and limit is
applied the same way wherever a request comes in. ``limits`` None reads a
request the node itself kept (its queue file): it was within the limits when
it was taken, and a limit lowered since must not lose it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.model.errors import BadRequest, NotAllowed, TpnodeError
from tpnode_tui.model.jobs import Launched, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.topology import PLACEMENTS
from tpnode_tui.model.usage import USAGE_BY
from tpnode_tui.model.validation import check_job_key, check_profile, check_run_id
from tpnode_tui.port.fields import (
    Query,
    duration,
    kib,
    known_fields,
    over,
    text,
    utf8_size,
    valid_text,
    whole,
)
from tpnode_tui.port.wire.reader import Reader
from tpnode_tui.text.printable import shown

Limits = Optional[LimitSettings]

#: more cards than any node has: a request for more is refused by the node in its
#: own words, as one for a card more than it has is, and never queued
MOST_CARDS = 65536
#: a card index as the API takes one
CARD_INDEX_WORDS = "a card index"
#: the highest pid Linux gives (PID_MAX_LIMIT on 64-bit)
PID_MAX = 4_194_304
#: the longest image reference taken: Docker's own is a 255-character name, a tag and a digest
IMAGE_MOST = 512
#: the last second of year 9999 (UTC): the latest time a request may name
LATEST_TIME = 253_402_300_799.0


def new_run_id(prefix: str = "run") -> str:
    """A run id that sorts by time and does not collide between two launches in one second
    (the random part is the kernel's, as secrets.token_hex's is, without loading hashlib)."""
    return f"{prefix}-{time.strftime('%m%d-%H%M%S')}-{os.urandom(2).hex()}"


class OverQuota(NotAllowed):
    """The owner holds as many cards as they may: a queued launch waits for their own jobs."""


class Cancelled(TpnodeError):
    """A launch cancelled while it waited for its turn."""


class AgentUnavailable(TpnodeError):
    """No agent answers (not running, restarting, or not reachable from here)."""


@dataclass(frozen=True)
class LaunchRequest:
    """A launch as a client asks for it; the node fills in who and how."""

    cards: int
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    run_id: Optional[str] = None
    #: another owner than the caller: operators only
    owner: str = ""
    #: the command's environment and working directory, for a process job. A
    #: client of an agent sends its own (the job runs as the caller, as a launch
    #: from their shell would); None in-process: the job gets this process's
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: wait in the queue when the node has no room now, instead of refusing
    queue: bool = False
    #: how the cards must sit on the node's topology: None (the best set free now),
    #: "same-switch" or "contiguous" (a launch waits for such a set)
    placement: Optional[str] = None
    #: a MIG profile ("1g.18gb"): one MIG slice of it instead of whole cards
    #: (``cards`` is then 1); None: whole cards, never a card in MIG mode
    slice: Optional[str] = None

    FIELDS: ClassVar[tuple[str, ...]] = (
        "cards",
        "command",
        "image",
        "run_id",
        "owner",
        "env",
        "cwd",
        "queue",
        "slice",
        "placement",
    )

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> LaunchRequest:
        known_fields(r, *cls.FIELDS)
        cards, slice_, placement = _what(r)
        image = text(r, "image")
        if image is not None and len(image) > IMAGE_MOST:
            raise BadRequest(f"image {shown(image)} is not an image reference (at most {IMAGE_MOST} characters)")
        return cls(
            cards=cards,
            command=_command(r, limits),
            image=image,
            run_id=_run_id(r),
            owner=text(r, "owner", "") or "",
            env=_env(r, limits),
            cwd=_cwd(r, limits),
            queue=r.flag("queue", False),
            placement=placement,
            slice=slice_,
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "cards": self.cards,
            "command": list(self.command),
            "image": self.image,
            "run_id": self.run_id,
            "owner": self.owner,
            "cwd": self.cwd,
            "queue": self.queue,
            "env": None if self.env is None else dict(self.env),
        }
        # only when asked for: an older agent refuses a key it does not know
        return doc | _asked(slice=self.slice, placement=self.placement)


@dataclass(frozen=True)
class ReserveRequest:
    cards: int
    duration_s: float
    run_id: Optional[str] = None
    owner: str = ""
    placement: Optional[str] = None
    #: a MIG profile: reserve one MIG slice of it (``cards`` is then 1)
    slice: Optional[str] = None

    FIELDS: ClassVar[tuple[str, ...]] = ("cards", "duration_s", "run_id", "owner", "slice", "placement")

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ReserveRequest:
        known_fields(r, *cls.FIELDS)
        cards, slice_, placement = _what(r)
        return cls(
            cards=cards,
            duration_s=duration(
                r, "duration_s", "a reservation lasts at least 1 second", _longest(limits), "a reservation"
            ),
            run_id=_run_id(r),
            owner=text(r, "owner", "") or "",
            placement=placement,
            slice=slice_,
        )

    def to_json(self) -> dict[str, Any]:
        doc = {"cards": self.cards, "duration_s": self.duration_s, "run_id": self.run_id, "owner": self.owner}
        return doc | _asked(slice=self.slice, placement=self.placement)


@dataclass(frozen=True)
class ExtendRequest:
    """Hold a live reservation ``duration_s`` longer."""

    run_id: str
    duration_s: float

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ExtendRequest:
        known_fields(r, "run_id", "duration_s")
        return cls(
            run_id=_job_key(r),
            duration_s=duration(r, "duration_s", "extend by at least 1 second", _longest(limits), "an extension"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "duration_s": self.duration_s}


@dataclass(frozen=True)
class StopRequest:
    run_id: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> StopRequest:
        known_fields(r, "run_id")
        return cls(_job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


@dataclass(frozen=True)
class ShellRequest:
    """Move the asking process into a live reservation's fence (``tpnode-tui shell``).

    Which process is moved is never said here: it is the one at the other end of
    the socket, as the kernel names it (``SO_PEERCRED``). ``seen_pid`` and
    ``seen_start_ticks`` are what the asking CLI sees of itself (``os.getpid()``
    and its start in /proc): never trusted, only compared with the kernel's peer
    and its start, so that a forwarder in between (``ssh -L``, ``socat``), whose
    process the kernel names instead, is refused rather than moved."""

    run_id: str
    seen_pid: int
    seen_start_ticks: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ShellRequest:
        known_fields(r, "run_id", "seen_pid", "seen_start_ticks")
        return cls(
            _job_key(r),
            whole(r, "seen_pid", 1, 2**31 - 1, "a process id"),
            whole(r, "seen_start_ticks", 0, 2**63 - 1, "a start time in clock ticks since boot"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seen_pid": self.seen_pid, "seen_start_ticks": self.seen_start_ticks}


@dataclass(frozen=True)
class ReclaimRequest:
    """Remove one exited job's record (None: every exited job the caller may remove)."""

    run_id: Optional[str] = None

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ReclaimRequest:
        known_fields(r, "run_id")
        return cls(None if r.doc.get("run_id") is None else _job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


@dataclass(frozen=True)
class CancelRequest:
    """Drop a queued launch, or one still waiting for the allocation lock."""

    run_id: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> CancelRequest:
        known_fields(r, "run_id")
        return cls(_job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


@dataclass(frozen=True)
class DrainRequest:
    """Take a card out of service, saying why (operators)."""

    card: int
    reason: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> DrainRequest:
        known_fields(r, "card", "reason")
        card = _card(r)
        reason = (text(r, "reason", required=True) or "").strip()
        if not reason:
            raise BadRequest("say why the card is drained (a reason), so the next operator knows")
        if limits is not None and len(reason) > limits.reason_chars:
            raise over(
                f"the reason is {len(reason)} characters",
                f"{limits.reason_chars}",
                "TUNEPLANE_MAX_REASON_CHARS",
                limits.reason_chars,
            )
        return cls(card, reason)

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card, "reason": self.reason}


@dataclass(frozen=True)
class UndrainRequest:
    """Put a drained card back in service (operators); ``force``: even a card
    drained until the node reboots that has not rebooted, or passed no check since."""

    card: int
    force: bool = False

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> UndrainRequest:
        known_fields(r, "card", "force")
        return cls(_card(r), r.flag("force", False))

    def to_json(self) -> dict[str, Any]:
        # "force" only when asked: an agent from before it refuses a field it does not know
        return {"card": self.card} | ({"force": True} if self.force else {})


@dataclass(frozen=True)
class CheckRequest:
    """Check a card before it goes back into service (operators)."""

    card: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> CheckRequest:
        known_fields(r, "card")
        return cls(_card(r))

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card}


@dataclass(frozen=True)
class EvictRequest:
    """SIGTERM a card's external or intruding processes, or the one ``pid``
    (operators); SIGKILL after the grace with ``kill``; ``dry_run`` only lists.
    ``started_at`` (from a dry run) names the very process ``pid`` must still be."""

    card: int
    pid: Optional[int] = None
    kill: bool = False
    dry_run: bool = False
    started_at: Optional[float] = None

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> EvictRequest:
        known_fields(r, "card", "pid", "kill", "dry_run", "started_at")
        pid = None if r.doc.get("pid") is None else whole(r, "pid", 1, PID_MAX, "a process id")
        started_at = r.opt_number("started_at")
        if started_at is not None and pid is None:
            raise BadRequest(f"{r.where}.started_at names the start of one process: give its pid too")
        return cls(_card(r), pid, r.flag("kill", False), r.flag("dry_run", False), started_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "card": self.card,
            "pid": self.pid,
            "kill": self.kill,
            "dry_run": self.dry_run,
            "started_at": self.started_at,
        }


#: the longest notification URL taken (Apprise's services take far shorter ones)
URL_MOST = 2048


@dataclass(frozen=True)
class NotifyAddRequest:
    """Keep a URL the caller is told at through Apprise (``node``: an operator's,
    for the node's events instead of their own). Nothing said about it quotes
    it: a URL may hold a password or a token anywhere."""

    url: str
    node: bool = False

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> NotifyAddRequest:
        known_fields(r, "url", "node")
        url = (text(r, "url", required=True) or "").strip()
        if not url:
            raise BadRequest("give the URL to be told at, e.g. ntfy://ntfy.sh/TOPIC or json://host/path")
        if len(url) > URL_MOST:
            raise BadRequest(f"the URL is {len(url)} characters, more than a notification URL may have ({URL_MOST})")
        if not url.isprintable():
            raise BadRequest("the URL holds a control character or a line break: write it on one line")
        return cls(url, r.flag("node", False))

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "node": self.node}


@dataclass(frozen=True)
class NotifyRemoveRequest:
    """Forget the caller's notification URL ``number``, as ``notify list`` numbers them."""

    number: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> NotifyRemoveRequest:
        known_fields(r, "number")
        return cls(whole(r, "number", 1, 10_000, "a URL's number as notify list gives it"))

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number}


# ── what is read: a GET's query string ──────────────────────────────────────
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
class AuditRequest:
    """The logged actions of the last ``since_s`` seconds (all kept: None), the
    newest ``limit`` (at most the node's page) before ``before`` (unix seconds)."""

    since_s: Optional[float] = None
    limit: Optional[int] = None
    before: Optional[float] = None

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> AuditRequest:
        q.only("since", "limit", "before")
        return cls(q.seconds("since"), q.count("limit", _page(limits)), q.time("before"))

    def to_json(self) -> dict[str, Any]:
        return _given(since=self.since_s, limit=self.limit, before=self.before)


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
            q.seconds("since"), q.card("card"), q.flag("follow"), q.count("limit", _page(limits)), q.time("before")
        )

    def to_json(self) -> dict[str, Any]:
        follow = True if self.follow else None
        return _given(since=self.since_s, card=self.card, follow=follow, limit=self.limit, before=self.before)


#: the most of a job's output one answer holds: a page; the client asks for the next
LOG_PAGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class LogsRequest:
    """A page of a job's output (at most LOG_PAGE_BYTES) from ``after``, where
    the last page said the next starts (None: its beginning); ``follow``: then
    each new piece as it is written, until the job has ended."""

    run_id: str
    after: Optional[str] = None
    follow: bool = False

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> LogsRequest:
        q.only("run_id", "after", "follow")
        return cls(check_job_key(q.text("run_id", 256, required=True) or ""), q.text("after", 64), q.flag("follow"))

    def to_json(self) -> dict[str, Any]:
        return _given(run_id=self.run_id, after=self.after, follow=True if self.follow else None)


@dataclass(frozen=True)
class HistoryRequest:
    """Each card's last hour, or one card's."""

    card: Optional[int] = None

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> HistoryRequest:
        q.only("card")
        return cls(q.card("card"))

    def to_json(self) -> dict[str, Any]:
        return _given(card=self.card)


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
        since, until = _moment(q, "since"), _moment(q, "until")
        if since >= until:
            raise BadRequest(f"since ({since:.0f}) is not before until ({until:.0f}): a span ends after it starts")
        return cls(since, until, q.choice("by", USAGE_BY, "user"))

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "by": self.by}


# ── how each field is read ───────────────────────────────────────────────────


def _moment(q: Query, key: str) -> float:
    """A time a span needs, in unix seconds from 1970 to the end of year 9999:
    a later one cannot be written as a date, and a report would fail to say it."""
    value = q.time(key)
    if value is None:
        raise BadRequest(f"{q.path} needs {key}: a time, in unix seconds")
    if not 0 <= value <= LATEST_TIME:
        raise BadRequest(f"{key}={shown(q.items[key], 30)} is not a time from 1970 to 9999 (unix seconds)")
    return value


def _asked(**fields: Optional[str]) -> dict[str, str]:
    return {k: v for k, v in fields.items() if v is not None}


def _longest(limits: Limits) -> Optional[float]:
    return None if limits is None else limits.duration_s


def _page(limits: Limits) -> Optional[int]:
    return None if limits is None else limits.page


def _given(**values: object) -> dict[str, Any]:
    """A GET request's fields that are given (its query string's, once written)."""
    return {k: v for k, v in values.items() if v is not None}


def _what(r: Reader) -> tuple[int, Optional[str], Optional[str]]:
    """Whole cards, or one MIG slice of a profile, and how the cards must sit."""
    cards = r.whole("cards")
    if cards < 1:
        raise BadRequest(f"a job needs at least 1 card, not {cards}")
    slice_ = text(r, "slice")
    if slice_ is not None:
        check_profile(slice_)
        if cards != 1:
            raise BadRequest(f"a job gets one MIG slice, not {cards}: ask for one {slice_} slice, or for whole cards")
    placement = text(r, "placement")
    if placement is not None and placement not in PLACEMENTS:
        raise BadRequest(f"{shown(placement)} is not a placement: use {' or '.join(PLACEMENTS)}")
    if placement is not None and slice_ is not None:
        raise BadRequest(f"a MIG slice ({slice_}) is one device: it has no placement ({placement}) to ask for")
    return cards, slice_, placement


def _run_id(r: Reader) -> Optional[str]:
    run_id = text(r, "run_id")
    return None if run_id is None else check_run_id(run_id)


def _job_key(r: Reader) -> str:
    return check_job_key(text(r, "run_id", required=True) or "")


def _card(r: Reader) -> int:
    return whole(r, "card", 0, 999_999, CARD_INDEX_WORDS)


def _command(r: Reader, limits: Limits) -> tuple[str, ...]:
    """The command's words (an argv, never a shell line), each text a program
    can take, within TUNEPLANE_MAX_COMMAND_ARGS words and _KIB together."""
    words = r.texts("command")
    for n, word in enumerate(words):
        valid_text(word, f"{r.where}.command[{n}]")
    if limits is not None:
        if len(words) > limits.command_args:
            raise over(
                f"the command has {len(words)} words",
                str(limits.command_args),
                "TUNEPLANE_MAX_COMMAND_ARGS",
                limits.command_args,
            )
        size = sum(utf8_size(w) for w in words)
        if size > limits.command_kib * 1024:
            raise over(
                f"the command is {kib(size)}",
                f"{limits.command_kib} KiB",
                "TUNEPLANE_MAX_COMMAND_KIB",
                limits.command_kib,
            )
    return words


def _env(r: Reader, limits: Limits) -> Optional[tuple[tuple[str, str], ...]]:
    """The command's environment: names a program can be given (not empty, no
    "=" or NUL) and text values, within TUNEPLANE_MAX_ENV_VARS and _KIB."""
    doc = r.doc.get("env")
    if doc is None:
        return None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise BadRequest(f"{r.where}.env is not an object of text values")
    for name, value in doc.items():
        valid_text(name, f"{r.where}.env name {shown(name, 30)}")
        if not name or "=" in name:
            raise BadRequest(
                f"environment variable name {shown(name)} is not valid (it must be non-empty, without '=')"
            )
        valid_text(value, f"{r.where}.env.{name[:30]}")
    if limits is not None:
        if len(doc) > limits.env_vars:
            raise over(
                f"the environment has {len(doc)} variables",
                str(limits.env_vars),
                "TUNEPLANE_MAX_ENV_VARS",
                limits.env_vars,
            )
        size = sum(utf8_size(k) + utf8_size(v) + 2 for k, v in doc.items())
        if size > limits.env_kib * 1024:
            raise over(
                f"the environment is {kib(size)}", f"{limits.env_kib} KiB", "TUNEPLANE_MAX_ENV_KIB", limits.env_kib
            )
    return tuple(doc.items())


def _cwd(r: Reader, limits: Limits) -> Optional[str]:
    cwd = text(r, "cwd")
    if cwd is None:
        return None
    if not cwd.startswith("/"):
        raise BadRequest(f"working directory {shown(cwd)} is not an absolute path")
    if limits is not None and utf8_size(cwd) > limits.cwd_bytes:
        raise over(
            f"the working directory is {utf8_size(cwd)} bytes",
            f"{limits.cwd_bytes} bytes",
            "TUNEPLANE_MAX_CWD_BYTES",
            limits.cwd_bytes,
        )
    return cwd


@dataclass(frozen=True)
class LaunchResult:
    """What a launch got: cards now, or a place in the queue."""

    launched: Optional[Launched] = None
    queued: Optional[QueuedLaunch] = None


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


@dataclass(frozen=True)
class NotifyUrl:
    """One of the caller's notification URLs, as it may be shown: secrets masked."""

    number: int
    shown: str
    #: an operator's URL for the node's events
    node: bool = False
    #: since when and why sending to it fails; None while it works (or was not tried)
    failing: Optional[str] = None


@dataclass(frozen=True)
class NotifyList:
    """Where the caller is told what concerns them: their URLs, and whether the
    node writes to their terminals (where they allow messages), and the most URLs one account keeps."""

    urls: tuple[NotifyUrl, ...]
    terminals: bool
    most: int


@dataclass(frozen=True)
class NodeView:
    """One reading of the node, and the caller as the node sees them then."""

    reading: Reading
    you: You

    @property
    def snapshot(self) -> Optional[NodeSnapshot]:
        return self.reading.snapshot
