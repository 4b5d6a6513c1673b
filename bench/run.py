"""Benchmarks for tpnode-tui: ``python bench/run.py [--quick] [--json] [--only SECTION ...]``.

Prints one table (or, with ``--json``, one JSON object) of medians and p99s,
the side-by-side ratios and whether each target was met. These are
measurements, not tests: nothing here fails on a slow machine; a missed
target is reported, with the exit status still 0. Exit status 1 means a
section could not measure at all (a service would not start), 2 bad usage.
With ``--compare`` the figures are also compared with those recorded in
docs/benchmarks.md (bench/compare.py), and exit status 3 says one slid.

Everything it starts (dockerd, redis-server, containers, jobs, the dashboard)
it stops again, also when interrupted. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

import services_up
from common import DEFAULT_SEED, ROOT, Section

SECTIONS = (
    "occupancy",
    "docker",
    "launch",
    "dashboard",
    "fleet",
    "agent",
    "topology",
    "usage",
    "fence",
    "door",
    "churn",
    "web",
)

#: the keys ``--json`` promises, with the rows or ratio each comes from
#: (the first that was measured: the seed's nvidia-smi route, else our SmiProbe)
HEADLINE = {
    "occupancy_nvml_8_ms": ("nvml_occupancy_8",),
    "occupancy_nvml_64_ms": ("nvml_occupancy_64",),
    "occupancy_smi_8_ms": ("seed_occupancy_8", "smi_occupancy_8"),
    "occupancy_speedup_8": ("occupancy_speedup_8",),
    "docker_ps_200_ms": ("docker_ps_200",),
    "lock_hold_create_ms": ("lock_hold_create",),
    "lock_hold_create_start_ms": ("lock_hold_create_start",),
    "launches_per_s_flock": ("launches_per_s_flock",),
    "launches_per_s_redis": ("launches_per_s_redis",),
    "tui_cpu_pct_8": ("tui_cpu_pct_8",),
    "tui_cpu_pct_64": ("tui_cpu_pct_64",),
    "tui_first_frame_s": ("tui_first_frame_s",),
    "tui_rss_mb": ("tui_rss_mb",),
    "fleet_first_frame_s": ("fleet_first_frame_s",),
    "fleet_cpu_pct": ("fleet_cpu_pct",),
    "fleet_redis_ops_per_node_s": ("fleet_redis_ops_per_node_s",),
    "fleet_publish_ops_per_node_s": ("fleet_publish_ops_per_node_s",),
    "fleet_publisher_cpu_ms_per_node_s": ("fleet_publisher_cpu_ms_per_node_s",),
    "metrics_scrape_8_ms": ("metrics_scrape_8_ms",),
    "metrics_scrape_64_ms": ("metrics_scrape_64_ms",),
    "agent_probe_reads_per_s_1": ("agent_probe_reads_per_s_1",),
    "agent_probe_reads_per_s_20": ("agent_probe_reads_per_s_20",),
    "agent_cpu_pct_8": ("agent_cpu_pct_8",),
    "agent_cpu_pct_64": ("agent_cpu_pct_64",),
    "status_agent_ms": ("status_agent_ms",),
    "status_local_ms": ("status_local_ms",),
    "topology_mismatches_8": ("topology_mismatches_8",),
    "topology_choose_8_median_us": ("topology_choose_8_median_us",),
    "topology_choose_8_max_us": ("topology_choose_8_max_us",),
    "topology_choose_1024_4_median_us": ("topology_choose_1024_4_median_us",),
    "usage_report_90d_ms": ("usage_report_90d_user",),
    "ledger_cpu_pct_8": ("ledger_cpu_pct_held_8",),
    "fence_v2_card_ms": ("fence_v2_card_ms",),
    "fence_v1_card_ms": ("fence_v1_card_ms",),
    "door_status_flooded_ms": ("door_status_flooded",),
    "door_status_slowdown": ("door_status_slowdown",),
    "door_status_connect_flood_ms": ("door_status_connect_flood",),
    "door_agent_rss_mb": ("door_agent_rss_mb",),
    "churn_status_ms": ("churn_status_churned",),
    "churn_agent_cpu_pct_history": ("churn_agent_cpu_pct_history",),
}


def machine() -> dict:
    """What the figures were measured on."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass

    def version(*argv: str) -> Optional[str]:
        if not shutil.which(argv[0]):
            return None
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else None

    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "docker": version("dockerd", "--version"),
        "redis": " ".join((version("redis-server", "--version") or "").split()[:3]) or None,
        "tmux": version("tmux", "-V"),
    }


