"""What the commands print: tables and lines for people, one line per fact.

Every string here passes :func:`~tpnode_tui.text.printable.printable_view` before
it is laid out, so a column is as wide as its escaped text and a label or a
process name written by someone else cannot move the cursor.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Mapping, Optional, Sequence, TextIO

from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, EvictReport
from tpnode_tui.port.node import Node
from tpnode_tui.port.types import NodeView
from tpnode_tui.port.wire import launched_to_json
from tpnode_tui.text.printable import printable_view
from tpnode_tui.text.render import (
    card_summary,
    cards_words,
    clock_time,
    ended_words,
    fence_words,
    format_duration,
    format_mib,
    node_fence_words,
    slice_name,
    slice_summary,
)
from tpnode_tui.text.table import table


def time_left(expires_at: Optional[float], live: bool, now: float) -> str:
    if expires_at is None or not live:
        return "-"
    return f"left {format_duration(expires_at - now)}"


def print_status(
    snap: NodeSnapshot, out: Optional[TextIO] = None, note: Optional[str] = None, you: Optional[str] = None
) -> None:
    out = out or sys.stdout
    snap = printable_view(snap)  # every field on its one line of the table
    lines = _head_lines(snap, note, you)
    if snap.occupancy.total:
        lines += ["", *_card_lines(snap.cards)]
    if snap.jobs:
        lines += ["", *_job_lines(snap.jobs, time.time(), snap.releases, snap.idle_held)]
    for line in lines:
        print(line, file=out)


def _head_lines(snap: NodeSnapshot, note: Optional[str], you: Optional[str]) -> list[str]:
    """The node, who asks, the probe's and the lock's state, and the occupancy in words."""
    model = snap.probe.model_name or "unknown cards"
    lines = [f"{snap.host} · {model} · probe {snap.probe.source} · {snap.runtime} · lock {snap.lock}"]
    lines += [said for said in (you, note) if said]
    if snap.probe.problem:
        lines.append(f"probe: {snap.probe.problem}")
    if snap.lock_state:
        lines.append(f"lock: {snap.lock_state}")
    lines.append(f"fence: {node_fence_words(snap.node_fence)}")
    if snap.probe.topology is None and snap.occupancy.total > 1:
        lines.append(f"topology: {topology_words(snap.probe.topology_unknowable)}")
    if snap.queue_problem:
        lines.append(f"queue: {snap.queue_problem}")
    lines.append(snap.explain)
    return lines


def topology_words(unknowable: Optional[str]) -> str:
    """What a node without a topology means for --same-switch and --contiguous:
    wait for it, or never (``unknowable``: why this node can never say)."""
    if unknowable:
        return (
            f"this node cannot say how its cards are linked ({unknowable}): --same-switch and --contiguous "
            "never fit here; other launches get consecutive cards"
        )
    return (
        "not known yet (read again as the probe reads the node): --same-switch and --contiguous wait "
        "for it (exit 75); other launches get consecutive cards"
    )


def _card_lines(cards: Sequence[CardView]) -> list[str]:
    """One line per card, each MIG card's slices under it."""
    lines = [f"{'CARD':<5}{'STATE':<13}{'HELD BY / WHY':<48}{'MEMORY':>22}"]
    for card in cards:
        mem = "N/A"
        if card.facts:
            mem = f"{format_mib(card.facts.memory_used_mib)} / {format_mib(card.facts.memory_total_mib)}"
        summary = card_summary(card)
        if len(summary) > 47:
            summary = summary[:46] + "…"
        lines.append(f"{card.index:<5}{card.state:<13}{summary:<48}{mem:>22}")
        for piece in card.slices:  # a MIG card's slices, each under its card
            used = f"{format_mib(piece.facts.memory_used_mib)} / {format_mib(piece.facts.memory_total_mib)}"
            said = f"{piece.facts.profile or 'profile unknown'}  {slice_summary(piece)}".rstrip()
            if len(said) > 45:
                said = said[:44] + "…"
            lines.append(f"  {slice_name(card.index, piece.index):<5}{piece.state:<11}{said:<47}{used:>22}")
    return lines


def _job_notes(job: JobState, releases_at: Optional[str]) -> tuple[str, ...]:
    """What is said under a job's row: its problems, when the node releases it
    unless used (``releases_at``), and why a live job is not fenced."""
    release = (f"releases at {releases_at} unless used",) if job.live and releases_at else ()
    unfenced = (fence_words(job.device_fence),) if job.live and not job.device_fence.fenced else ()
    return (*job.problems, *release, *unfenced)


