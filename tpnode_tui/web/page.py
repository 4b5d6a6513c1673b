"""What the web page says: a node's cards, banners and usage, or the fleet's nodes, as JSON the page lays out.

Every word is made here, in Python, from the same wording the dashboard uses
(tpnode_tui/text/, the fleet's record): the page's script only places each
string (as text, never as markup) and counts the time since, or until, a
moment it is given, so a job's "up 3m05s" moves on without a new message.
A moment comes as ``{"before": "up ", "since": T}`` (or ``"until"``, with the
words to say once it has passed, ``"past"``), and the script writes the
duration between the two as :func:`~tpnode_tui.text.render.format_duration`
does.

Everything put here has been made printable first (the snapshot as it was
followed, names read from Redis through ``printable``), so no string can
carry a control character to the page either.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from tpnode_tui.fleet.record import (
    UNKNOWN,
    UP,
    FleetPicture,
    NodeRow,
    seen_words,
    summary_words,
    unknown_now,
    unreadable_words,
)
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.usage import UsageFigures, UsageReport
from tpnode_tui.model.views import CardView, SliceView
from tpnode_tui.text.badges import STALE_BADGE, STATE_MEANING, badge, symbol
from tpnode_tui.text.cards import (
    STATE_NOTES,
    UNKNOWN_UNTIL_READ,
    drain_until,
    drained_by,
    memory_words,
    readings,
    who_words,
)
from tpnode_tui.text.header import blind_banner, free_words, intruder_summary, stale_banner
from tpnode_tui.text.printable import printable
from tpnode_tui.text.render import clock_time, show_command, slice_name
from tpnode_tui.text.render import slice_summary as slice_who
from tpnode_tui.text.usage import (
    OWN_ROWS,
    figures_explained,
    has_slices,
    hours,
    intruder_cells,
    intruders,
    nothing_held,
)

Words = dict[str, Any]

#: a fleet node's status: its word's mark and colour (only "up" shows its cards as they are)
STATUS_MARKS = {
    UP: ("●", "#2e7d32"),
    "stale": ("◐", "#e08600"),
    "unreachable": ("✖", "#c62828"),
    "malformed": ("!", "#c62828"),
    "conflict": ("⚠", "#c62828"),
}
#: the order the legend lists the states in
LEGEND = ("free", "job", "reservation", "external", "unhealthy", "unverified", "drained", "mig")
#: the spans the usage table covers, each ending now: (its title, its length)
USAGE_SPANS: tuple[tuple[str, float], ...] = (("Last 24 hours", 86400.0), ("Last 7 days", 7 * 86400.0))


@dataclass(frozen=True)
class UsageShown:
    """The node's usage as last asked (every string printable), or why it could not be had."""

    at: float
    #: a report by account for each of USAGE_SPANS, in order
    spans: tuple[UsageReport, ...] = ()
    #: a report by job covering the running reservations, for their idle share
    jobs: Optional[UsageReport] = None
    problem: Optional[str] = None


@dataclass(frozen=True)
class NodeShown:
    """What the page shows of a node: its snapshot with other accounts' commands hidden and
    every string printable (None until one was read), how fresh it is, and its usage."""

    snapshot: Optional[NodeSnapshot]
    #: since when what is shown may be out of date, and why (None while readings come and succeed)
    stale_since: Optional[float] = None
    stale_error: str = ""
    #: the node's agent stopped answering (rather than its polls failing)
    agent_gone: bool = False
    #: where the node is read from, in words
    served: str = ""
    usage: Optional[UsageShown] = None


def _mark(state: str, stale: bool = False) -> Words:
    """A state's badge: its word, a symbol beside it, its colour, and what it means."""
    if stale:  # the dashboard's "?", with the fleet view's word for it
        return {
            "state": UNKNOWN,
            "badge": UNKNOWN.upper(),
            "symbol": STALE_BADGE[0],
            "colour": STALE_BADGE[1],
            "meaning": "not known now: shown as last read, and never counted as free",
        }
    label, colour = badge(state)
    if not colour.startswith("#"):  # a state this version does not know: named as it came, in grey
        colour = STALE_BADGE[1]
    return {
        "state": state,
        "badge": label,
        "symbol": symbol(state),
        "colour": colour,
        "meaning": STATE_MEANING.get(state, ""),
    }


