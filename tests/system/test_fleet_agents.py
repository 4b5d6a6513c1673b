"""Many nodes for real: agents as their own processes publish to one redis-server.

Each agent is ``python -m tpnode_tui agent`` with its own simulated node,
state dir, socket and node name; the fleet is read the way an operator reads
it (``tpnode-tui fleet --json``, or the reader it is made of). The waits are
bounded generously: they say "this happens", not "this is fast".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.fleet import AgentProcess
from helpers.load import kill_process_jobs
from helpers.paths import CHECKOUT
from helpers.services import write_scene
from helpers.waiting import until
from tpnode_tui.fleet.reader import FleetReader, read_once
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.jobs import LaunchRequest

pytestmark = pytest.mark.redis
WAIT_S = 30.0


@pytest.fixture
def agents(tmp_path, redis_url):
    started: list[AgentProcess] = []

    def start(name: str, **kw) -> AgentProcess:
        agent = AgentProcess(tmp_path, name, redis_url, **kw)
        agent.start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.kill()
        kill_process_jobs(agent.state)


def fleet_json(redis_url: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "fleet", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        env={**os.environ, "TUNEPLANE_FLEET_URL": redis_url, "PYTHONPATH": str(CHECKOUT)},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def nodes(redis_url: str) -> dict[str, object]:
    fleet = asyncio.run(read_once(redis_url, redis_url))
    return {n.name: n for n in fleet.nodes}


def test_three_agents_publish_and_a_change_arrives_without_waiting_for_a_period(agents, redis_url):
    # A 60 s period: a change can only arrive this quickly because it is published when it happens.
    a = agents("gpu-01", cards=8, period_s=60)
    agents("gpu-02", cards=4, period_s=60)
    agents("gpu-03", cards=2, period_s=60)
    until(
        lambda: len(nodes(redis_url)) == 3 and all(n.status == "up" for n in nodes(redis_url).values()),
        "three nodes up",
    )
    doc = fleet_json(redis_url)
    assert [n["name"] for n in doc["nodes"]] == ["gpu-01", "gpu-02", "gpu-03"]
    assert [(n["total"], n["free"], n["reachable"]) for n in doc["nodes"]] == [(8, 8, True), (4, 4, True), (2, 2, True)]
    assert (doc["free"], doc["total"], doc["up"], doc["down"]) == (14, 14, 3, 0)
    assert doc["largest_free_window"] == {"node": "gpu-01", "cards": 8}

    changed = time.monotonic()
    write_scene(
        a.scene, [{"memory_total_mib": 143771, "memory_used_mib": 90000}] * 3 + [{"memory_total_mib": 143771}] * 5
    )
    until(lambda: nodes(redis_url)["gpu-01"].free == 5, "the change on gpu-01", timeout=30)
    assert time.monotonic() - changed < 30  # well inside the 60 s period
    node = nodes(redis_url)["gpu-01"]
    assert [c.state for c in node.cards][:4] == ["external"] * 3 + ["free"]


def test_a_killed_agent_is_unreachable_after_three_periods_and_comes_back(agents, redis_url):
    period = 0.5
    agents("gpu-01", cards=4, period_s=period)
    b = agents("gpu-02", cards=4, period_s=period)
    until(
        lambda: {n.status for n in nodes(redis_url).values()} == {"up"} and len(nodes(redis_url)) == 2, "both nodes up"
    )
    # A reader that stays open (as the fleet view does) remembers the last publication it read.
    loop = asyncio.new_event_loop()
    watcher = FleetReader(redis_url, redis_url)
    try:
        last_up = {n.name: n for n in loop.run_until_complete(watcher.read()).nodes}["gpu-02"].last_seen
        b.kill(signal.SIGKILL)
        killed = time.time()
        down = until(
            lambda: nodes(redis_url)["gpu-02"].status == "unreachable" and nodes(redis_url)["gpu-02"],
            "gpu-02 to be unreachable",
        )
        # Not before three periods without a publication (the key's expiry, on Redis's clock).
        assert time.time() - killed >= 3 * period - 0.5
        # A reader that comes later knows only a time it was certainly alive (its registration).
        assert down.last_seen <= last_up and not down.seen_exactly
        watched = {n.name: n for n in loop.run_until_complete(watcher.read()).nodes}["gpu-02"]
        assert watched.status == "unreachable" and watched.seen_exactly and watched.last_seen >= last_up
    finally:
        loop.run_until_complete(watcher.close())
        loop.close()
    doc = fleet_json(redis_url)
    gone = next(n for n in doc["nodes"] if n["name"] == "gpu-02")
    assert (gone["reachable"], gone["free"], gone["total"]) == (False, 0, 4)
    assert {c["state"] for c in gone["cards"]} == {"unknown"}
    assert (doc["free"], doc["total"], doc["up"], doc["down"]) == (4, 8, 1, 1)

    b.start()
    until(lambda: nodes(redis_url)["gpu-02"].status == "up", "gpu-02 back after its restart")
    assert fleet_json(redis_url)["free"] == 8
    assert len(nodes(redis_url)["gpu-02"].instances) == 1  # the dead instance was superseded


def test_redis_down_and_back_under_publishing_agents(agents, redis_url, redis_server):
    a = agents("gpu-01", cards=4, period_s=0.5)
    agents("gpu-02", cards=4, period_s=0.5)
    until(lambda: len(nodes(redis_url)) == 2, "both nodes published")
    redis_server.stop()
    try:

        async def launch() -> object:
            node = AgentNode(a.socket)
            try:
                return await node.launch(LaunchRequest(cards=2, command=("sleep", "60"), run_id="while-down"))
            finally:
                await node.close()

        result = asyncio.run(asyncio.wait_for(launch(), WAIT_S))
        assert result.launched is not None and result.launched.gpus == (0, 1)
        # down long enough for a publication to fail: a launch is quicker than a period
        until(lambda: "cannot publish to the fleet" in a.log.read_text(), "the agent to say it cannot publish")
    finally:
        redis_server.start()
    # Back: both publish again (and register again: this Redis kept nothing).
    until(
        lambda: len(nodes(redis_url)) == 2 and all(n.status == "up" for n in nodes(redis_url).values()),
        "both nodes publishing again",
        show=lambda: nodes(redis_url),
    )
    until(lambda: nodes(redis_url)["gpu-01"].free == 2, "gpu-01's launch made while Redis was down")
    assert "publishing to the fleet at" in a.log.read_text() and "again" in a.log.read_text()
