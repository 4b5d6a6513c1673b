"""The headless CLI: the same allocator and lock as the dashboard, for shells and scripts.

Exit codes are part of the interface, so scripts can tell "try later" from
"this is wrong": 0 done; 75 no capacity now, or the lock not had within
``--wait`` (EX_TEMPFAIL: try again later); 1 any other failure, including a
request that can never fit; 2 bad usage or configuration; 141 standard output
closed early (as a program killed by SIGPIPE: ``tpnode-tui status | head -1``).
Errors are one line on stderr, never a traceback.

A command that has to wait for the allocation lock says once, on stderr, what
it waits for. It never waits for cards: with none free it exits 75 at once,
and a script decides whether to try again (the dashboard queues instead).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional, Sequence, TextIO, TypeVar

from . import __version__
from .config import (
    Settings,
    decimal_number,
    parse_duration,
    settings_from_flags,
    state_dir_exists,
    whole_number,
)
from .model import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    BadRequest,
    Evicted,
    EvictReport,
    Launched,
    LockWaitTimeout,
    NodeSnapshot,
    QueuedLaunch,
    TpnodeError,
    error_line,
    exit_code,
)
from .node.base import Node
from .node.choose import open_node
from .node.http import straight
from .node.remote import AgentNode
from .port import LaunchRequest, NodeView, ReserveRequest, new_run_id
from .printable import PrintableStream, printable, printable_view
from .render import card_summary, cards_words, clock_time, env_lines, format_duration, format_mib
from .wire import job_to_json, launched_to_json, queued_to_json, snapshot_to_json

T = TypeVar("T")

#: 128 + SIGPIPE: what a shell reports for a program a closed pipe ended
EXIT_PIPE = 141


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of exiting on its own."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def _cards(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cards")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} cards: a job needs at least 1")
    return value


def _card_list(text: str) -> tuple[int, ...]:
    """"3" or "0,1,5": card indices as ASCII digits, none twice."""
    cards = [whole_number(part.strip()) for part in text.split(",")]
    if not cards or any(c is None for c in cards):
        raise argparse.ArgumentTypeError(f"{text!r} is not a card index or a list like 0,1,5")
    listed = tuple(c for c in cards if c is not None)
    if len(set(listed)) != len(listed):
        raise argparse.ArgumentTypeError(f"{text!r} names a card twice")
    return listed


def _seconds(text: str) -> float:
    value = decimal_number(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (write it like 30 or 0.5)")
    return value


WAIT_HELP = ("at most this long for the allocation lock (default: as long as it takes); "
             "then exit 75. Cards are never waited for: with none free, exit 75 at once")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tpnode-tui",
        description="See who holds each GPU on this node, and hand cards to jobs without ever sharing one.",
    )
    parser.add_argument("--version", action="version", version=f"tpnode-tui {__version__}")
    node = parser.add_argument_group("node settings (each overrides its TUNEPLANE_* variable)")
    node.add_argument("--gpu-count", metavar="N", help="card count; 0 asks the driver")
    node.add_argument("--probe", metavar="P", help="nvml, smi, simulated:PATH or auto")
    node.add_argument("--runtime", metavar="R", help="docker, process or auto")
    node.add_argument("--state-dir", metavar="DIR", help="lock file, state file and job logs")
    node.add_argument("--redis-url", metavar="URL", help="use a Redis lease as the cross-process lock")
    node.add_argument("--docker-gpu-mode", metavar="M", help="nvidia, env or none")
    node.add_argument("--mem-busy-mib", metavar="MIB", help="memory in use from which a card is busy")
    node.add_argument("--lock-lease-ms", metavar="MS", help="Redis lease length")
    node.add_argument("--hold-image", metavar="IMG", help="image that holds a reservation's cards")
    node.add_argument("--allow-unverified", action="store_true", default=None,
                      help="hand out cards even while use from outside cannot be probed")
    node.add_argument("--agent", metavar="MODE",
                      help="auto (the node's agent if it answers), on (the agent only) or off (this process)")
    node.add_argument("--agent-socket", metavar="PATH", help="the node agent's Unix socket")
    ui = parser.add_argument_group("dashboard (no command)")
    ui.add_argument("--demo", action="store_true", help="a simulated 8-card node: no GPU, Docker or Redis needed")
    ui.add_argument("--readonly", action="store_true", help="show only: every action is refused")
    ui.add_argument("--interval", type=_seconds, default=1.0, metavar="S",
                    help="seconds between polls (0.2 to 3600)")
    ui.add_argument("-v", "--verbose", action="store_true", help="log to stderr")

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    status = sub.add_parser("status", help="occupancy, cards and jobs now")
    status.add_argument("--json", action="store_true", help="machine-readable")

    launch = sub.add_parser("launch", help="place and start a job on free cards")
    launch.add_argument("--cards", type=_cards, required=True, metavar="N")
    launch.add_argument("--run-id", metavar="ID", help="default: a generated one")
    launch.add_argument("--image", metavar="IMG", help="container image (docker runtime)")
    launch.add_argument("--wait", type=_seconds, metavar="SECONDS", help=WAIT_HELP)
    launch.add_argument("--queue", action="store_true",
                        help="with no capacity now, wait in the agent's queue instead of exit 75")
    launch.add_argument("--json", action="store_true")
    launch.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG...]")

    reserve = sub.add_parser("reserve", help="hold cards for a person until a time")
    reserve.add_argument("--cards", type=_cards, required=True, metavar="N")
    reserve.add_argument("--for", dest="duration", required=True, metavar="DURATION", help="e.g. 30m, 2h, 1d")
    reserve.add_argument("--owner", metavar="NAME", help="default: the current user")
    reserve.add_argument("--run-id", metavar="ID", help="default: a generated one")
    reserve.add_argument("--wait", type=_seconds, metavar="SECONDS", help=WAIT_HELP)
    reserve.add_argument("--json", action="store_true")

    reclaim = sub.add_parser("reclaim", help="remove exited jobs (never a running one)")
    reclaim.add_argument("run_id", nargs="?", metavar="RUN_ID")

    stop = sub.add_parser("stop", help="stop a running job or reservation")
    stop.add_argument("run_id", metavar="RUN_ID")

    extend = sub.add_parser("extend", help="hold a reservation longer (its owner or an operator)")
    extend.add_argument("run_id", metavar="RUN_ID")
    extend.add_argument("--for", dest="duration", required=True, metavar="DURATION",
                        help="how much longer, e.g. 30m, 2h")
    extend.add_argument("--json", action="store_true")

    env = sub.add_parser("env", help='exports that point CUDA at a job\'s cards: eval "$(tpnode-tui env ID)"')
    env.add_argument("run_id", metavar="RUN_ID")

    queue = sub.add_parser("queue", help="launches queued or waiting for the lock")
    queue.add_argument("--json", action="store_true")

    cancel = sub.add_parser("cancel", help="drop a queued launch (its owner or an operator)")
    cancel.add_argument("run_id", metavar="RUN_ID")

    audit = sub.add_parser("audit", help="who asked the node for what (operators see everyone's)")
    audit.add_argument("--since", metavar="DURATION", help="only the last DURATION, e.g. 1h")
    audit.add_argument("--json", action="store_true")

    drain = sub.add_parser("drain", help="take cards out of service (operators)")
    drain.add_argument("cards", type=_card_list, metavar="CARD[,CARD...]")
    drain.add_argument("--reason", required=True, metavar="TEXT", help="why, in words the next person understands")
    drain.add_argument("--json", action="store_true")

    undrain = sub.add_parser("undrain", help="put drained cards back in service (operators)")
    undrain.add_argument("cards", type=_card_list, metavar="CARD[,CARD...]")
    undrain.add_argument("--json", action="store_true")

    evict = sub.add_parser("evict", help="end what squats on a card from outside the platform (operators)")
    evict.add_argument("card", type=_card_list, metavar="CARD")
    evict.add_argument("--pid", type=_cards, metavar="PID", help="only this process of the card's")
    evict.add_argument("--kill", action="store_true", help="SIGKILL what SIGTERM did not end within the grace")
    evict.add_argument("--yes", action="store_true", help="do not ask first (needed without a terminal)")
    evict.add_argument("--json", action="store_true")

    events = sub.add_parser("events", help="what happened on the node: health, drains, intruders, launches, ...")
    events.add_argument("--since", metavar="DURATION", help="only the last DURATION, e.g. 1h")
    events.add_argument("--card", type=_card_list, metavar="CARD", help="only what concerns this card")
    events.add_argument("--follow", action="store_true", help="keep printing new events as they happen")
    events.add_argument("--json", action="store_true", help="one JSON object per line")

    sub.add_parser("agent", help="serve this node to every account on its socket (run as root, or by systemd)")

    fleet = sub.add_parser("fleet", help="every node publishing to TUNEPLANE_FLEET_URL, read-only")
    fleet.add_argument("--json", action="store_true", help="one reading, machine-readable")
    return parser


# -- output -------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """Rows as lines, every column as wide as its widest cell: a 63-character
    run id or an 8-card list must not run into the next column."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    return [line(header)] + [line(row) for row in rows]