def checkout() -> Optional[str]:
    """The commit measured, marked when the product's files differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=20
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "tpnode_tui"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" with uncommitted changes to tpnode_tui/" if dirty.stdout.strip() else "")


def _fmt(value: Optional[float], unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return text + unit


def _verdict(met: Optional[bool]) -> str:
    return {True: "met", False: "MISSED", None: ""}[met]


def print_table(sections: list[Section], meta: dict, out=sys.stdout) -> None:
    m = meta["machine"]
    print(f"tpnode-tui benchmarks ({'quick' if meta['quick'] else 'full'} run, {meta['duration_s']:.0f} s)", file=out)
    print(
        f"machine: {m['cpu']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}",
        file=out,
    )
    print(f"services: {m['docker']}; {m['redis']}; {m['tmux']}", file=out)
    print(f"checkout: {meta['commit']}", file=out)
    print(
        f"load average before / after: {' '.join(f'{x:.2f}' for x in meta['load_before'])} / "
        f"{' '.join(f'{x:.2f}' for x in meta['load_after'])}",
        file=out,
    )
    width = max([60] + [len(r.label) for s in sections for r in s.rows])
    for section in sections:
        print(file=out)
        print(section.title, file=out)
        if section.skipped:
            print(f"  not measured: {section.skipped}", file=out)
            continue
        print(f"  {'':<{width}} {'median':>10} {'p99':>10} {'n':>6}", file=out)
        for row in section.rows:
            med = f"{_fmt(row.median)} {row.unit}"
            p99 = f"{_fmt(row.p99)} {row.unit}" if row.p99 is not None and len(row.samples) > 1 else ""
            print(f"  {row.label:<{width}} {med:>10} {p99:>10} {len(row.samples):>6}", file=out)
        for ratio in section.ratios:
            target = f"target >= {ratio.target:g}x: {_verdict(ratio.met)}" if ratio.target else ""
            print(f"  {ratio.label:<{width}} {_fmt(ratio.value, 'x'):>10} {target}", file=out)
        for limit in section.limits:
            print(
                f"  {limit.label:<{width}} {_fmt(limit.value):>10} "
                f"target {'<=' if limit.inclusive else '<'} {limit.bound:g}: {_verdict(limit.met)}",
                file=out,
            )
        for note in section.notes:
            print(f"  note: {note}", file=out)


def as_json(sections: list[Section], meta: dict) -> dict:
    rows = {r.key: r for s in sections for r in s.rows}
    ratios = {r.key: r for s in sections for r in s.ratios}
    out: dict = {}
    for key, sources in HEADLINE.items():
        out[key] = None
        for source in sources:
            if source in rows:
                out[key] = rows[source].median
            elif source in ratios:
                out[key] = ratios[source].value
            else:
                continue
            break
    out["rows"] = {
        r.key: {"label": r.label, "unit": r.unit, "median": r.median, "p99": r.p99, "n": len(r.samples)}
        for r in rows.values()
    }
    out["ratios"] = {
        r.key: {"label": r.label, "value": r.value, "target": r.target, "met": r.met} for r in ratios.values()
    }
    out["limits"] = [
        {"label": lim.label, "value": lim.value, "bound": lim.bound, "met": lim.met}
        for s in sections
        for lim in s.limits
    ]
    out["skipped"] = {s.title: s.skipped for s in sections if s.skipped}
    out["notes"] = [n for s in sections for n in s.notes]
    out.update(meta)
    return out


class Runner:
    """Runs the chosen sections, starting each service once, on first need.

    Everything started is registered with one ExitStack, so it is stopped
    however the run ends. A section that fails is reported as not measured,
    with why, and the others still run.
    """

    def __init__(self, args: argparse.Namespace, cleanup: ExitStack) -> None:
        self.args = args
        self.cleanup = cleanup
        self._services: dict[str, object] = {}

    def _service(self, name: str, start):
        """The running service, or the Unavailable that starting it raised (tried once)."""
        if name not in self._services:
            try:
                self._services[name] = start(self.cleanup)
            except services_up.Unavailable as e:
                self._services[name] = e
        return self._services[name]

    def section(self, name: str) -> Section:
        quick = self.args.quick
        if name == "occupancy":
            import occupancy

            return occupancy.run(self.args.seed, quick)
        if name == "docker":
            import docker_reads

            daemon = self._service("dockerd", services_up.start_dockerd)
            if isinstance(daemon, Exception):
                return Section(docker_reads.TITLE, skipped=str(daemon))
            return docker_reads.run(daemon, quick)
        if name == "launch":
            import launches

            daemon = self._service("dockerd", services_up.start_dockerd)
            redis = self._service("redis", services_up.start_redis)
            unavailable = [
                f"{what} ({service})"
                for what, service in (
                    ("lock hold per docker launch", daemon),
                    ("launches per second with Redis", redis),
                )
                if isinstance(service, Exception)
            ]
            return launches.run(
                None if isinstance(daemon, Exception) else daemon,
                None if isinstance(redis, Exception) else redis,
                quick,
                unavailable,
            )
        if name == "fleet":
            import dashboard
            import fleet

            redis = self._service("redis", services_up.start_redis)
            if isinstance(redis, Exception):
                return Section(fleet.TITLE, skipped=str(redis))
            why = dashboard.available()
            return Section(fleet.TITLE, skipped=why) if why else fleet.run(redis, quick)
        if name == "agent":
            import agent

            return agent.run(quick)
        if name == "topology":
            import topology

            return topology.run(quick)
        if name == "usage":
            import usage

            return usage.run(quick)
        if name == "fence":
            import fence

            return fence.run(quick)
        if name == "door":
            import door

            return door.run(quick)
        if name == "churn":
            import door

            return door.churn(quick)
        if name == "web":
            import web

            return web.run(quick)
        import dashboard

        why = dashboard.available()
        return Section(dashboard.TITLE, skipped=why) if why else dashboard.run(quick)

    def run(self, name: str) -> Section:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            section = self.section(name)
        except Exception as e:  # one section's failure must not lose the others' figures
            traceback.print_exc(file=sys.stderr)
            section = Section(name, skipped=f"failed: {type(e).__name__}: {e}")
        print(f"  {name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        return section


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: the whole run in about a minute and a half")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"run only these sections ({', '.join(SECTIONS)})",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="compare with the figures recorded in docs/benchmarks.md: say which slid (exit status 3)",
    )
    parser.add_argument(
        "--seed",
        type=Path,
        default=DEFAULT_SEED,
        help="the seed allocator.py whose nvidia-smi route is compared (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    figures = None
    if args.compare:
        import compare

        try:
            figures = compare.recorded()
        except (OSError, compare.FiguresError) as e:  # before measuring for minutes
            print(f"bench/run.py: the recorded figures: {e}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)

    started = time.monotonic()
    meta: dict = {"quick": args.quick, "load_before": list(os.getloadavg()), "machine": machine(), "commit": checkout()}
    try:
        with ExitStack() as cleanup:
            runner = Runner(args, cleanup)
            sections = [runner.run(name) for name in (args.only or SECTIONS)]
    except KeyboardInterrupt:
        print("interrupted: everything the benchmarks started has been stopped", file=sys.stderr)
        return 130
    meta["load_after"] = list(os.getloadavg())
    meta["duration_s"] = time.monotonic() - started

    result = as_json(sections, meta)
    verdicts = None if figures is None else compare.compare(figures, result)
    if args.json:
        if verdicts is not None:
            result["compared"] = {
                v.figure.key: {"recorded": v.figure.recorded, "now": v.now, "verdict": v.word} for v in verdicts
            }
        print(json.dumps(result, indent=2))
    else:
        print_table(sections, meta)
        if verdicts is not None:
            print("\nAgainst the figures recorded in docs/benchmarks.md", file=sys.stdout)
            compare.report(verdicts)
    if any(s.skipped for s in sections):
        return 1
    return compare.SLID_EXIT if verdicts is not None and any(v.slid for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
