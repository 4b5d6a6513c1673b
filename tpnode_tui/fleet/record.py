"""What an agent publishes about its node, and what a reader makes of many publications. No I/O.

Everything read back is untrusted: any node, or anyone who can write to that
Redis, can publish anything. So a publication is decoded strictly, one that
cannot be read marks its node malformed, liveness is decided by Redis's clock
alone, and no card of a node that is not plainly up, alone under its name,
with a current reading, is counted free. The keys and the rules: see
docs/architecture.md, section 'Many nodes'.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Optional

from tpnode_tui.config.ssh import SshTarget
from tpnode_tui.model.errors import ConfigError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.types.readings import Reading
from tpnode_tui.port.wire.reader import Reader, WireError
from tpnode_tui.port.wire.snapshot import snapshot_from_json, snapshot_to_json
from tpnode_tui.text.render import format_duration

PREFIX = "tpnode:fleet"
AGENTS_KEY = f"{PREFIX}:agents"
CHANGED = f"{PREFIX}:notices:changed"
SAME = f"{PREFIX}:notices:same"

#: a node is unreachable after this many periods without a publication
MISSED = 3
#: bumped when a key changes meaning; readers refuse publications newer than they know
FORMAT = 1
#: a period longer than this, claimed by a publication, is not believed
MAX_PERIOD_S = 300.0
#: leeway for clocks that differ a little between a node and the reader
CLOCK_SLACK_S = 2.0
#: no time another node publishes is later (the year 5138): beyond, no clock can show it
LATEST_MOMENT = 1e11
#: a publication larger than this is refused unread (a 1024-card node's is far smaller)
MAX_PUBLICATION = 16 * 1024 * 1024
#: agents read at most: a registry grown past it is reported, not read whole
MAX_AGENTS = 10_000

#: card states as the node grid shows them, and "unknown" for a card of a node
#: that is not plainly up (never shown or counted as free)
UNKNOWN = "unknown"


def text_of(raw: bytes | str) -> str:
    """A key or field name as Redis returned it (bytes), as text."""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


def snapshot_key(instance: str) -> str:
    return f"{PREFIX}:snapshot:{instance}"


def expiry_ms(period_s: float) -> int:
    """How long a publication lives: three periods, then the node is unreachable."""
    return max(1, round(MISSED * period_s * 1000))


# ── writing (the agent) ─────────────────────────────────────────────────────


def registration(
    *,
    node: str,
    version: str,
    period_s: float,
    host: str,
    pid: int,
    started_at: float,
    seen_at: float,
    series: str = "",
    total: Optional[int] = None,
    stopped_at: Optional[float] = None,
    ssh: str = "",
) -> dict[str, Any]:
    """``ssh``: how the node is reached over SSH (``[user@]host[:port]``), for
    ``fleet --json`` and the fleet view's way into the node's dashboard."""
    return {
        "fleet": FORMAT,
        "node": node,
        "agent_version": version,
        "period_s": period_s,
        "host": host,
        "pid": pid,
        "started_at": started_at,
        "seen_at": seen_at,
        "series": series,
        "total": total,
        "stopped_at": stopped_at,
        "ssh": ssh,
    }


@dataclass(frozen=True)
class Encoded:
    """A publication as stored: a short envelope line, then the node's snapshot.

    The snapshot is the ``status --json`` document (:func:`~tpnode_tui.port.wire.snapshot.snapshot_to_json`)
    with its ``taken_at`` moved into the envelope: a node that publishes the same
    picture again writes the same snapshot text, so a reader sees that it did
    by comparing bytes, without decoding it again.
    """

    envelope: dict[str, Any]
    #: the snapshot document without ``taken_at``, as JSON text ("null" before the first reading)
    snapshot: bytes

    def encode(self) -> bytes:
        """As it is stored: the envelope's line, then the snapshot's."""
        return json.dumps(self.envelope).encode() + b"\n" + self.snapshot

    @property
    def picture(self) -> tuple[bool, bytes]:
        """What the publication shows: two with the same picture tell a reader nothing new."""
        return (self.envelope.get("error") is not None, self.snapshot)


def publication(
    *, node: str, instance: str, version: str, period_s: float, seq: int, published_at: float, reading: Reading
) -> Encoded:
    """One publication: the agent's latest reading as ``status --json`` has it, and who says so.

    A reading whose poll failed carries the last good snapshot with the error,
    so readers show that node's cards as unknown rather than as they last were.
    """
    snap_doc = None if reading.snapshot is None else snapshot_to_json(reading.snapshot)
    taken_at = None if snap_doc is None else snap_doc.pop("taken_at")
    envelope = {
        "fleet": FORMAT,
        "node": node,
        "instance": instance,
        "agent_version": version,
        "published_at": published_at,
        "period_s": period_s,
        "seq": seq,
        "error": reading.error,
        "stale_since": reading.stale_since,
        "taken_at": taken_at,
    }
    return Encoded(envelope, json.dumps(snap_doc).encode())


# ── reading back ────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Registration:
    instance: str
    node: str
    agent_version: str
    period_s: float
    host: str
    pid: Optional[int]
    started_at: float
    #: when the registration was last written: the agent was alive then
    seen_at: float
    series: str
    total: Optional[int]
    stopped_at: Optional[float]
    #: how to reach the node over SSH, as its agent published it; None: not said,
    #: or not a destination (it is checked: a fleet view hands it to ssh)
    ssh: Optional[SshTarget] = None


@dataclass(frozen=True)
class FleetCard:
    index: int
    state: str
    #: pids of intruders on it (processes that belong to neither its job nor its owner)
    intruders: tuple[int, ...] = ()


@dataclass(frozen=True)
class Publication:
    instance: str
    node: str
    agent_version: str
    published_at: float
    period_s: float
    seq: int
    #: the node's last good snapshot (None until its agent read the node once)
    snapshot: Optional[NodeSnapshot]
    #: why the agent's latest poll failed; None when it succeeded
    error: Optional[str]
    #: card index -> pids of processes on it that belong to neither its job nor its owner
    intruders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: when the node was read (the snapshot keeps the time it was first decoded at)
    taken_at: Optional[float] = None
    #: the snapshot's cards as the fleet shows them, made once per picture
    cards: tuple[FleetCard, ...] = ()


def _period(r: Reader) -> float:
    period = r.number("period_s")
    if not 0 < period <= MAX_PERIOD_S:
        raise WireError(f"{r.where}.period_s is {period:g}, not a period from 0 to {MAX_PERIOD_S:g} s")
    return period


def _node_name(r: Reader) -> str:
    name = r.text("node")
    if not 1 <= len(name) <= 253:
        raise WireError(f"{r.where}.node is not a node name of 1 to 253 characters")
    return name


def _json(raw: Any, where: str) -> Any:
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_PUBLICATION:
            raise WireError(f"{where} is {len(raw)} bytes, over {MAX_PUBLICATION // (1024 * 1024)} MiB")
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(f"{where} is not UTF-8 text") from None
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as e:
        raise WireError(f"{where} is not valid JSON ({e})") from None
    except RecursionError:  # nesting deep enough to exhaust the parser: no record of ours is
        raise WireError(f"{where} is nested too deeply to be a publication") from None


def _format(r: Reader) -> None:
    version = r.whole("fleet")
    if version > FORMAT:
        raise WireError(f"{r.where} has format {version}, newer than this tpnode-tui reads ({FORMAT}); upgrade it")


def decode_registration(instance: str, raw: Any) -> Registration:
    r = Reader(_json(raw, "registration"), "registration")
    _format(r)
    total = r.opt_whole("total")
    try:
        ssh = SshTarget.parse(r.text("ssh", ""), "its ssh address") if r.text("ssh", "").strip() else None
    except ConfigError:
        ssh = None
    return Registration(
        instance=instance,
        node=_node_name(r),
        agent_version=r.text("agent_version", ""),
        period_s=_period(r),
        host=r.text("host", ""),
        pid=r.opt_whole("pid"),
        started_at=_moment(r, "started_at"),
        seen_at=_moment(r, "seen_at"),
        series=r.text("series", ""),
        total=total if total is not None and 0 <= total <= 65536 else None,
        stopped_at=None if r.opt_number("stopped_at") is None else _moment(r, "stopped_at"),
        ssh=ssh,
    )


def _moment(r: Reader, key: str) -> float:
    """A time another node wrote: seconds since the epoch, on a calendar a clock can show."""
    value = r.number(key)
    if not 0 <= value < LATEST_MOMENT:
        raise WireError(f"{r.where}.{key} is {value!r}, not a time")
    return value


def _intruders(snapshot_doc: dict[str, Any]) -> dict[int, tuple[int, ...]]:
    """Card index -> intruder pids, from each card's ``intruders`` (absent: none)."""
    found: dict[int, tuple[int, ...]] = {}
    for n, card in enumerate(snapshot_doc.get("cards") or ()):
        pids = card.get("intruders") if isinstance(card, dict) else None
        if pids is None:
            continue
        if not isinstance(pids, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
            raise WireError(f"publication.snapshot.cards[{n}].intruders is not a list of pids")
        if pids:
            found[card["index"]] = tuple(pids)
    return found


class Decoder:
    """Decodes publications, and decodes a snapshot again only when its text changed.

    A node publishes every period even when nothing changed; decoding each
    strictly (the costly part) would make a fleet view's idle cost grow with the
    publications, not with the changes.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[bytes, Publication]] = {}

    def decode(self, instance: str, raw: Any) -> Publication:
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogatepass")
        if not isinstance(raw, (bytes, bytearray)):
            raise WireError("publication is not text")
        if len(raw) > MAX_PUBLICATION:
            raise WireError(f"publication is {len(raw)} bytes, over {MAX_PUBLICATION // (1024 * 1024)} MiB")
        head, newline, snapshot_text = bytes(raw).partition(b"\n")
        r = Reader(_json(head, "publication"), "publication")
        _format(r)
        if not newline:
            raise WireError("publication has no snapshot line after its envelope")
        if r.text("instance") != instance:
            raise WireError("publication.instance is not the instance it is stored under")
        taken_at = r.opt_number("taken_at")
        cached = self._last.get(instance)
        if cached is not None and cached[0] == snapshot_text:
            snap, intruders, cards = cached[1].snapshot, cached[1].intruders, cached[1].cards
            if snap is not None and taken_at is None:
                raise WireError("publication.taken_at is missing, and it has a snapshot")
        else:
            snapshot_doc = _json(snapshot_text, "publication.snapshot")
            if snapshot_doc is None:
                snap, intruders, cards = None, {}, ()
            else:
                if not isinstance(snapshot_doc, dict):
                    raise WireError("publication.snapshot is not an object")
                snapshot_doc["taken_at"] = taken_at
                snap = snapshot_from_json(snapshot_doc, "publication.snapshot")
                intruders = _intruders(snapshot_doc)
                cards = tuple(FleetCard(c.index, c.state, intruders.get(c.index, ())) for c in snap.cards)
        pub = Publication(
            instance=instance,
            node=_node_name(r),
            agent_version=r.text("agent_version", ""),
            published_at=_moment(r, "published_at"),
            period_s=_period(r),
            seq=r.whole("seq"),
            snapshot=snap,
            error=r.opt_text("error"),
            intruders=intruders,
            taken_at=taken_at,
            cards=cards,
        )
        self._last[instance] = (snapshot_text, pub)
        return pub

    def forget_except(self, instances: Iterable[str]) -> None:
        keep = set(instances)
        for gone in set(self._last) - keep:
            del self._last[gone]


# ── the fleet as a reader sees it ───────────────────────────────────────────

#: a node's status: only "up" shows its cards; every other status shows them unknown
UP, STALE, UNREACHABLE, MALFORMED, CONFLICT = "up", "stale", "unreachable", "malformed", "conflict"


@dataclass(frozen=True)
class NodeRow:
    """One node of the fleet as the reader found it."""

    name: str
    status: str
    #: the latest time this node was known to be alive: its last publication read,
    #: or when its agent registered or stopped
    last_seen: Optional[float]
    #: True when ``last_seen`` is a publication's (nothing was published after it),
    #: or the moment its agent said it stopped
    seen_exactly: bool
    series: str = ""
    #: the card count as last known (0 when never known)
    total: int = 0
    #: every card, with "unknown" states unless the node is up
    cards: tuple[FleetCard, ...] = ()
    #: why the cards are unknown, in plain words (None when up)
    problem: Optional[str] = None
    agent_version: str = ""
    instances: tuple[str, ...] = ()
    #: the node's published snapshot, for its read-only card grid (None if none can be trusted)
    snapshot: Optional[NodeSnapshot] = None
    #: the agent's reading error while ``status`` is stale
    error: Optional[str] = None
    #: when the node was last read, as its latest publication says
    taken_at: Optional[float] = None
    #: how to reach it over SSH (its dashboard: tpnode-tui --host), as its agent published it
    ssh: Optional[SshTarget] = None

    @property
    def reachable(self) -> bool:
        return self.status in (UP, STALE)

    @property
    def known(self) -> bool:
        """Whether the cards' states are current: only then is any card free."""
        return self.status == UP

    def count(self, state: str) -> Optional[int]:
        return sum(1 for c in self.cards if c.state == state) if self.known else None

    @property
    def free(self) -> int:
        return self.count("free") or 0

    @property
    def intruder_cards(self) -> Optional[int]:
        return sum(1 for c in self.cards if c.intruders) if self.known else None

    @property
    def largest_free_window(self) -> Optional[int]:
        if not self.known:
            return None
        return largest_window(c.index for c in self.cards if c.state == "free")


def largest_window(indices: Iterable[int]) -> int:
    """The longest run of consecutive card indices: the biggest job that gets neighbours."""
    best = run = 0
    previous: Optional[int] = None
    for i in sorted(set(indices)):
        run = run + 1 if previous is not None and i == previous + 1 else 1
        best = max(best, run)
        previous = i
    return best


@dataclass(frozen=True)
class FleetPicture:
    nodes: tuple[NodeRow, ...]
    read_at: float
    #: what could not be read at all (registrations), in plain words
    problems: tuple[str, ...] = ()

    @property
    def up(self) -> int:
        return sum(1 for n in self.nodes if n.status == UP)

    @property
    def down(self) -> int:
        return len(self.nodes) - self.up

    @property
    def free(self) -> int:
        return sum(n.free for n in self.nodes)

    @property
    def total(self) -> int:
        return sum(n.total for n in self.nodes)

    @property
    def widest(self) -> Optional[tuple[str, int]]:
        """The node with the largest window of consecutive free cards (first by name on a tie)."""
        best: Optional[tuple[str, int]] = None
        for node in self.nodes:
            window = node.largest_free_window or 0
            if window and (best is None or window > best[1]):
                best = (node.name, window)
        return best


def _skew(pub: Publication, now: float) -> Optional[str]:
    """What a publication's time says of its node's clock, when it cannot be right:
    its key is there, so it was set within three periods by Redis's clock."""
    behind = now - pub.published_at - MISSED * pub.period_s
    if behind > CLOCK_SLACK_S:
        return f"its clock is at least {format_duration(behind)} behind this one's: the times it publishes are off"
    ahead = pub.published_at - now
    if ahead > CLOCK_SLACK_S:
        return f"its clock is {format_duration(ahead)} ahead of this one's: the times it publishes are off"
    return None


def _replaced_dropped(regs: list[Registration], pubs: dict[str, Publication]) -> list[Registration]:
    """Without the agents another agent on the same host replaced: one that started
    after the other's last publication (both times are that host's own clock). A
    crashed agent's key outlives it by up to three periods; its successor is no
    conflict."""

    def last_heard(r: Registration) -> float:
        pub = pubs.get(r.instance)
        return max(r.seen_at, pub.published_at if pub is not None else r.seen_at)

    return [
        r
        for r in regs
        if not any(
            o.instance != r.instance and o.host and o.host == r.host and o.started_at > last_heard(r) for o in regs
        )
    ]


def _cards(
    snap: Optional[NodeSnapshot], total: int, known: bool, intruders: dict[int, tuple[int, ...]]
) -> tuple[FleetCard, ...]:
    if snap is not None and snap.cards:
        return tuple(
            FleetCard(c.index, c.state if known else UNKNOWN, intruders.get(c.index, ()) if known else ())
            for c in snap.cards
        )
    return tuple(FleetCard(i, UNKNOWN) for i in range(total))


def _who(regs: list[Registration]) -> str:
    return ", ".join(f"{r.host or 'an unnamed host'} (pid {r.pid if r.pid is not None else '?'})" for r in regs)


def _row(
    name: str,
    regs: list[Registration],
    pubs: dict[str, Publication],
    broken: dict[str, str],
    now: float,
    remembered: Optional[float],
) -> NodeRow:
    live = [pubs[r.instance] for r in regs if r.instance in pubs]
    bad = [(r, broken[r.instance]) for r in regs if r.instance in broken]
    newest_reg = max(regs, key=lambda r: r.stopped_at or r.seen_at)
    newest = max(live, key=lambda p: p.published_at, default=None)
    snap = newest.snapshot if newest is not None else None
    last_pub = newest.published_at if newest is not None else None
    base = _base_row(name, regs, newest_reg, newest, _last_seen(newest_reg, last_pub, remembered))
    down = _down(name, regs, live, bad, newest_reg.stopped_at, last_pub)
    if down is None and snap is None:
        error = live[0].error
        down = (
            STALE,
            "its agent has not read the node yet" if error is None else f"its agent cannot read the node: {error}",
        )
    if down is not None:
        return replace(base, status=down[0], cards=_cards(snap, base.total, False, {}), problem=down[1])
    assert snap is not None
    pub = live[0]
    if pub.error is not None:  # the last reading is kept, shown stale
        return replace(
            base,
            status=STALE,
            cards=_cards(snap, base.total, False, {}),
            problem=f"its agent's last poll failed: {pub.error}",
            snapshot=snap,
            error=pub.error,
        )
    return replace(
        base,
        status=UP,
        cards=pub.cards or _cards(snap, base.total, True, pub.intruders),
        snapshot=snap,
        problem=_skew(pub, now),
    )


def _last_seen(newest_reg: Registration, last_pub: Optional[float], remembered: Optional[float]) -> tuple[float, bool]:
    """When the node was last heard from, and whether that moment is exact: its
    last publication, a later one remembered, or its agent saying it stopped,
    whichever came last (so the live view's "unreachable since" and the
    problem's "its agent stopped at" name one moment); else its registration's
    last word."""
    exact = [t for t in (remembered, last_pub, newest_reg.stopped_at) if t is not None]
    if exact:
        return max(exact), True
    return newest_reg.seen_at, False


def _base_row(
    name: str,
    regs: list[Registration],
    newest_reg: Registration,
    newest: Optional[Publication],
    seen: tuple[float, bool],
) -> NodeRow:
    """The node's row before its status is known: what its newest publication
    says of it, else its newest registration."""
    snap = newest.snapshot if newest is not None else None
    return NodeRow(
        name,
        UNREACHABLE,
        seen[0],
        seen[1],
        series=(snap.series if snap is not None else "") or newest_reg.series,
        total=snap.occupancy.total if snap is not None else (newest_reg.total or 0),
        agent_version=newest.agent_version if newest is not None else newest_reg.agent_version,
        instances=tuple(sorted(r.instance for r in regs)),
        taken_at=newest.taken_at if newest is not None else None,
        ssh=newest_reg.ssh,
    )


def _down(
    name: str,
    regs: list[Registration],
    live: list[Publication],
    bad: list[tuple[Registration, str]],
    stopped: Optional[float],
    last_pub: Optional[float],
) -> Optional[tuple[str, str]]:
    """Why a node has no one publication to show, as its status and the problem
    in words: several agents publish as it, its publication cannot be read,
    or nothing was published lately; None when one agent's publication is live."""
    if len(live) + len(bad) > 1:
        claims = [r for r in regs if r.instance in {p.instance for p in live} | {b[0].instance for b in bad}]
        return (
            CONFLICT,
            f"{len(claims)} agents publish as {name}: {_who(claims)}; fix TUNEPLANE_NODE_NAME on all but one",
        )
    if bad:
        return MALFORMED, f"its publication cannot be read: {bad[0][1]}"
    if live:
        return None
    if stopped is not None and (last_pub is None or stopped >= last_pub):
        return UNREACHABLE, f"its agent stopped at {clock(stopped)}"
    return UNREACHABLE, "no publication for 3 periods"


def clock(ts: float) -> str:
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):  # no such moment: say so, never fail a frame
        return "--:--:--"