def _time_left(expires_at: Optional[float], live: bool, now: float) -> str:
    if expires_at is None or not live:
        return "-"
    return f"left {format_duration(expires_at - now)}"


def print_status(snap: NodeSnapshot, out: Optional[TextIO] = None, note: Optional[str] = None,
                 you: Optional[str] = None) -> None:
    out = out or sys.stdout
    snap = printable_view(snap)  # every field on its one line of the table
    occ = snap.occupancy
    model = snap.probe.model_name or "unknown cards"
    print(f"{snap.host} · {model} · probe {snap.probe.source} · {snap.runtime} · lock {snap.lock}", file=out)
    if you:
        print(you, file=out)
    if note:
        print(note, file=out)
    if snap.probe.problem:
        print(f"probe: {snap.probe.problem}", file=out)
    if snap.lock_state:
        print(f"lock: {snap.lock_state}", file=out)
    print(snap.explain, file=out)
    if occ.total:
        print(file=out)
        print(f"{'CARD':<5}{'STATE':<13}{'HELD BY / WHY':<48}{'MEMORY':>22}", file=out)
        for card in snap.cards:
            mem = "N/A"
            if card.facts:
                mem = f"{format_mib(card.facts.memory_used_mib)} / {format_mib(card.facts.memory_total_mib)}"
            summary = card_summary(card)
            if len(summary) > 47:
                summary = summary[:46] + "…"
            print(f"{card.index:<5}{card.state:<13}{summary:<48}{mem:>22}", file=out)
    if snap.jobs:
        print(file=out)
        now = time.time()
        rows = []
        notes: dict[int, tuple[str, ...]] = {}
        for job in snap.jobs:
            status = job.status if job.exit_code is None else f"{job.status} ({job.exit_code})"
            age = format_duration(now - job.started_at) if job.started_at else "-"
            cards = ",".join(map(str, job.gpus)) or "-"
            rows.append([job.key, job.kind, status, cards, age,
                         _time_left(job.expires_at, job.live, now), job.owner])
            notes[len(rows)] = job.problems
        lines = _table(["RUN ID", "KIND", "STATUS", "CARDS", "AGE", "LEFT", "OWNER"], rows, right=frozenset({4}))
        for i, line in enumerate(lines):
            print(line, file=out)
            for problem in notes.get(i, ()):
                print(f"  ! {problem}", file=out)


