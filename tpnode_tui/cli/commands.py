"""The headless commands, each with its arguments beside it.

A command never waits for cards: with none free it exits 75 at once and a
script decides whether to try again (the dashboard queues instead). One that
has to wait for the allocation lock says once, on stderr, what it waits for.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable
from dataclasses import asdict, replace
from typing import Any, Optional, Sequence, TypeVar

from tpnode_tui.cli.become import SHELL_MARKER, become, given_command, login_shell, marked_shell
from tpnode_tui.cli.output import (
    event_line,
    held_until,
    print_audit,
    print_check,
    print_evicted,
    print_notify,
    print_queue,
    print_status,
    removed_line,
    report_launch,
    shell_line,
    you_line,
)
from tpnode_tui.cli.registry import (
    Run,
    UsageError,
    card_list,
    cards,
    command,
    descriptor,
    duration,
    node_command,
    process_id,
    say,
    say_once,
    seconds,
    unix_time,
)
from tpnode_tui.config.defaults import DEFAULT_AGENT_SOCKET
from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import BadRequest, Conflict, LockWaitTimeout, TpnodeError
from tpnode_tui.model.topology import CONTIGUOUS, SAME_SWITCH
from tpnode_tui.model.views import Evicted, EvictReport
from tpnode_tui.port import operations as ops
from tpnode_tui.port.node import Node
from tpnode_tui.port.types.events import AuditRequest, EventsRequest
from tpnode_tui.port.types.jobs import LaunchRequest, new_run_id
from tpnode_tui.port.types.reservations import ReserveRequest, ShellRequest
from tpnode_tui.port.wire.jobs import job_to_json, queued_to_json
from tpnode_tui.port.wire.snapshot import snapshot_to_json
from tpnode_tui.text.refusals import ON_THE_NODE
from tpnode_tui.text.render import cards_words, env_lines

T = TypeVar("T")

WAIT_HELP = (
    "at most this long for the allocation lock (default: as long as it takes); "
    "then exit 75. Cards are never waited for: with none free, exit 75 at once"
)


def _run_id(given: Optional[str]) -> Optional[str]:
    """An explicit --run-id is taken as given, so an empty one is refused rather
    than silently replaced by a generated one."""
    if given is not None and not given.strip():
        raise BadRequest("--run-id is empty: give 1 to 63 letters, digits, '.', '_' or '-', or leave it out")
    return given


def _placement_flags(parser: argparse.ArgumentParser) -> None:
    """How the cards must sit on the node's topology; without either, the best set free now."""
    placed = parser.add_mutually_exclusive_group()
    placed.add_argument(
        "--same-switch",
        dest="placement",
        action="store_const",
        const=SAME_SWITCH,
        help="only cards that all share NVLink or one PCIe switch (none free now: exit 75, or --queue waits)",
    )
    placed.add_argument(
        "--contiguous",
        dest="placement",
        action="store_const",
        const=CONTIGUOUS,
        help="only a set as well connected as this node's best of that size (none free now: exit 75, or --queue waits)",
    )


def _json_flag(parser: argparse.ArgumentParser, help: Optional[str] = None) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    _json_flag(parser, "machine-readable")


@node_command("status", "occupancy, cards and jobs now", _status_arguments, straight=True)
async def _status(run: Run) -> None:
    node, args, note = run.node, run.args, run.note
    view = await node.status()
    assert view.snapshot is not None
    if args.json:
        data = snapshot_to_json(view.snapshot)
        data.update(via="local" if node.in_process else "agent", you=asdict(view.you), state_dir_note=note)
        print(json.dumps(data, indent=2))
    else:
        print_status(view.snapshot, note=note and f"state: {note}", you=you_line(view, node))


def _what_arguments(parser: argparse.ArgumentParser) -> None:
    """Whole cards, or one MIG slice of a profile: what a launch or a reservation holds.
    One or the other: a --cards beside --slice is refused, never dropped."""
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--cards", type=cards, metavar="N", help="whole cards (never a card in MIG mode)")
    what.add_argument(
        "--slice", metavar="PROFILE", help="one MIG slice of this profile instead of whole cards, e.g. 1g.18gb"
    )