def assemble(
    registrations: dict[str, Registration],
    publications: dict[str, Publication],
    broken: dict[str, str],
    now: float,
    *,
    problems: Iterable[str] = (),
    remembered: Optional[dict[str, float]] = None,
) -> FleetPicture:
    """The fleet from what was read: registrations by instance, the publications
    that decoded, and why the others did not (``broken``: instance -> problem).

    ``remembered`` (node name -> the last publication time a long-running reader
    saw) keeps "unreachable since" exact once a node's publication has expired.
    """
    broken = dict(broken)
    by_name: dict[str, list[Registration]] = {}
    for reg in registrations.values():
        by_name.setdefault(reg.node, []).append(reg)
    problems = list(problems)
    for instance, pub in publications.items():
        known = registrations.get(instance)
        if known is not None and pub.node != known.node:
            broken[instance] = f"it names node {pub.node!r}, but its agent registered as {known.node!r}"
    pubs = {i: p for i, p in publications.items() if i not in broken}
    rows = []
    for name, regs in by_name.items():
        # An agent restarted under the same name leaves its old instance behind,
        # dead: only a node none of whose agents is alive is unreachable.
        alive = _replaced_dropped([r for r in regs if r.instance in pubs or r.instance in broken], pubs)
        rows.append(_row(name, alive or regs, pubs, broken, now, (remembered or {}).get(name)))
    rows.sort(key=lambda n: n.name)
    return FleetPicture(tuple(rows), now, tuple(problems))