def _report_launch(result: Launched, as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps(launched_to_json(result)))
    elif result.existing:
        print(f"{result.job.run_id} already holds {cards_words(result.gpus)}; nothing new started")
    else:
        print(f"{what} {result.job.run_id} on {cards_words(result.gpus)}")
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)


def _you_line(view: NodeView, node: Node) -> str:
    you = view.you
    role = ", an operator" if you.operator else ""
    limit = "" if you.card_limit is None else f" of at most {you.card_limit}"
    where = f"through the node's {node.where}" if node.via == "agent" else "served by this process (no agent answers)"
    return f"you: {you.user} (uid {you.uid}{role}), holding {cards_words(you.cards_held)}{limit}; {where}"


def print_queue(queue: Sequence[QueuedLaunch], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    if not queue:
        print("no launch is queued or waiting", file=out)
        return
    now = time.time()
    rows = [[q.run_id, q.state, cards_words(q.cards), q.owner or "-", format_duration(now - q.queued_at),
             q.waiting_for or "-"] for q in printable_view(tuple(queue))]
    for line in _table(["RUN ID", "STATE", "WANTS", "OWNER", "WAITING", "FOR"], rows):
        print(line, file=out)


def print_audit(entries: Sequence[dict[str, Any]], out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    for entry in printable_view(list(entries)):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.get("time", 0)))
        print(f"{when}  {entry.get('user', '?')}  {entry.get('action', '?')} {entry.get('target', '')}"
              f"  {entry.get('result', '')}: {entry.get('message', '')}", file=out)