def _what(args: argparse.Namespace) -> int:
    """The card count asked for, checked against --slice: one of them, and a slice is one device."""
    if args.slice is not None:
        if args.placement is not None:
            raise UsageError(f"--slice {args.slice} is one MIG device: it has no --{args.placement} to ask for")
        return 1
    if args.cards is None:
        raise UsageError("say what to hold: --cards N (whole cards) or --slice PROFILE (one MIG slice)")
    return int(args.cards)


def _launch_arguments(parser: argparse.ArgumentParser) -> None:
    _what_arguments(parser)
    parser.add_argument("--run-id", metavar="ID", help="default: a generated one")
    parser.add_argument("--image", metavar="IMG", help="container image (docker runtime)")
    parser.add_argument("--wait", type=seconds, metavar="SECONDS", help=WAIT_HELP)
    parser.add_argument(
        "--queue", action="store_true", help="with no capacity now, wait in the agent's queue instead of exit 75"
    )
    _placement_flags(parser)
    _json_flag(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG...]")


@node_command("launch", "place and start a job on free cards", _launch_arguments)
async def _launch(run: Run) -> None:
    node, args = run.node, run.args
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and not args.image:
        raise UsageError("nothing to run: give the command after --, e.g. launch --cards 1 -- python train.py")
    if args.queue and not node.outlives_client:
        raise UsageError(
            "--queue needs the node's agent, which keeps the queue; this command serves the "
            "node itself (no agent answers, or TUNEPLANE_AGENT=off) and exits when it is done"
        )
    run_id = _run_id(args.run_id) or new_run_id()
    request = LaunchRequest(
        cards=_what(args),
        command=tuple(argv),
        image=args.image,
        run_id=run_id,
        queue=args.queue,
        placement=args.placement,
        slice=args.slice,
    )
    result = await _bounded(node, node.launch(request), run_id, args.wait)
    if result.queued is not None:
        q = result.queued
        wanted = q.wants
        if args.json:
            print(json.dumps({"queued": queued_to_json(q)}))
        else:
            print(
                f"queued {q.run_id}: it starts by itself once {wanted} "
                f"{'is' if q.cards == 1 else 'are'} free, after the launches queued before it "
                f"(tpnode-tui queue shows them; tpnode-tui cancel {q.run_id} drops it)"
            )
        return
    assert result.launched is not None
    report_launch(result.launched, args.json, "launched")


async def _bounded(node: Node, work: Awaitable[T], run_id: str, wait_s: Optional[float]) -> T:
    """``work`` through the agent, saying once what it waits for and giving up
    after ``wait_s`` as a local launch does (exit 75), naming what it waited
    for (whose allocation held the lock); in-process, the lock itself bounds
    and reports the wait.

    Giving up is asked of the agent (a cancel) and its answer believed: a
    launch that took the lock meanwhile is placing its job and will run, so it
    is waited for and reported as placed, never said to be "nothing placed"."""
    import asyncio

    if node.in_process:
        return await work
    task = asyncio.ensure_future(work)
    heard: list[str] = []
    watcher = asyncio.ensure_future(_watch_wait(node, run_id, heard))
    try:
        return await asyncio.wait_for(asyncio.shield(task), wait_s)
    except asyncio.TimeoutError:
        watcher.cancel()
        if not heard:  # it gave up before the first look: one more
            with contextlib.suppress(TpnodeError):
                heard += [q.waiting_for for q in await node.queued() if q.run_id == run_id and q.waiting_for]
        try:
            await node.cancel(run_id)
        except TpnodeError:  # placed meanwhile, or placing now: too late, so it runs
            return await task
        task.cancel()
        why = heard[-1] if heard else "waiting for the allocation lock"
        raise LockWaitTimeout(
            f"{run_id} was not placed within {wait_s:g} s: the agent was still {why}; "
            "it was cancelled, and nothing was placed"
        ) from None
    finally:
        watcher.cancel()