def fleet_json(fleet: FleetPicture) -> dict[str, Any]:
    """``tpnode-tui fleet --json``. Unknown counts are null; unknown cards are never free."""
    widest = fleet.widest
    return {
        "nodes": [
            {
                "name": n.name,
                "reachable": n.reachable,
                "status": n.status,
                "problem": n.problem,
                "last_seen": n.last_seen,
                "series": n.series,
                "agent_version": n.agent_version,
                "total": n.total,
                "free": n.free,
                "unhealthy": n.count("unhealthy"),
                "drained": n.count("drained"),
                "intruders": n.intruder_cards,
                "largest_free_window": n.largest_free_window,
                "cards": [{"index": c.index, "state": c.state} for c in n.cards],
                "ssh": None if n.ssh is None else str(n.ssh),
                "dashboard": None if n.ssh is None else f"tpnode-tui --host {shlex.quote(str(n.ssh))}",
            }
            for n in fleet.nodes
        ],
        "up": fleet.up,
        "down": fleet.down,
        "free": fleet.free,
        "total": fleet.total,
        "largest_free_window": None if widest is None else {"node": widest[0], "cards": widest[1]},
        "problems": list(fleet.problems),
        "read_at": fleet.read_at,
    }


def seen_words(node: NodeRow, now: float) -> str:
    """When the node was last heard from: "just now", "2m00s ago", "unreachable since 14:03:27", or its status."""
    if node.last_seen is None:
        return "never"
    if node.status == UP:
        age = now - node.last_seen
        return "just now" if age < 5 else f"{format_duration(age)} ago"
    if node.status == UNREACHABLE:
        return (
            f"unreachable since {clock(node.last_seen)}"
            if node.seen_exactly
            else f"unreachable, seen {clock(node.last_seen)}"
        )
    return node.status