def _line(text: str, kind: str = "") -> Words:
    return {"text": text, "kind": kind}


def _since(before: str, at: float, after: str = "", kind: str = "") -> Words:
    return {"before": before, "since": at, "after": after, "kind": kind}


def _until(before: str, at: float, past: str, after: str = "", kind: str = "") -> Words:
    return {"before": before, "until": at, "after": after, "past": past, "kind": kind}


def _runs(job: Optional[JobState]) -> Optional[str]:
    """What a job runs, on one line (hidden where it is another account's); None for a reservation."""
    if job is None or job.kind == "reservation":
        return None
    if job.image:
        return f"image {job.image}" + (f": {show_command(job.command)}" if job.command else "")
    return show_command(job.command) if job.command else None


def _notes(card: CardView, now: float, snap: NodeSnapshot) -> list[Words]:
    """What needs attention on the card (a drain: by whom, and until when), then its time,
    then what its state says in a word."""
    notes: list[Words] = []
    if card.state == "unhealthy":
        notes.append(_line(STATE_NOTES["unhealthy"], "error"))
    if card.warning:
        notes.append(_line(f"! {card.warning}", "error" if card.intruders else "warning"))
    if card.drain is not None:
        notes.append(_since(f"drained by {drained_by(card.drain)}, ", card.drain.at, " ago", "drained"))
        until = drain_until(card.drain, card.check, snap.return_after_check, snap.boot)
        notes.append(_line(until, "quiet"))
    job = card.job
    if card.state == "reservation" and job is not None and job.expires_at:
        until = f" · until {clock_time(job.expires_at, now)}"
        notes.append(_until("ends in ", job.expires_at, "expired, ending", until))
    elif card.state == "job" and job is not None and job.started_at:
        notes.append(_since("up ", job.started_at))
    if card.state in ("external", "unverified"):
        notes.append(_line(STATE_NOTES[card.state], "quiet"))
    return notes


def _unused(card: CardView, snap: NodeSnapshot) -> Optional[Words]:
    """What is said of a holder not using the card: the node releases it soon, unused for a while, or idle-held."""
    key = card.job.key if card.job is not None else card.run_id
    if key is None:
        return None
    if key in snap.releases:
        return _until("releases in ", snap.releases[key], "releasing", kind="error")
    if key in snap.idle:
        return _since("idle ", snap.idle[key], kind="warning")
    if key in snap.idle_held:
        return _since("idle-held ", snap.idle_held[key], kind="warning")
    return None


def _slice(card: int, piece: SliceView) -> Words:
    f = piece.facts
    return _mark(piece.state) | {
        "name": slice_name(card, piece.index),
        "profile": f.profile or "profile unknown",
        "who": slice_who(piece),
        "memory": memory_words(f.memory_used_mib, f.memory_total_mib),
    }


def _card(card: CardView, snap: NodeSnapshot, stale: bool, now: float) -> Words:
    f = card.facts
    used, total = (f.memory_used_mib, f.memory_total_mib) if f else (None, None)
    words = _mark(card.state, stale) | {
        "index": card.index,
        "who": who_words(card, stale),
        "runs": None if stale else _runs(card.job),
        "memory": memory_words(used, total),
        "memory_share": None if used is None or not total else min(1.0, max(0.0, used / total)),
        "util": None if f is None else f.utilization_pct,
        "readings": None if card.slices else readings(card),
        "slices": [_slice(card.index, piece) for piece in card.slices],
    }
    if stale:  # the banner says why
        return words | {"notes": [_line(UNKNOWN_UNTIL_READ, "quiet")], "unused": None}
    return words | {"notes": _notes(card, now, snap), "unused": _unused(card, snap)}