async def _watch_wait(node: Node, run_id: str, heard: list[str]) -> None:
    """Say once what a launch through the agent waits for, if it waits at all,
    and keep the latest word of it in ``heard``."""
    import asyncio

    said = say_once()
    while True:
        await asyncio.sleep(0.5)
        for q in await node.queued():
            if q.run_id == run_id and q.state == "waiting" and q.waiting_for:
                said(q.waiting_for)
                heard.append(q.waiting_for)
                del heard[:-1]


def _reserve_arguments(parser: argparse.ArgumentParser) -> None:
    _what_arguments(parser)
    parser.add_argument(
        "--for", dest="duration", type=duration, required=True, metavar="DURATION", help="with its unit: 30m, 2h, 1d"
    )
    parser.add_argument("--owner", metavar="NAME", help="default: the current user")
    parser.add_argument("--run-id", metavar="ID", help="default: a generated one")
    parser.add_argument("--wait", type=seconds, metavar="SECONDS", help=WAIT_HELP)
    _placement_flags(parser)
    _json_flag(parser)


@node_command("reserve", "hold cards for a person until a time", _reserve_arguments)
async def _reserve(run: Run) -> None:
    node, args = run.node, run.args
    run_id = _run_id(args.run_id) or new_run_id("rsv")
    request = ReserveRequest(
        cards=_what(args),
        duration_s=args.duration,
        run_id=run_id,
        owner=args.owner or "",
        placement=args.placement,
        slice=args.slice,
    )
    result = await _bounded(node, node.reserve(request), run_id, args.wait)
    report_launch(result, args.json, "reserved")