# -- commands -----------------------------------------------------------------


def _say(message: str) -> None:
    print(f"tpnode-tui: {printable(message)}", file=sys.stderr, flush=True)


def _say_once() -> Callable[[str], None]:
    """What a waiting launch says: the first reason only, so a wait of an
    hour is one line, not one per retry."""
    said = False

    def say(why: str) -> None:
        nonlocal said
        if not said:
            said = True
            _say(why)

    return say


def _state_dir_note(settings: Settings) -> Optional[str]:
    """A plain sentence when the state dir this command uses does not exist yet.

    A mistyped TUNEPLANE_STATE_DIR otherwise shows every card free and makes a
    launch start a second, private record of the node: the one thing worse
    than no record. A state dir that is not a directory is a ConfigError.
    """
    from .runtimes import choose_runtime

    process = choose_runtime(settings) == "process"
    if not process and settings.redis_url:  # docker with a Redis lease: no state dir at all
        return None
    if state_dir_exists(settings.state_dir):
        return None
    recorded = "no job has been recorded here" if process else "no launch has taken the allocation lock here"
    return (f"no state dir at {settings.state_dir}: {recorded}. If jobs were expected, check "
            "TUNEPLANE_STATE_DIR: everyone who allocates on this node must use the same one")


def _run_id(given: Optional[str]) -> Optional[str]:
    """An explicit --run-id is taken as given, so an empty one is refused rather
    than silently replaced by a generated one."""
    if given is not None and not given.strip():
        raise BadRequest("--run-id is empty: give 1 to 63 letters, digits, '.', '_' or '-', or leave it out")
    return given


#: commands that ask the node's agent and wait for nothing else: when an agent
#: answers they run straight through on a blocking connection, with no event
#: loop (see tpnode_tui.node.http.straight), which is most of a command's start
STRAIGHT = frozenset({"status", "env", "queue", "cancel", "audit", "drain", "undrain", "stop", "extend",
                      "reclaim", "events"})


def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in STRAIGHT and settings.agent != "off":
        agent = AgentNode(settings.agent_socket, blocking=True)
        if straight(agent.answers()):
            return straight(_serve(agent, args, settings, None))
        straight(agent.close())
    import asyncio  # here, not at the top: a command run straight through never loads it

    return asyncio.run(_run_in_loop(args, settings))


