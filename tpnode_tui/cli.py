"""The headless CLI: the same allocator and lock as the dashboard, for shells and scripts.

Exit codes are part of the interface, so scripts can tell "try later" from
"this is wrong": 0 done; 75 no capacity now (EX_TEMPFAIL: try again later);
1 any other failure, including a request that can never fit; 2 bad usage or
configuration. Errors are one line on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import sys
import time
from dataclasses import asdict
from typing import Optional, Sequence, TextIO

from . import __version__
from .allocator import GpuAllocator, Launched, default_owner, new_run_id
from .config import FLAGS, ConfigError, Settings, load_settings, parse_duration
from .model import BadRequest, JobSpec, NoCapacity, NodeSnapshot, TpnodeError
from .printable import PrintableStream, printable, printable_view
from .render import card_summary, cards_words, format_duration, format_mib

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TEMPFAIL = 0, 1, 2, 75

class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of exiting on its own."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def _cards(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cards") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} cards: a job needs at least 1")
    return value


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
    ui.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between polls (0.2 to 3600)")
    ui.add_argument("-v", "--verbose", action="store_true", help="log to stderr")

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    status = sub.add_parser("status", help="occupancy, cards and jobs now")
    status.add_argument("--json", action="store_true", help="machine-readable")

    launch = sub.add_parser("launch", help="place and start a job on free cards")
    launch.add_argument("--cards", type=_cards, required=True, metavar="N")
    launch.add_argument("--run-id", metavar="ID", help="default: a generated one")
    launch.add_argument("--image", metavar="IMG", help="container image (docker runtime)")
    launch.add_argument("--json", action="store_true")
    launch.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG...]")

    reserve = sub.add_parser("reserve", help="hold cards for a person until a time")
    reserve.add_argument("--cards", type=_cards, required=True, metavar="N")
    reserve.add_argument("--for", dest="duration", required=True, metavar="DURATION", help="e.g. 30m, 2h, 1d")
    reserve.add_argument("--owner", metavar="NAME", help="default: the current user")
    reserve.add_argument("--run-id", metavar="ID")
    reserve.add_argument("--json", action="store_true")

    reclaim = sub.add_parser("reclaim", help="remove exited jobs (never a running one)")
    reclaim.add_argument("run_id", nargs="?", metavar="RUN_ID")

    stop = sub.add_parser("stop", help="stop a running job or reservation")
    stop.add_argument("run_id", metavar="RUN_ID")

    sub.add_parser("agent", help="serve this node to every account on its socket (--interval S between polls)")
    fleet = sub.add_parser("fleet", help="every node publishing to TUNEPLANE_FLEET_URL, read-only")
    fleet.add_argument("--json", action="store_true", help="one reading, machine-readable")
    return parser


def settings_from(args: argparse.Namespace, environ=None) -> Settings:
    overrides = {setting: getattr(args, flag[2:].replace("-", "_")) for setting, flag in FLAGS.items()}
    return load_settings(environ, **overrides)


# -- output -------------------------------------------------------------------


def snapshot_json(snap: NodeSnapshot) -> dict:
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


def print_status(snap: NodeSnapshot, out: Optional[TextIO] = None) -> None:
    out = out or sys.stdout
    snap = printable_view(snap)  # every field on its one line of the table
    occ = snap.occupancy
    model = snap.probe.model_name or "unknown cards"
    print(f"{snap.host} · {model} · probe {snap.probe.source} · {snap.runtime} · lock {snap.lock}", file=out)
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
        print(f"{'RUN ID':<28}{'KIND':<13}{'STATUS':<14}{'CARDS':<10}{'AGE':>8}  OWNER", file=out)
        now = time.time()
        for job in snap.jobs:
            status = job.status if job.exit_code is None else f"{job.status} ({job.exit_code})"
            age = format_duration(now - job.started_at) if job.started_at else "-"
            cards = ",".join(map(str, job.gpus)) or "-"
            print(f"{job.run_id:<28}{job.kind:<13}{status:<14}{cards:<10}{age:>8}  {job.owner}", file=out)
            for problem in job.problems:
                print(f"{'':<28}! {problem}", file=out)


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


async def _run_command(args: argparse.Namespace, settings: Settings) -> int:
    allocator = GpuAllocator.from_settings(settings)
    try:
        if args.command == "status":
            snap = await allocator.snapshot()
            if args.json:
                print(json.dumps(snapshot_json(snap), indent=2))
            else:
                print_status(snap)
        elif args.command == "launch":
            argv = list(args.argv)
            if argv and argv[0] == "--":
                argv = argv[1:]
            if not argv and not args.image:
                raise UsageError("nothing to run: give the command after --, e.g. launch --cards 1 -- python train.py")
            spec = JobSpec(
                run_id=args.run_id or new_run_id(),
                cards=args.cards,
                command=tuple(argv),
                image=args.image,
                owner=default_owner(),
            )
            _report_launch(await allocator.launch(spec), args.json, "launched")
        elif args.command == "reserve":
            result = await allocator.reserve(
                args.cards, parse_duration(args.duration), args.owner or "", args.run_id
            )
            _report_launch(result, args.json, "reserved")
        elif args.command == "reclaim":
            removed = await allocator.reclaim(args.run_id)
            for job in removed:
                code = "unknown" if job.exit_code is None else str(job.exit_code)
                print(f"removed {job.run_id} ({job.kind}, exit code {code})")
            if not removed:
                print("nothing to reclaim: no exited jobs")
        elif args.command == "stop":
            job = await allocator.stop(args.run_id)
            print(f"stopped {job.run_id} ({cards_words(job.gpus)})")
        return EXIT_OK
    finally:
        await allocator.close()


def _fail(message: str, code: int) -> int:
    print(f"tpnode-tui: {printable(message)}", file=sys.stderr)
    return code


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
        if not (math.isfinite(args.interval) and 0.2 <= args.interval <= 3600):
            raise UsageError(f"--interval {args.interval:g}: give seconds from 0.2 to 3600")
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        if args.command is None:
            from .tui import run_dashboard  # the only import of the UI, and only when asked for

            return run_dashboard(args)
        settings = settings_from(args)
        if args.command == "agent":
            from .agent.serve import serve

            return asyncio.run(serve(settings, interval=args.interval))
        if args.command == "fleet":
            from .fleet.command import run_fleet

            return run_fleet(settings, as_json=args.json, interval=args.interval)
        return asyncio.run(_run_command(args, settings))
    except (UsageError, ConfigError, BadRequest) as e:
        return _fail(str(e), EXIT_USAGE)
    except NoCapacity as e:
        return _fail(f"no capacity now: {e}; try again later", EXIT_TEMPFAIL)
    except TpnodeError as e:  # NeverFits, Conflict, RuntimeUnavailable, JobNotFound, ...
        return _fail(str(e), EXIT_FAIL)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as e:  # a bug of ours: still one line, with the detail in the log
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return _fail(f"unexpected error ({type(e).__name__}: {e}); run with -v for details", EXIT_FAIL)


if __name__ == "__main__":
    sys.exit(main())