def _run_id_argument(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    parser.add_argument("run_id", nargs="?" if optional else None, metavar="RUN_ID")


@node_command(
    "reclaim",
    "remove exited jobs (never a running one)",
    lambda parser: _run_id_argument(parser, optional=True),
    straight=True,
)
async def _reclaim(run: Run) -> None:
    removed = await run.node.reclaim(run.args.run_id)
    for job in removed:
        print(removed_line(job))
    if not removed:
        print("nothing to reclaim: no exited jobs this account may remove")


@node_command("stop", "stop a running job or reservation", _run_id_argument, straight=True)
async def _stop(run: Run) -> None:
    job = await run.node.stop(run.args.run_id)
    print(f"stopped {job.key} ({job.holding})")


def _extend_arguments(parser: argparse.ArgumentParser) -> None:
    _run_id_argument(parser)
    parser.add_argument(
        "--for", dest="duration", type=duration, required=True, metavar="DURATION", help="how much longer: 30m, 2h"
    )
    _json_flag(parser)


@node_command("extend", "hold a reservation longer (its owner or an operator)", _extend_arguments, straight=True)
async def _extend(run: Run) -> None:
    node, args = run.node, run.args
    job = await node.extend(args.run_id, args.duration)
    if args.json:
        print(json.dumps(job_to_json(job)))
        return
    print(f"extended {job.key}: it holds {job.holding} {held_until(job, time.time())}")


@node_command(
    "env", 'exports that point CUDA at a job\'s cards: eval "$(tpnode-tui env ID)"', _run_id_argument, straight=True
)
async def _env(run: Run) -> None:
    view = await run.node.status()
    assert view.snapshot is not None
    for line in env_lines(view.snapshot, run.args.run_id):
        print(line)


def _shell_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run your login shell, or COMMAND, on the cards of reservation RUN_ID (yours; an operator's any), "
        "fenced to them: the node moves this very process into the reservation's cgroup, where only its "
        "cards' device files open, and everything started from there stays in it. CUDA numbers the cards "
        "from 0 inside (CUDA_VISIBLE_DEVICES=0,1 for the node's cards 2 and 3). The shell opens with one line "
        "saying so, its prompt starts with (RUN_ID), and TPNODE_SHELL=RUN_ID is set for it or COMMAND. "
        "While anything runs there the "
        "reservation is in use; when it ends (stopped, expired, released) what still runs there is ended. "
        "TUNEPLANE_FENCE=required refuses a shell that cannot be fenced (exit 2); auto runs it unfenced and "
        "says so, and where no cgroup at all can be made (an ordinary account without the agent) it runs "
        "outside the reservation: not fenced, not ended with it, not counted as its use, and says that. "
        "Run it on the node itself: through --host the agent's caller is the SSH bridge, not you."
    )
    # the dashboard's shell key: a pipe it waits on, told once the node took this process in
    parser.add_argument("--started-fd", type=descriptor, help=argparse.SUPPRESS)
    _run_id_argument(parser)
    parser.add_argument(
        "argv",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="run this instead of your login shell (after --)",
    )


def _this_shell(run_id: str) -> ShellRequest:
    """The request to move this very process into ``run_id``'s fence, with what it
    sees of itself for the node to compare with the kernel's peer."""
    from tpnode_tui.runtimes.jobprocs import process_stat  # only a shell reads /proc; every other command is lighter

    seen = process_stat(os.getpid())
    return ShellRequest(run_id, os.getpid(), seen.ticks if seen else 0)


@node_command(
    "shell",
    "your shell (or -- COMMAND) on a reservation's cards, fenced to them (its owner or an operator)",
    _shell_arguments,
    straight=True,
)
async def _shell(run: Run) -> None:
    """Ask the node to move this very process into the reservation's fence, then
    become the shell or command there: everything it starts stays fenced."""
    if not run.node.on_this_machine:
        raise Conflict(ON_THE_NODE)
    command = given_command(run.args.argv)
    entry = await run.node.call(ops.SHELL, _this_shell(run.args.run_id))
    if not entry.cgroup:
        # nothing to move it into: the node cannot tell its processes from any others
        say(
            f"the shell on {entry.run_id} runs outside the reservation: not fenced, not ended when the "
            f"reservation ends, not counted as its use (no cgroup could be made: {entry.device_fence.problem})"
        )
    elif not entry.device_fence.fenced:
        say(f"the shell on {entry.run_id} runs without a fence: {entry.device_fence.problem}")
    env = dict(os.environ) | dict(entry.env) | {SHELL_MARKER: entry.run_id}
    if command:
        become(command, env, run.args.started_fd)
    argv, env = marked_shell(login_shell(), entry.run_id, env)
    say(shell_line(entry))  # as salloc says what it granted: a bare prompt would look like nothing happened
    become(argv, env, run.args.started_fd)


@node_command("queue", "launches queued or waiting for the lock", _json_flag, straight=True)
async def _queue(run: Run) -> None:
    queue = await run.node.queued()
    if run.args.json:
        print(json.dumps({"queue": [queued_to_json(q) for q in queue]}, indent=2))
    else:
        print_queue(queue)


@node_command("cancel", "drop a queued launch (its owner or an operator)", _run_id_argument, straight=True)
async def _cancel(run: Run) -> None:
    q = await run.node.cancel(run.args.run_id)
    print(f"cancelled {q.run_id} (queued by {q.owner or 'an unknown account'}); nothing was placed")


def _logs_arguments(parser: argparse.ArgumentParser) -> None:
    _run_id_argument(parser)
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing what it writes, until it ends")


@node_command("logs", "a job's output (its owner or an operator); -f follows it", _logs_arguments, straight=True)
async def _logs(run: Run) -> None:
    """What the job wrote to its standard output and error, a page at a time as the
    node bounds it; printed through this command's printable stream, so what a
    terminal would obey in it is shown escaped."""
    node, args = run.node, run.args
    if args.follow:
        async for page in node.follow_logs(args.run_id):
            print(page.text, end="", flush=True)
            if page.ended and not page.more:
                return
    after: Optional[str] = None
    while True:  # a page at a time, each as the node bounds it
        page = await node.logs(args.run_id, after)
        print(page.text, end="", flush=True)
        if not page.more:
            return
        after = page.after


def _before_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--before", type=unix_time, metavar="TIME", help="only entries before TIME (unix seconds): the next older page"
    )