def _header(snap: NodeSnapshot, stale: bool, served: str) -> Words:
    model = snap.probe.model_name or "unknown cards"
    series = f" · series {snap.series}" if snap.series and snap.series.lower() != model.lower() else ""
    fence = "jobs fenced" if snap.node_fence.fenced else "no fence"
    return {
        "host": snap.host,
        "about": f"{model}{series} · probe {snap.probe.source} · runtime {snap.runtime} · lock {snap.lock} · {fence}",
        "free": free_words(snap, stale),
        "served": served,
        # how old the reading is, said beside its time: "updated 5s ago"
        "age": "last good reading" if stale else "updated",
    }


def _summary(snap: NodeSnapshot, stale: bool) -> list[Words]:
    said = snap.explain
    intruders = intruder_summary(snap)
    if not stale:
        return [_line(said)] + ([_line(intruders, "error")] if intruders else [])
    said = f"{said}; {intruders}" if intruders else said
    return [_line("Now unknown.", "error"), _line(f"The last good reading said: {said}", "quiet")]


def _banners(shown: NodeShown) -> list[Words]:
    banners = []
    if shown.stale_since is not None:
        since = time.strftime("%H:%M:%S", time.localtime(shown.stale_since))
        text = stale_banner(shown.snapshot is not None, since, shown.stale_error, shown.agent_gone)
        banners.append({"kind": "gone" if shown.agent_gone else "stale", "text": text})
    snap = shown.snapshot
    blind = blind_banner(snap, snap is not None and snap.allow_unverified, compact=False)
    if blind is not None:
        banners.append({"kind": "blind", "text": blind})
    return banners


def _figures(f: UsageFigures, slices: bool, intruded: bool) -> list[str]:
    cells = [hours(f.held_card_hours), hours(f.used_card_hours), hours(f.idle_card_hours)]
    if slices:
        cells += [hours(f.held_slice_hours), hours(f.idle_slice_hours)]
    cells.append(_share(f.idle_card_hours, f.held_card_hours))
    if intruded:
        cells += intruder_cells(f)
    return cells


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _span(title: str, report: UsageReport) -> Words:
    slices, intruded = has_slices(report), intruders(report)
    head = ["account", "held", "used", "idle", *(["slices held", "slices idle"] if slices else []), "idle share"]
    head += ["intruded", "intruders' peak"] if intruded else []
    rows = [[row.user or "no owner recorded", *_figures(row.figures, slices, intruded)] for row in report.rows]
    return {
        "title": title,
        "head": head,
        "rows": rows,
        "total": ["total", *_figures(report.total, slices, intruded)],
        "notes": ([] if report.everyone else [OWN_ROWS])
        + ([nothing_held(report)] if not report.rows else [])
        + [figures_explained(report, slices)],
    }


def _reservations(snap: NodeSnapshot, usage: Optional[UsageShown], now: float) -> list[Words]:
    """Each running reservation: whose, which cards, until when, and how much of its held time was idle so far."""
    rows = {r.run_id: r for r in (usage.jobs.rows if usage and usage.jobs else ()) if r.end is None}
    out = []
    for job in snap.jobs:
        if not job.live or job.kind != "reservation":
            continue
        row = rows.get(job.key)
        if row is None:
            idle = "not recorded yet" if usage is not None and usage.problem is None else "not known"
        else:
            f = row.figures
            whole = bool(job.gpus)
            held, unused = (f.held_card_hours, f.idle_card_hours) if whole else (f.held_slice_hours, f.idle_slice_hours)
            unit = "card-hours" if whole else "slice-hours"
            idle = f"{_share(unused, held)} idle of {hours(held)} {unit}" if held else "none held yet"
        out.append(
            {
                "run_id": job.key,
                "owner": job.owner or "nobody recorded",
                "holds": job.holding,
                "until": "-" if job.expires_at is None else clock_time(job.expires_at, now),
                "idle": idle,
            }
        )
    return out