def _job_lines(
    jobs: Sequence[JobState], now: float, releases: Mapping[str, float] = {}, idle_held: Mapping[str, float] = {}
) -> list[str]:
    """The jobs' table, each job's problems (and why it is not fenced) under its row.
    ``releases``: reservations the node releases then unless used; ``idle_held``: jobs
    flagged idle-held."""
    rows = []
    notes: dict[int, tuple[str, ...]] = {}
    for job in jobs:
        status = job.status if job.exit_code is None else f"{job.status} ({job.exit_code})"
        if job.live and job.key in idle_held:
            status += ", idle-held"
        if job.shell_processes:
            status += f", shell ({job.shell_processes})"
        age = format_duration(now - job.started_at) if job.started_at else "-"
        cards = ",".join([*map(str, job.gpus), *(ref.short for ref in job.slices)]) or "-"
        left = time_left(job.expires_at, job.live, now)
        fenced = "yes" if job.device_fence.fenced else "no"
        rows.append([job.key, job.kind, status, cards, age, left, job.owner, fenced])
        notes[len(rows)] = _job_notes(job, clock_time(releases[job.key], now) if job.key in releases else None)
    lines = []
    for i, line in enumerate(
        table(["RUN ID", "KIND", "STATUS", "CARDS", "AGE", "LEFT", "OWNER", "FENCED"], rows, right=frozenset({4}))
    ):
        lines.append(line)
        lines += [f"  ! {problem}" for problem in notes.get(i, ())]
    return lines


def report_launch(result: Launched, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(launched_to_json(result)))
    elif result.existing:
        print(f"{result.job.run_id} already holds {result.holding}; nothing new started")
    else:
        print(f"{what} {result.job.run_id} on {result.holding}")
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)


def shell_line(entry: ShellEntry) -> str:
    """What a shell on a reservation opens with: where it runs, which cards
    and how CUDA numbers them there, and how to leave."""
    visible = dict(entry.env).get("CUDA_VISIBLE_DEVICES", "")
    return f"shell on {entry.run_id} ({entry.holding}: CUDA_VISIBLE_DEVICES={visible}); exit to return"


def you_line(view: NodeView, node: Node) -> str:
    you = view.you
    role = ", an operator" if you.operator else ""
    limit = "" if you.card_limit is None else f" of at most {you.card_limit}"
    where = "served by this process (no agent answers)" if node.in_process else f"through the node's {node.where}"
    return f"you: {you.user} (uid {you.uid}{role}), holding {cards_words(you.cards_held)}{limit}; {where}"


def print_queue(queue: Sequence[QueuedLaunch], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if not queue:
        print("no launch is queued or waiting", file=out)
        return
    now = time.time()
    rows = [
        [q.run_id, q.state, q.wants, q.owner or "-", format_duration(now - q.queued_at), q.waiting_for or "-"]
        for q in printable_view(tuple(queue))
    ]
    for line in table(["RUN ID", "STATE", "WANTS", "OWNER", "WAITING", "FOR"], rows):
        print(line, file=out)


def print_audit(entries: Sequence[dict[str, Any]], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    for entry in printable_view(list(entries)):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("time", 0)))
        print(
            f"{when}  {entry.get('user', '?')}  {entry.get('action', '?')} {entry.get('target', '')}"
            f"  {entry.get('result', '')}: {entry.get('message', '')}",
            file=out,
        )


def print_evicted(report: EvictReport, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    shown = printable_view(report)
    if not shown.processes:
        print(f"nothing to evict on card {shown.card}: no process from outside the platform is there", file=out)
        return
    for p in shown.processes:
        memory = "" if p.used_memory_mib is None else f", {format_mib(p.used_memory_mib)}"
        print(
            f"card {p.card}: pid {p.pid} ({p.user or 'unknown user'}, {p.belongs}{memory}) "
            f"{p.command or 'command not readable'}: {p.fate}",
            file=out,
        )


def event_line(entry: dict[str, Any], now: float) -> str:
    """One entry of the node's log: when, what kind, its cards (unless its
    message begins with them: "card 7: XID 79" said twice reads as a doubled
    prefix), whose, and the message."""
    shown = printable_view(entry)
    cards = shown.get("cards")
    message = str(shown.get("message", ""))
    named = cards_words(cards) if isinstance(cards, list) and cards else ""
    where = f"  {named}" if named and not message.startswith((f"{named}:", f"{named} ")) else ""
    who = f"  {shown['user']}" if shown.get("user") else ""
    return f"{clock_time(float(shown.get('time', 0)), now)}  {shown.get('kind', '?')}{where}{who}: {message}"


def removed_line(job: JobState) -> str:
    """What reclaim says of a record it removed, and how the job ended (:func:`ended_words`)."""
    return f"removed {job.key} {ended_words(job)}"