def _older(command: str, entries: Sequence[dict[str, Any]], more: bool) -> None:
    """Say, on stderr, that the node's answer left older entries out, and how to ask for them."""
    if more and entries:
        say(f"older entries were left out: tpnode-tui {command} --before {float(entries[0]['time']):.6f}")


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=duration, metavar="DURATION", help="only the last DURATION, e.g. 1h")
    _before_argument(parser)
    _json_flag(parser)


@node_command("audit", "who asked the node for what (operators see everyone's)", _audit_arguments, straight=True)
async def _audit(run: Run) -> None:
    args = run.args
    page = await run.node.audit_page(AuditRequest(since_s=args.since, before=args.before))
    entries, everyone = list(page.entries), page.everyone
    if args.json:
        print(json.dumps({"entries": entries, "all": everyone, "more": page.more}, indent=2))
        return
    if not everyone:
        print("your own actions (an operator sees everyone's):")
    print_audit(entries)
    _older("audit", entries, page.more)


def _usage_arguments(parser: argparse.ArgumentParser) -> None:
    from tpnode_tui.model.usage import USAGE_BY

    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="from a date or time (2026-12-01, '2026-12-01 14:00', local) or that long ago (7d, 12h); "
        "default: a week before --until",
    )
    parser.add_argument("--until", metavar="WHEN", help="up to a date or time, or that long ago; default: now")
    parser.add_argument(
        "--by", choices=USAGE_BY, default="user", help="a row per account (default), per card, or per job"
    )
    _json_flag(parser)


@node_command(
    "usage",
    "who used which cards: card-hours held, used and idle (your own and the node's; operators: everyone's)",
    _usage_arguments,
    straight=True,
)
async def _usage(run: Run) -> None:
    """The span is read here, in this machine's local time: the node is asked for
    two times, never for words. Served in-process, the node refuses (exit 1): only
    its agent keeps the ledger."""
    from tpnode_tui.config.values import usage_span
    from tpnode_tui.port.types.readings import UsageRequest
    from tpnode_tui.text.usage import usage_lines

    args = run.args
    since, until = usage_span(args.since, args.until, time.time())
    if args.json:  # handed on as the agent wrote it, as status --json is
        print(json.dumps(await run.node.document(ops.USAGE, UsageRequest(since, until, args.by)), indent=2))
        return
    report = await run.node.usage(since, until, args.by)
    for line in usage_lines(report):
        print(line)


def _notify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Where the node's agent tells you what concerns you: a reservation about to end (with the extend command "
        "to type), a queued launch placed, a job ended, an idle reservation warned and released, a card of yours "
        "drained or back in service, an intruder on your cards. It writes to your own terminals where you allow "
        "messages (mesg y), and sends to the URLs you add here through Apprise (ntfy://, mailto://, slack://, "
        "json:// and the rest), as you. docs/notifications.md lists what is said, and to whom."
    )
    what = parser.add_subparsers(dest="notify", metavar="add|list|remove", required=True, parser_class=type(parser))
    add = what.add_parser(
        "add",
        help="be told at a URL (Apprise's form)",
        description=(
            "Be told at URL, through Apprise. Every account on this node can read a command's line while it runs "
            "(ps): a URL with a password or a token in it is given on standard input instead, with URL left out."
        ),
    )
    add.add_argument("url", metavar="URL", nargs="?", help="left out or -: read from standard input (not shown)")
    add.add_argument("--node", action="store_true", help="an operator's URL for the node's events instead of your own")
    what.add_parser("list", help="your URLs, secrets masked", description="Your URLs, numbered, secrets masked.")
    remove = what.add_parser("remove", help="stop being told at URL number N", description="Forget your URL N.")
    remove.add_argument("number", type=_url_number, metavar="N")
    for sub in what.choices.values():
        _json_flag(sub)


