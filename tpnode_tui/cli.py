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
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Optional, Sequence, TextIO

from . import __version__
from .allocator import GpuAllocator, Launched, default_owner, new_run_id
from .config import (
    ConfigError,
    Settings,
    decimal_number,
    parse_duration,
    settings_from_flags,
    state_dir_exists,
    whole_number,
)
from .locks import make_lock
from .model import BadRequest, JobSpec, LockWaitTimeout, NoCapacity, NodeSnapshot, TpnodeError
from .printable import PrintableStream, printable, printable_view
from .render import card_summary, cards_words, format_duration, format_mib
from .runtimes import choose_runtime

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TEMPFAIL = 0, 1, 2, 75
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
    return parser


# -- output -------------------------------------------------------------------


def snapshot_json(snap: NodeSnapshot) -> dict[str, Any]:
    occ = snap.occupancy
    return {
        "host": snap.host,
        "series": snap.series,
        "probe": snap.probe.source,
        "probe_problem": snap.probe.problem,
        "runtime": snap.runtime,
        "lock": snap.lock,
        "lock_state": snap.lock_state,
        "total": occ.total,
        "free": occ.free,
        "by_job": {str(k): v for k, v in sorted(occ.by_job.items())},
        "external": sorted(occ.external),
        "unhealthy": {str(k): v for k, v in sorted(occ.unhealthy.items())},
        "external_probe_ok": occ.external_probe_ok,
        "explain": snap.explain,
        "cards": [
            {
                "index": c.index,
                "state": c.state,
                "run_id": c.run_id,
                "holders": [asdict(h) for h in c.holders],
                "reason": c.reason,
                "warning": c.warning,
                "name": c.facts.name if c.facts else None,
                "memory_used_mib": c.facts.memory_used_mib if c.facts else None,
                "memory_total_mib": c.facts.memory_total_mib if c.facts else None,
                "utilization_pct": c.facts.utilization_pct if c.facts else None,
                "temperature_c": c.facts.temperature_c if c.facts else None,
                "power_w": c.facts.power_w if c.facts else None,
            }
            for c in snap.cards
        ],
        "jobs": [
            {
                "run_id": j.run_id,
                "name": j.name,
                "status": j.status,
                "gpus": list(j.gpus),
                "kind": j.kind,
                "owner": j.owner,
                "image": j.image,
                "command": list(j.command),
                "started_at": j.started_at,
                "expires_at": j.expires_at,
                "exit_code": j.exit_code,
                "problems": list(j.problems),
            }
            for j in snap.jobs
        ],
    }


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


def print_status(snap: NodeSnapshot, out: Optional[TextIO] = None, note: Optional[str] = None) -> None:
    out = out or sys.stdout
    snap = printable_view(snap)  # every field on its one line of the table
    occ = snap.occupancy
    model = snap.probe.model_name or "unknown cards"
    print(f"{snap.host} · {model} · probe {snap.probe.source} · {snap.runtime} · lock {snap.lock}", file=out)
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


def _launched_json(result: Launched) -> str:
    return json.dumps({
        "run_id": result.job.run_id,
        "name": result.job.name,
        "gpus": list(result.gpus),
        "existing": result.existing,
        "expires_at": result.job.expires_at,
        "warning": result.warning,
    })


def _report_launch(result: Launched, as_json: bool, what: str) -> None:
    if as_json:
        print(_launched_json(result))
    elif result.existing:
        print(f"{result.job.run_id} already holds {cards_words(result.gpus)}; nothing new started")
    else:
        print(f"{what} {result.job.run_id} on {cards_words(result.gpus)}")
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)


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


async def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    note = _state_dir_note(settings)
    lock = make_lock(settings, max_wait_s=getattr(args, "wait", None), on_wait=_say_once())
    allocator = GpuAllocator.from_settings(settings, lock=lock)
    try:
        if args.command == "status":
            snap = await allocator.snapshot()
            if args.json:
                data = snapshot_json(snap)
                data["state_dir_note"] = note
                print(json.dumps(data, indent=2))
            else:
                print_status(snap, note=note and f"state: {note}")
        elif args.command == "launch":
            argv = list(args.argv)
            if argv and argv[0] == "--":
                argv = argv[1:]
            if not argv and not args.image:
                raise UsageError("nothing to run: give the command after --, e.g. launch --cards 1 -- python train.py")
            run_id = _run_id(args.run_id)
            spec = JobSpec(
                run_id=new_run_id() if run_id is None else run_id,
                cards=args.cards,
                command=tuple(argv),
                image=args.image,
                owner=default_owner(),
            )
            _report_launch(await allocator.launch(spec), args.json, "launched")
        elif args.command == "reserve":
            result = await allocator.reserve(
                args.cards, parse_duration(args.duration), args.owner or "", _run_id(args.run_id)
            )
            _report_launch(result, args.json, "reserved")
        elif args.command == "reclaim":
            removed = await allocator.reclaim(args.run_id)
            for job in removed:
                code = "unknown" if job.exit_code is None else str(job.exit_code)
                print(f"removed {job.key} ({job.kind}, exit code {code})")
            if not removed:
                print("nothing to reclaim: no exited jobs")
        elif args.command == "stop":
            job = await allocator.stop(args.run_id)
            print(f"stopped {job.key} ({cards_words(job.gpus)})")
        if note and settings.state_dir.is_dir():
            # Said after the fact, and only on success: a refusal stays one line.
            _say(f"created the state dir {settings.state_dir}, which did not exist: everyone who "
                 "allocates on this node must use this same one (TUNEPLANE_STATE_DIR)")
        return EXIT_OK
    finally:
        await allocator.close()


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
            level=logging.INFO if args.verbose else logging.WARNING,
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
        return asyncio.run(_run_command(args, settings))
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except (UsageError, ConfigError, BadRequest) as e:
        return _fail(str(e), EXIT_USAGE)
    except NoCapacity as e:
        return _fail(f"no capacity now: {e}; not waiting for cards: try again later", EXIT_TEMPFAIL)
    except LockWaitTimeout as e:
        return _fail(str(e), EXIT_TEMPFAIL)
    except TpnodeError as e:  # NeverFits, Conflict, RuntimeUnavailable, JobNotFound, ...
        return _fail(str(e), EXIT_FAIL)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as e:  # a bug of ours: still one line, with the detail in the log
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return _fail(f"unexpected error ({type(e).__name__}: {e}); run with -v for details", EXIT_FAIL)


if __name__ == "__main__":
    sys.exit(main())
