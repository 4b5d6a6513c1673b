"""What the commands print: tables and lines for people, one line per fact.

Every string here passes :func:`~tpnode_tui.text.printable.printable_view` before
it is laid out, so a column is as wide as its escaped text and a label or a
process name written by someone else cannot move the cursor.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional, Sequence, TextIO

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch, ShellEntry
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import EvictReport
from tpnode_tui.port.node import Node
from tpnode_tui.port.types.notify import NotifyList
from tpnode_tui.port.types.readings import NodeView
from tpnode_tui.port.wire.jobs import launched_to_json
from tpnode_tui.text.printable import printable_view
from tpnode_tui.text.render import (
    cards_words,
    clock_time,
    ended_words,
    format_duration,
    format_mib,
)
from tpnode_tui.text.status import status_lines, time_left
from tpnode_tui.text.table import table


def print_status(
    snap: NodeSnapshot, out: Optional[TextIO] = None, note: Optional[str] = None, you: Optional[str] = None
) -> None:
    out = out or sys.stdout
    for line in status_lines(snap, time.time(), note, you):
        print(line, file=out)


def held_until(job: JobState, now: float) -> str:
    """Until when a reservation holds its cards, on this machine's clock, and how long that is from now."""
    until = time.strftime("%H:%M:%S", time.localtime(job.expires_at or 0))
    return f"until {until} ({time_left(job.expires_at, True, now)})"


def report_launch(result: Launched, as_json: bool, what: str) -> None:
    job = result.job
    until = f" {held_until(job, time.time())}" if job.expires_at is not None else ""
    if as_json:
        print(json.dumps(launched_to_json(result)))
    elif result.existing:
        print(f"{job.run_id} already holds {result.holding}{until}; nothing new started")
    else:
        print(f"{what} {job.run_id} on {result.holding}{until}")
        if job.kind == "job":
            print(output_line(job))
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)


def output_line(job: JobState) -> str:
    """Where a job's output goes, and the command that shows it to its owner and the operators."""
    if not job.log:
        return f"its output is kept by the Docker engine: docker logs {job.name}, for an account that may use it"
    return f"its output goes to its log {job.log}: tpnode-tui logs {job.key} shows it (-f follows it)"


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


def print_check(check: CardCheck, out: Optional[TextIO] = None) -> None:
    """A card's check: what became of it, then each criterion on its own line,
    and the last lines its command wrote."""
    out = out or sys.stdout
    shown = printable_view(check)
    effect = f"; {shown.effect}" if shown.effect else ""
    print(f"card {shown.card} {shown.summary()}{effect}", file=out)
    for f in shown.findings:
        print(f"  {f.outcome:<8} {f.name:<14} {f.words}", file=out)
    if shown.command is not None:
        for line in shown.command.tail:
            print(f"  {'':<8} {'':<14} | {line}", file=out)


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


def print_notify(listed: NotifyList) -> None:
    """An account's notification URLs, numbered as remove takes them, and its terminals."""
    for url in listed.urls:
        node = " (the node's events)" if url.node else ""
        failing = f": {url.failing}" if url.failing else ""
        print(f"{url.number}  {url.shown}{node}{failing}")
    if not listed.urls:
        print(f"no URLs: tpnode-tui notify add URL adds one (at most {listed.most})")
    if listed.terminals:
        print("your own terminals are told too, where you allow messages (mesg y; mesg n stops it)")
    else:
        print("this node writes to nobody's terminals (TUNEPLANE_NOTIFY_TERMINALS=false)")