def _url_from_input() -> str:
    """A URL from standard input, where no other account can read it (a command's line
    they can): typed without being shown, or the first line of what is piped in."""
    import getpass

    from tpnode_tui.port.types.notify import URL_MOST

    try:
        url = getpass.getpass("URL (not shown): ") if sys.stdin.isatty() else sys.stdin.readline(URL_MOST + 2)
    except EOFError:
        url = ""
    if not url.strip():
        raise UsageError("give the URL to be told at on standard input, or after notify add")
    return url.strip()


def _url_number(text: str) -> int:
    from tpnode_tui.config.values import whole_number

    value = whole_number(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL's number as notify list gives it (1, 2, ...)")
    return value


@node_command(
    "notify", "where you are told what concerns you: your terminals, your URLs", _notify_arguments, straight=True
)
async def _notify(run: Run) -> None:
    node, args = run.node, run.args
    if args.notify == "add":
        url = args.url if args.url not in (None, "-") else _url_from_input()
        listed = await node.notify_add(url, node=args.node)
    elif args.notify == "remove":
        listed = await node.notify_remove(args.number)
    else:
        listed = await node.notify_list()
    if args.json:
        print(json.dumps(asdict(listed), indent=2))
        return
    print_notify(listed)


def _drain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cards", type=card_list, metavar="CARD[,CARD...]")
    parser.add_argument("--reason", required=True, metavar="TEXT", help="why, in words the next person understands")
    _json_flag(parser)


@node_command("drain", "take cards out of service (operators)", _drain_arguments, straight=True)
async def _drain(run: Run) -> None:
    args = run.args
    for card in args.cards:
        drain = await run.node.drain(card, args.reason)
        if args.json:
            print(json.dumps(asdict(drain)))
        else:
            print(
                f"drained card {drain.card}: {drain.reason} (by {drain.by}); it is handed out to no job "
                f"until an operator undrains it (tpnode-tui undrain {drain.card})"
            )


def _undrain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cards", type=card_list, metavar="CARD[,CARD...]")
    parser.add_argument(
        "--force",
        action="store_true",
        help="even a card drained until the node reboots, before a reboot and a check passed since",
    )
    _json_flag(parser)


@node_command("undrain", "put drained cards back in service (operators)", _undrain_arguments, straight=True)
async def _undrain(run: Run) -> None:
    args = run.args
    for card in args.cards:
        drain = await run.node.undrain(card, force=args.force)
        if args.json:
            print(json.dumps(asdict(drain)))
        else:
            print(f"card {drain.card} is back in service (it was drained: {drain.reason})")


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cards", type=card_list, metavar="CARD[,CARD...]")
    _json_flag(parser, "one JSON object per card")


@node_command("check", "check cards before they go back into service (operators)", _check_arguments, straight=True)
async def _check(run: Run) -> None:
    """One card after the other (a card's own test may take minutes, and two at
    once on one node may disturb each other); exit 1 when any did not pass."""
    from tpnode_tui.port.wire.checks import check_to_json

    args = run.args
    not_passed = []
    for card in args.cards:
        check = await run.node.check(card)
        if args.json:
            print(json.dumps(check_to_json(check)), flush=True)
        else:
            print_check(check)
        if not check.passed:
            not_passed.append(card)
    if not_passed:
        raise TpnodeError(f"{cards_words(not_passed)} did not pass {'its' if len(not_passed) == 1 else 'their'} check")


def _evict_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("card", type=card_list, metavar="CARD")
    parser.add_argument("--pid", type=process_id, metavar="PID", help="only this process of the card's")
    parser.add_argument("--kill", action="store_true", help="SIGKILL what SIGTERM did not end within the grace")
    parser.add_argument("--yes", action="store_true", help="do not ask first (needed without a terminal)")
    _json_flag(parser)


@node_command("evict", "end what squats on a card from outside the platform (operators)", _evict_arguments)
async def _evict(run: Run) -> None:
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
        n = len(plan.processes)
        if not _ask(f"send SIGTERM to {n} process{'es' if n != 1 else ''} on card {card}?"):
            print("nothing was signalled")
            return
        report, refused = await _evict_each(node, plan, kill=args.kill)
    if args.json:
        print(json.dumps(asdict(report)))
    elif report.processes or not refused:
        print_evicted(report)
    left = [p for p in report.processes if p.outcome == "running"]
    if (
        left
        and not args.kill
        and not args.yes
        and not args.json
        and _ask(
            f"{len(left)} process{'es' if len(left) != 1 else ''} did not end on SIGTERM within "
            f"{report.grace_s:g} s: SIGKILL {'them' if len(left) != 1 else 'it'}?"
        )
    ):
        killed, more = await _evict_each(node, replace(report, processes=tuple(left)), kill=True)
        print_evicted(killed)
        refused += more
    for e in refused[:-1]:
        say(str(e))
    if refused:
        raise refused[-1]


async def _evict_each(node: Node, listed: EvictReport, *, kill: bool) -> tuple[EvictReport, list[TpnodeError]]:
    """Exactly the processes a question listed, each by pid and start time, all
    at once (one grace period): a process that came since is not signalled, nor
    one whose pid changed hands; the node's refusals come back to be said."""
    import asyncio

    answers = await asyncio.gather(
        *(node.evict(listed.card, p.pid, kill=kill, started_at=p.started_at) for p in listed.processes),
        return_exceptions=True,
    )
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


def _events_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=duration, metavar="DURATION", help="only the last DURATION, e.g. 1h")
    parser.add_argument("--card", type=card_list, metavar="CARD", help="only what concerns this card")
    parser.add_argument("--follow", action="store_true", help="keep printing new events as they happen")
    _before_argument(parser)
    _json_flag(parser, "one JSON object per line")