async def _run_in_loop(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "agent":
        from .agent.serve import serve  # aiohttp's server: only the agent needs it

        return await serve(settings, interval=args.interval)
    node = await open_node(settings, interval=args.interval, max_wait_s=getattr(args, "wait", None),
                           on_wait=_say_once())
    return await _serve(node, args, settings, _state_dir_note(settings) if node.via == "local" else None)


async def _serve(node: Node, args: argparse.Namespace, settings: Settings, note: Optional[str]) -> int:
    """Run the command on ``node``; ``note``: the state dir's, for a node served here."""
    try:
        await _COMMANDS[args.command](_Run(node, args, note))
        if note and settings.state_dir.is_dir():
            # Said after the fact, and only on success: a refusal stays one line.
            _say(f"created the state dir {settings.state_dir}, which did not exist: everyone who "
                 "allocates on this node must use this same one (TUNEPLANE_STATE_DIR)")
        return EXIT_OK
    finally:
        await node.close()


@dataclass(frozen=True)
class _Run:
    """One command's node, arguments, and the state dir's note (local only)."""

    node: Node
    args: argparse.Namespace
    note: Optional[str]


async def _status(run: _Run) -> None:
    node, args, note = run.node, run.args, run.note
    view = await node.status()
    assert view.snapshot is not None
    if args.json:
        data = snapshot_to_json(view.snapshot)
        data.update(via=node.via, you=asdict(view.you), state_dir_note=note)
        print(json.dumps(data, indent=2))
    else:
        print_status(view.snapshot, note=note and f"state: {note}", you=_you_line(view, node))


async def _launch(run: _Run) -> None:
    node, args = run.node, run.args
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and not args.image:
        raise UsageError("nothing to run: give the command after --, e.g. launch --cards 1 -- python train.py")
    if args.queue and node.via != "agent":
        raise UsageError("--queue needs the node's agent, which keeps the queue: no agent answers, "
                         "and this command exits when it is done")
    run_id = _run_id(args.run_id) or new_run_id()
    request = LaunchRequest(cards=args.cards, command=tuple(argv), image=args.image, run_id=run_id, queue=args.queue)
    result = await _bounded(node, node.launch(request), run_id, getattr(args, "wait", None))
    if result.queued is not None:
        q = result.queued
        if args.json:
            print(json.dumps({"queued": queued_to_json(q)}))
        else:
            print(f"queued {q.run_id}: it starts by itself once {cards_words(q.cards)} "
                  f"{'is' if q.cards == 1 else 'are'} free, after the launches queued before it "
                  f"(tpnode-tui queue shows them; tpnode-tui cancel {q.run_id} drops it)")
        return
    assert result.launched is not None
    _report_launch(result.launched, args.json, "launched")


async def _bounded(node: Node, work: Awaitable[T], run_id: str, wait_s: Optional[float]) -> T:
    """``work`` through the agent, saying once what it waits for and giving up
    after ``wait_s`` as a local launch does (exit 75); in-process, the lock
    itself bounds and reports the wait."""
    import asyncio

    if node.via != "agent":
        return await work
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_watch_wait(node, run_id))
    try:
        return await asyncio.wait_for(asyncio.shield(task), wait_s)
    except asyncio.TimeoutError:
        task.cancel()  # the agent drops a launch whose asker hung up while it waited
        raise LockWaitTimeout(f"{run_id} was not placed within {wait_s:g} s: the agent was still "
                              "waiting for the allocation lock; nothing was placed") from None
    finally:
        watcher.cancel()


async def _watch_wait(node: Node, run_id: str) -> None:
    """Say once what a launch through the agent waits for, if it waits at all."""
    import asyncio

    say = _say_once()
    while True:
        await asyncio.sleep(0.5)
        for q in await node.queued():
            if q.run_id == run_id and q.state == "waiting" and q.waiting_for:
                say(q.waiting_for)


async def _reserve(run: _Run) -> None:
    node, args = run.node, run.args
    run_id = _run_id(args.run_id) or new_run_id("rsv")
    request = ReserveRequest(cards=args.cards, duration_s=parse_duration(args.duration), run_id=run_id,
                             owner=args.owner or "")
    result = await _bounded(node, node.reserve(request), run_id, getattr(args, "wait", None))
    _report_launch(result, args.json, "reserved")


async def _extend(run: _Run) -> None:
    node, args = run.node, run.args
    job = await node.extend(args.run_id, parse_duration(args.duration))
    if args.json:
        print(json.dumps(job_to_json(job)))
        return
    until = time.strftime("%H:%M:%S", time.localtime(job.expires_at or 0))
    print(f"extended {job.key}: it holds {cards_words(job.gpus)} until {until} "
          f"({_time_left(job.expires_at, True, time.time())})")


async def _reclaim(run: _Run) -> None:
    node, args = run.node, run.args
    removed = await node.reclaim(args.run_id)
    for job in removed:
        code = "unknown" if job.exit_code is None else str(job.exit_code)
        print(f"removed {job.key} ({job.kind}, exit code {code})")
    if not removed:
        print("nothing to reclaim: no exited jobs this account may remove")


async def _stop(run: _Run) -> None:
    node, args = run.node, run.args
    job = await node.stop(args.run_id)
    print(f"stopped {job.key} ({cards_words(job.gpus)})")


