"""Section 5: many nodes. 500 simulated nodes publish every second into one
redis-server while ``tpnode-tui fleet`` watches them in a real 120x40 tmux pane;
then /metrics is scraped on a node of 8 and of 64 cards.

- The publishers: bench/fleet_publishers.py, one process of real
  FleetPublisher loops (one per node, period 1 s, 8 cards each) sharing a
  connection pool. Their CPU (user + system, psutil) over the window, per node.
- The view: from starting the pane to the capture showing the summary with
  every node up and the footer; then its CPU over the window, idle.
- Redis: INFO commandstats before and after the window; every command's calls
  per node per second, and the publishers' own (SET and PUBLISH) apart.
- /metrics: GET over loopback TCP to the agent's metrics app (aiohttp, the
  real collector) over a reading of 8 or 64 cards, interleaved round by round.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Optional

import aiohttp
import psutil
import redis
from aiohttp import web
from dashboard import Pane, _cpu_seconds

import common  # noqa: F401
from common import BENCH, Limit, Row, Section, interleave, run_async
from helpers.fleet import job, node_snapshot
from helpers.services import free_port

TITLE = "5. Many nodes: 500 publishing at 1 s, the fleet view, /metrics"
NODES = 500
PERIOD_S = 1.0
SETTLE_S = 2.0
FRAME_TIMEOUT_S = 60.0
#: what an agent sends: its publications, and its registration now and then
PUBLISHER_COMMANDS = ("set", "publish", "hset", "hdel", "exists")


def _commandstats(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def _view_complete(screen: str, nodes: int) -> bool:
    return f"{nodes} nodes: {nodes} up, 0 down" in screen and "Quit" in screen and "sim-000" in screen


def _many_nodes(url: str, window_s: float, section: Section) -> None:
    client = redis.Redis.from_url(url)
    publishers = subprocess.Popen(
        [sys.executable, str(BENCH / "fleet_publishers.py"), url, str(NODES), str(PERIOD_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    pane: Optional[Pane] = None
    try:
        line = publishers.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the publishers did not start (they said {line!r})")
        pub_proc = psutil.Process(publishers.pid)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "TERM": "tmux-256color",
            "TUNEPLANE_FLEET_URL": url,
        }
        pane = Pane([sys.executable, "-m", "tpnode_tui", "fleet"], env)
        screen = ""
        while not _view_complete(screen, NODES):
            if time.perf_counter() - pane.started > FRAME_TIMEOUT_S:
                raise TimeoutError(f"no full frame of {NODES} nodes after {FRAME_TIMEOUT_S:g} s:\n{screen}")
            time.sleep(0.05)
            screen = pane.capture()
        first_frame = time.perf_counter() - pane.started
        view = pane.process()
        time.sleep(SETTLE_S)
        stats0, view0, pub0, t0 = _commandstats(client), _cpu_seconds(view), _cpu_seconds(pub_proc), time.perf_counter()
        time.sleep(window_s)
        stats1, view1, pub1, t1 = _commandstats(client), _cpu_seconds(view), _cpu_seconds(pub_proc), time.perf_counter()
        if not _view_complete(pane.capture(), NODES):
            raise RuntimeError("the fleet view stopped showing every node up during the window")
    finally:
        if pane is not None:
            pane.close()
        publishers.terminate()
        try:
            publishers.wait(10)
        except subprocess.TimeoutExpired:
            publishers.kill()
        client.close()
    elapsed = t1 - t0
    calls = {name: stats1.get(name, 0) - stats0.get(name, 0) for name in stats1}
    per_node = {name: n / NODES / elapsed for name, n in calls.items() if n}
    rows = {
        "frame": Row(
            "fleet_first_frame_s", f"fleet view: start to first full frame, {NODES} nodes", [first_frame], unit="s"
        ),
        "cpu": Row(
            "fleet_cpu_pct",
            f"fleet view CPU, {NODES} nodes publishing, over {window_s:g} s",
            [(view1 - view0) / elapsed * 100],
            unit="%",
        ),
        "ops": Row(
            "fleet_redis_ops_per_node_s",
            "Redis commands per node per second, the view's reads too",
            [sum(per_node.values())],
            unit="/s",
        ),
        "pub_ops": Row(
            "fleet_publish_ops_per_node_s",
            "... the nodes' own (SET, PUBLISH, registration)",
            [sum(per_node.get(c, 0) for c in PUBLISHER_COMMANDS)],
            unit="/s",
        ),
        "pub_cpu": Row(
            "fleet_publisher_cpu_ms_per_node_s",
            "publisher CPU per node, ms per second",
            [(pub1 - pub0) / NODES / elapsed * 1000],
            unit="ms/s",
        ),
    }
    section.rows += rows.values()
    section.limits += [
        Limit("fleet view first frame, 500 nodes (s)", rows["frame"], 2),
        Limit("fleet view CPU % of one core, 500 nodes", rows["cpu"], 10),
        Limit("Redis commands per node per second, the nodes' own", rows["pub_ops"], 2, inclusive=True),
    ]
    breakdown = ", ".join(f"{name} {rate:.3f}" for name, rate in sorted(per_node.items(), key=lambda x: -x[1]))
    section.notes.append(f"Redis commands per node per second by command: {breakdown}")


def _fake_service(cards: int) -> SimpleNamespace:
    from tpnode_tui.port.types.readings import Reading

    held = tuple(range(cards // 2))
    snap = node_snapshot(cards, jobs=(job("train", held),), external=(cards - 1,))
    return SimpleNamespace(reading=Reading(1, snap), launch_results={"placed": 3, "no_capacity": 1})


async def _scrapes(quick: bool) -> dict[str, list[float]]:
    from tpnode_tui.agent.metrics import metrics_app

    runners, urls = [], {}
    for cards in (8, 64):
        runner = web.AppRunner(metrics_app(_fake_service(cards), "bench-node"), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls[cards] = f"http://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession() as session:

            def scrape(url: str):
                async def call() -> None:
                    async with session.get(url) as response:
                        await response.read()

                return call

            rounds = 30 if quick else 200
            return await interleave(
                {f"scrape{cards}": (scrape(url), 1) for cards, url in urls.items()}, rounds, warmup=5
            )
    finally:
        for runner in runners:
            await runner.cleanup()


def run(redis_server, quick: bool) -> Section:
    section = Section(TITLE)
    _many_nodes(redis_server.url, 5.0 if quick else 30.0, section)
    times = run_async(_scrapes(quick))
    rows = [
        Row(f"metrics_scrape_{cards}_ms", f"/metrics scrape over loopback, {cards} cards", times[f"scrape{cards}"])
        for cards in (8, 64)
    ]
    section.rows += rows
    section.limits += [Limit(f"/metrics scrape, {cards} cards (ms)", row, 10) for cards, row in zip((8, 64), rows)]
    section.notes.append(
        "CPU is user + system time of the process (psutil); the publishers share one process and one connection pool"
    )
    return section