def _usage(shown: NodeShown) -> Words:
    usage = shown.usage
    if usage is None:
        return {"problem": "asking the node's agent…", "spans": []}
    if usage.problem is not None:
        return {"problem": usage.problem, "spans": []}
    return {"problem": None, "spans": [_span(title, r) for (title, _), r in zip(USAGE_SPANS, usage.spans)]}


def node_page(shown: NodeShown, now: float) -> Words:
    """The node page's words. Its moments are absolute (the page counts from them); what is
    said of the reading's own age comes beside it, apart, so a reading that changed
    nothing else changes nothing here."""
    snap = shown.snapshot
    stale = shown.stale_since is not None
    page: Words = {"kind": "node", "banners": _banners(shown)}
    if snap is None:
        return page | {"header": None, "cards": [], "summary": [], "usage": _usage(shown), "reservations": []}
    return page | {
        "header": _header(snap, stale, shown.served),
        "summary": _summary(snap, stale),
        "cards": [_card(card, snap, stale, now) for card in snap.cards],
        "legend": [_mark(state) for state in LEGEND],
        "usage": _usage(shown),
        "reservations": _reservations(snap, shown.usage, now),
    }


# ── the fleet ───────────────────────────────────────────────────────────────


def _count(value: Optional[int]) -> str:
    return "?" if value is None else str(value)


def _node(node: NodeRow, now: float) -> Words:
    mark, colour = STATUS_MARKS.get(node.status, ("!", "#c62828"))
    up = node.status == UP
    seen = (
        {"before": "", "since": node.last_seen, "after": " ago", "soon": 5.0, "kind": "quiet"}
        if up and node.last_seen is not None
        else _line(seen_words(node, now), "quiet" if up else "error")
    )
    return {
        "name": printable(node.name),
        "status": node.status,
        "badge": node.status.upper(),
        "symbol": mark,
        "colour": colour,
        "series": printable(node.series) or "-",
        "free": f"{node.free}/{node.total}" if node.known else f"?/{node.total}",
        "window": _count(node.largest_free_window),
        "unhealthy": _count(node.count("unhealthy")),
        "drained": _count(node.count("drained")),
        "intruded": _count(node.intruder_cards),
        "seen": seen,
        "problem": None if node.problem is None else printable(node.problem),
        "cards": [_mark(c.state, stale=not up) | {"index": c.index} for c in node.cards],
        "dashboard": None if node.ssh is None else printable(f"tpnode-tui --host {node.ssh}"),
    }


def fleet_page(
    fleet: Optional[FleetPicture], error: Optional[str], since: Optional[float], where: str, now: float
) -> Words:
    """The fleet page's words: where it is read from, a banner while it cannot be, and a row per node."""
    banner = None
    if error is not None:
        head, said = unreadable_words(printable(error), since, fleet)
        banner = f"{head}{said}"
    nodes = () if fleet is None else fleet.nodes
    if error is not None:
        nodes = tuple(unknown_now(node) for node in nodes)
    summary = None if fleet is None else printable(summary_words(fleet))
    return {
        "kind": "fleet",
        "where": printable(where),
        "banner": banner,
        "summary": summary,
        "problems": [] if fleet is None else [printable(p) for p in fleet.problems],
        "nodes": [_node(node, now) for node in nodes],
        "legend": [_mark(state) for state in LEGEND] + [_mark(UNKNOWN, stale=True)],
    }


def fleet_lines(fleet: FleetPicture, now: float) -> list[str]:
    """The fleet in text, for ``/state.txt``: its summary, then a line per node."""
    lines = [printable(summary_words(fleet)), *(printable(p) for p in fleet.problems), ""]
    for node in fleet.nodes:
        free = f"{node.free}/{node.total} free" if node.known else f"?/{node.total} free"
        said = f"{node.name}  {node.status}  {free}  {seen_words(node, now)}"
        lines.append(printable(f"{said}: {node.problem}" if node.problem else said))
    return lines