def unknown_now(node: NodeRow) -> NodeRow:
    """The row while the fleet cannot be read: every card unknown, none free."""
    return replace(node, status=STALE, cards=tuple(FleetCard(c.index, UNKNOWN) for c in node.cards))


def unreadable_words(error: str, since: Optional[float], fleet: Optional[FleetPicture]) -> tuple[str, str]:
    """The fleet cannot be read now: since when and why, then what the last reading said
    ("" when nothing was read yet)."""
    if fleet is None:
        return f"Nothing read yet: {error}", ""
    said = f"The last reading said: {summary_words(fleet)}; no card counts as free."
    return f"Stale since {clock(since or 0)}: {error}. ", said


def summary_words(fleet: FleetPicture) -> str:
    """The fleet in one line: nodes up and down, cards free, and where the most fit side by side."""
    nodes = len(fleet.nodes)
    parts = [
        f"{nodes} node{'s' if nodes != 1 else ''}: {fleet.up} up, {fleet.down} down",
        f"{fleet.free}/{fleet.total} cards free",
    ]
    widest = fleet.widest
    if widest is not None:
        parts.append(f"{widest[0]}: {widest[1]} consecutive free card{'s' if widest[1] != 1 else ''}")
    else:
        parts.append("no free card anywhere")
    return " · ".join(parts)
