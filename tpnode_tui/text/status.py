"""The node's state as ``tpnode-tui status`` writes it: the node, its cards and its jobs, a line per fact.

The CLI prints these lines and the web page serves them (``/state.txt``).
Every string passes :func:`~tpnode_tui.text.printable.printable_view` before
it is laid out, so a column is as wide as its escaped text and a label or a
process name written by someone else cannot move the cursor.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import INTRUDER, CardView
from tpnode_tui.text.cards import drain_until, drained_by
from tpnode_tui.text.header import intruder_summary
from tpnode_tui.text.printable import printable_view
from tpnode_tui.text.render import (
    card_summary,
    clock_time,
    fence_words,
    format_duration,
    format_mib,
    intruder_words,
    node_fence_words,
    slice_name,
    slice_summary,
)
from tpnode_tui.text.table import table


def time_left(expires_at: Optional[float], live: bool, now: float) -> str:
    if expires_at is None or not live:
        return "-"
    return f"left {format_duration(expires_at - now)}"


def status_lines(snap: NodeSnapshot, now: float, note: Optional[str] = None, you: Optional[str] = None) -> list[str]:
    """``tpnode-tui status``: the node and the occupancy in words, a line per card, the jobs' table.
    ``note`` and ``you``: a line each under the first, when given."""
    snap = printable_view(snap)  # every field on its one line of the table
    lines = _head_lines(snap, note, you)
    if snap.occupancy.total:
        lines += ["", *_card_lines(snap)]
    if snap.jobs:
        lines += ["", *_job_lines(snap.jobs, now, snap.releases, snap.idle_held)]
    return lines


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
    intruders = intruder_summary(snap)
    lines.append(f"{snap.explain}; {intruders}" if intruders else snap.explain)
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


def _intruder_lines(card: CardView) -> list[str]:
    """Each process on the card (on a MIG card: on one of its slices) that is neither
    its job's nor its reservation's owner's, named: who, pid, command cut short, memory."""
    if card.slices:
        named = [
            intruder_words(h, card.index, piece.job, piece.run_id or "", on=piece.facts)
            for piece in card.slices
            for h in piece.holders
            if h.belongs == INTRUDER
        ]
    else:
        named = [
            intruder_words(h, card.index, card.job, card.run_id or "") for h in card.holders if h.belongs == INTRUDER
        ]
    return [f"  ! {words}" for words in named]


def _card_lines(snap: NodeSnapshot) -> list[str]:
    """One line per card, each MIG card's slices under it, and under those who
    drained it and until when, and the intruders on it."""
    lines = [f"{'CARD':<5}{'STATE':<13}{'HELD BY / WHY':<48}{'MEMORY':>22}"]
    for card in snap.cards:
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
        if card.drain is not None:
            until = drain_until(card.drain, card.check, snap.return_after_check, snap.boot)
            lines.append(f"  drained by {drained_by(card.drain)}: {until}")
        lines += _intruder_lines(card)
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