async def _env(run: _Run) -> None:
    node, args = run.node, run.args
    view = await node.status()
    assert view.snapshot is not None
    for line in env_lines(view.snapshot, args.run_id):
        print(line)


async def _queue(run: _Run) -> None:
    node, args = run.node, run.args
    queue = await node.queued()
    if args.json:
        print(json.dumps({"queue": [queued_to_json(q) for q in queue]}, indent=2))
    else:
        print_queue(queue)


async def _cancel(run: _Run) -> None:
    node, args = run.node, run.args
    q = await node.cancel(args.run_id)
    print(f"cancelled {q.run_id} (queued by {q.owner or 'an unknown account'}); nothing was placed")


async def _audit(run: _Run) -> None:
    node, args = run.node, run.args
    since = parse_duration(args.since) if args.since else None
    entries, everyone = await node.audit(since)
    if args.json:
        print(json.dumps({"entries": entries, "all": everyone}, indent=2))
        return
    if not everyone:
        print("your own actions (an operator sees everyone's):")
    print_audit(entries)


async def _drain(run: _Run) -> None:
    node, args = run.node, run.args
    for card in args.cards:
        drain = await node.drain(card, args.reason)
        if args.json:
            print(json.dumps(asdict(drain)))
        else:
            print(f"drained card {drain.card}: {drain.reason} (by {drain.by}); it is handed out to no job "
                  f"until an operator undrains it (tpnode-tui undrain {drain.card})")


async def _undrain(run: _Run) -> None:
    node, args = run.node, run.args
    for card in args.cards:
        drain = await node.undrain(card)
        if args.json:
            print(json.dumps(asdict(drain)))
        else:
            print(f"card {drain.card} is back in service (it was drained: {drain.reason})")