@node_command(
    "events", "what happened on the node: health, drains, intruders, launches, ...", _events_arguments, straight=True
)
async def _events(run: Run) -> None:
    node, args = run.node, run.args
    card = None if args.card is None else args.card[0]

    def show(entry: dict[str, Any]) -> None:
        print(json.dumps(entry) if args.json else event_line(entry, time.time()), flush=True)

    if not args.follow:
        page = await node.events_page(EventsRequest(since_s=args.since, card=card, before=args.before))
        for entry in page.entries:
            show(entry)
        _older("events", page.entries, page.more)
        return
    if args.before is not None:
        raise UsageError("--follow prints what happens from now on: it takes no --before")
    async for entry in node.follow_events(card, args.since):  # until Ctrl-C
        show(entry)


def _agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        f"Serve this node to every account on its Unix socket, {DEFAULT_AGENT_SOCKET} unless "
        "--agent-socket or TUNEPLANE_AGENT_SOCKET names another; what each account may do is decided "
        "by who it is. Run it as root, or let systemd run it from its unit. It serves until SIGTERM or "
        "Ctrl-C; the jobs it started keep running when it stops."
    )
    parser.add_argument(
        "--simulated",
        nargs="?",
        const=True,
        metavar="PATH",
        help="serve a simulated node described in PATH (the simulated probe's JSON) instead of the "
        "driver's cards, for a machine without a GPU; without PATH, the 4-card sample that ships with tpnode-tui",
    )


def _simulated(given: Any, settings: Settings) -> Settings:
    """The settings with the simulated node ``given`` as their probe: the sample
    where no path is given. A file that is not a node is refused here, in one
    line, rather than served as a blind node."""
    from pathlib import Path

    from tpnode_tui.probes.simulated import SAMPLE, xid_events

    path = SAMPLE if given is True else Path(given).absolute()
    try:
        xid_events(path)  # reads and checks the whole file
    except ValueError as e:
        raise UsageError(f"--simulated: {e}") from None
    return replace(settings, probe=replace(settings.probe, kind=f"simulated:{path}"))


@command("agent", "serve this node to every account on its socket (run as root, or by systemd)", _agent_arguments)
def _agent(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from tpnode_tui.agent.serve import serve  # aiohttp's server: only the agent needs it

    if args.simulated is not None:
        settings = _simulated(args.simulated, settings)
    return asyncio.run(serve(settings, interval=args.interval))


def _fleet_arguments(parser: argparse.ArgumentParser) -> None:
    _json_flag(parser, "one reading, machine-readable")


@command("fleet", "every node publishing to TUNEPLANE_FLEET_URL, read-only", _fleet_arguments)
def _fleet(args: argparse.Namespace, settings: Settings) -> int:
    """Once as JSON, or live in the fleet view. redis-py and the view are
    imported only here, when asked for."""
    if settings.fleet.url is None:
        raise UsageError(
            "tpnode-tui fleet reads what the nodes' agents publish: set "
            "TUNEPLANE_FLEET_URL to their Redis (redis://host:port/db)"
        )
    safe = settings.fleet.url_safe or ""
    if args.json:
        import asyncio

        from tpnode_tui.fleet.reader import read_once
        from tpnode_tui.fleet.record import fleet_json

        print(json.dumps(fleet_json(asyncio.run(read_once(settings.fleet.url, safe))), indent=2))
        return 0
    from tpnode_tui.tui import run_fleet_view

    return run_fleet_view(settings.fleet.url, safe, args.interval)


def _listen(text: str) -> tuple[str, int]:
    from tpnode_tui.config.readers import listen_address
    from tpnode_tui.model.errors import ConfigError

    try:
        return listen_address("--listen", text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _web_arguments(parser: argparse.ArgumentParser) -> None:
    from tpnode_tui.config.sections import DEFAULT_WEB_LISTEN

    host, port = DEFAULT_WEB_LISTEN
    parser.description = (
        "Serve a read-only page of this node for a browser, live: its cards in the dashboard's words, "
        "its banners, and who used which cards. It reads the node through its agent (one stream, however "
        "many pages are open), or shows the demo's simulated node (--demo), or every node of the fleet "
        f"(--fleet). It listens on {host}:{port} unless --listen or TUNEPLANE_WEB_LISTEN says otherwise; to "
        "show it to others, put a reverse proxy in front (docs/web.md), and TUNEPLANE_WEB_TOKEN asks every "
        "reader for a token. Other accounts' command lines are hidden unless TUNEPLANE_WEB_SHOW_COMMANDS is on. "
        "It runs as an ordinary account, never as root, and answers GET only."
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--demo", dest="web_demo", action="store_true", help="the demo's simulated 8-card node instead of this node"
    )
    shown.add_argument("--fleet", action="store_true", help="every node publishing to TUNEPLANE_FLEET_URL instead")
    parser.add_argument("--listen", type=_listen, metavar="HOST:PORT", help=f"where to listen (default {host}:{port})")


@command("web", "a read-only page of this node (or the demo, or the fleet) for a browser, live", _web_arguments)
def _web(args: argparse.Namespace, settings: Settings) -> int:
    """The page runs as an ordinary account: it only reads, through the node's agent (or
    the fleet's Redis), and a server reachable from a network has no business being root."""
    if os.geteuid() == 0:
        raise UsageError(
            "the web page runs as an ordinary account, never as root: start it as one "
            "(it reads the node through its agent, as every account may)"
        )
    from tpnode_tui.web import run_web  # aiohttp's server and the page: only the page needs them

    run_web(settings, demo=args.web_demo or args.demo, fleet=args.fleet, listen=args.listen, interval=args.interval)
    return 0


@command(
    "dial-stdio",
    "join standard input and output to this node's agent (what --host runs over SSH)",
    node_file_only=True,
)
def _dial_stdio(args: argparse.Namespace, settings: Settings) -> int:
    """The bridge at the node's end of an SSH connection. It runs as the
    account SSH logged in, so the agent names that account (SO_PEERCRED);
    it only moves bytes, and ends when either side does. sshd starts it in a
    non-login shell with the account's environment, which may say nothing of
    the node, something else, or something that is no setting at all: its
    settings are the node's file's alone (``node_file_only``), so the socket
    is the one the agent's unit was given, else the default."""
    from tpnode_tui.node.bridge import bridge

    return bridge(settings.agent.socket)