def print_evicted(report: EvictReport, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    shown = printable_view(report)
    if not shown.processes:
        print(f"nothing to evict on card {shown.card}: no process from outside the platform is there", file=out)
        return
    for p in shown.processes:
        memory = "" if p.used_memory_mib is None else f", {format_mib(p.used_memory_mib)}"
        print(f"card {p.card}: pid {p.pid} ({p.user or 'unknown user'}, {p.belongs}{memory}) "
              f"{p.command or 'command not readable'}: {p.fate}", file=out)


async def _evict(run: _Run) -> None:
    node, args = run.node, run.args
    if len(args.card) != 1:
        raise UsageError("evict acts on one card at a time; name it alone")
    card, pid = args.card[0], args.pid
    refused: list[TpnodeError] = []
    if args.yes:
        report = await node.evict(card, pid, kill=args.kill)
    else:
        plan = await node.evict(card, pid, dry_run=True)
        print_evicted(plan)
        if not plan.processes:
            return
        if not _ask(f"send SIGTERM to {len(plan.processes)} process(es) on card {card}?"):
            print("nothing was signalled")
            return
        report, refused = await _evict_each(node, plan, kill=args.kill)
    if args.json:
        print(json.dumps(asdict(report)))
    elif report.processes or not refused:
        print_evicted(report)
    left = [p for p in report.processes if p.outcome == "running"]
    if left and not args.kill and not args.yes and not args.json and _ask(
            f"{len(left)} process(es) did not end on SIGTERM within {report.grace_s:g} s: SIGKILL them?"):
        killed, more = await _evict_each(node, replace(report, processes=tuple(left)), kill=True)
        print_evicted(killed)
        refused += more
    for e in refused[:-1]:
        _say(str(e))
    if refused:
        raise refused[-1]


async def _evict_each(node: Node, listed: EvictReport, *, kill: bool) -> tuple[EvictReport, list[TpnodeError]]:
    """Exactly the processes a question listed, each by pid and start time, all
    at once (one grace period): a process that came since is not signalled, nor
    one whose pid changed hands; the node's refusals come back to be said."""
    import asyncio

    answers = await asyncio.gather(*(node.evict(listed.card, p.pid, kill=kill, started_at=p.started_at)
                                     for p in listed.processes), return_exceptions=True)
    done: list[Evicted] = []
    refused: list[TpnodeError] = []
    for answer in answers:
        if isinstance(answer, TpnodeError):
            refused.append(answer)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            done += answer.processes
    return replace(listed, dry_run=False, kill=kill, processes=tuple(done)), refused


def _ask(question: str) -> bool:
    """A yes/no question on the terminal; without one, asking is a usage error."""
    if not sys.stdin.isatty():
        raise UsageError("evict asks before it signals anything: give --yes to do it without asking")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _event_line(entry: dict[str, Any], now: float) -> str:
    shown = printable_view(entry)
    cards = shown.get("cards")
    where = f"  {cards_words(cards)}" if isinstance(cards, list) and cards else ""
    who = f"  {shown['user']}" if shown.get("user") else ""
    return (f"{clock_time(float(shown.get('time', 0)), now)}  {shown.get('kind', '?')}{where}{who}: "
            f"{shown.get('message', '')}")


async def _events(run: _Run) -> None:
    node, args = run.node, run.args
    since = parse_duration(args.since) if args.since else None
    card = None if args.card is None else args.card[0]

    def show(entry: dict[str, Any]) -> None:
        print(json.dumps(entry) if args.json else _event_line(entry, time.time()), flush=True)

    if not args.follow:
        for entry in await node.events(since, card):
            show(entry)
        return
    async for entry in node.follow_events(card, since):  # until Ctrl-C
        show(entry)


_COMMANDS: dict[str, Callable[[_Run], Awaitable[None]]] = {
    "status": _status, "launch": _launch, "reserve": _reserve, "extend": _extend,
    "reclaim": _reclaim, "stop": _stop, "env": _env, "queue": _queue, "cancel": _cancel,
    "audit": _audit, "drain": _drain, "undrain": _undrain, "evict": _evict, "events": _events,
}


def _fleet(settings: Settings, *, as_json: bool, interval: float) -> int:
    """``tpnode-tui fleet``: once as JSON, or live in the fleet view. redis-py and
    the view are imported only here, when asked for."""
    import asyncio

    if settings.fleet_url is None:
        raise UsageError("tpnode-tui fleet reads what the nodes' agents publish: set "
                         "TUNEPLANE_FLEET_URL to their Redis (redis://host:port/db)")
    safe = settings.fleet_url_safe or ""
    if as_json:
        from .fleet.reader import read_once
        from .fleet.record import fleet_json

        print(json.dumps(fleet_json(asyncio.run(read_once(settings.fleet_url, safe))), indent=2))
        return EXIT_OK
    from .tui.fleet import run_fleet_view

    return run_fleet_view(settings.fleet_url, safe, interval)


def _fail(message: str, code: int) -> int:
    _say(message)
    return code


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last
    flush into a closed pipe does not print an error of its own."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Everything the commands print, errors and log lines included, reaches
    # the terminal escaped: much of it was written by other users (process
    # names, labels, owners) or by Docker, Redis and the driver.
    with contextlib.redirect_stdout(PrintableStream(sys.stdout)), \
            contextlib.redirect_stderr(PrintableStream(sys.stderr)):
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not 0.2 <= args.interval <= 3600:
            raise UsageError(f"--interval {args.interval:g}: give seconds from 0.2 to 3600")
        logging.basicConfig(
            level=logging.INFO if args.verbose or args.command == "agent" else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if args.command is None:
            settings = None
            if not args.demo:
                settings = settings_from_flags(vars(args))
                state_dir_exists(settings.state_dir)  # a file there is refused before the screen opens
            from .tui import run_dashboard  # the only import of the UI, and only when asked for

            return run_dashboard(
                settings, demo=args.demo, readonly=args.readonly, interval=args.interval, verbose=args.verbose
            )
        settings = settings_from_flags(vars(args))
        if args.command == "fleet":
            return _fleet(settings, as_json=args.json, interval=args.interval)
        return _run_command(args, settings)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except TpnodeError as e:  # each kind has its exit code: 75 try later, 77 not allowed, ...
        return _fail(error_line(e), exit_code(e))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as e:  # a bug of ours: still one line, with the detail in the log
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return _fail(f"unexpected error ({type(e).__name__}: {e}); run with -v for details", EXIT_FAIL)


if __name__ == "__main__":
    sys.exit(main())
