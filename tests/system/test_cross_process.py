"""Many real CLI processes launching at once on one 8-card node never share a card.

This is the product's promise, tested as it is used: separate processes, each
its own allocator, coordinated only by the cross-process lock (flock on the
state dir, or a lease on a real redis-server).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from helpers.load import node_env

PROCESSES = 12  # more than the 8 cards, so some must be refused


def launch_all(env: dict, sizes: list[int]) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tpnode_tui",
                "launch",
                "--cards",
                str(n),
                "--run-id",
                f"p{i}",
                "--json",
                "--",
                "sleep",
                "120",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, n in enumerate(sizes)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def check_no_card_shared(env, results, sizes):
    accepted = [json.loads(r.stdout) for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode == 75]
    assert len(accepted) + len(refused) == len(sizes), [r.stderr for r in results]
    for r in refused:
        assert "no capacity now" in r.stderr and "cards total" in r.stderr
    held = Counter(card for a in accepted for card in a["gpus"])
    assert all(n == 1 for n in held.values()), held
    assert sum(held.values()) <= 8
    assert refused, "with more demand than cards some launches must be refused"
    status = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "status", "--json"], capture_output=True, text=True, env=env, timeout=60
    )
    live = [j for j in json.loads(status.stdout)["jobs"] if j["status"] == "running"]
    on_cards = Counter(c for j in live for c in j["gpus"])
    assert all(n == 1 for n in on_cards.values()), on_cards
    assert sorted(on_cards) == sorted(held)
    return live


def stop_all(env, live):
    for job in live:
        subprocess.run(
            [sys.executable, "-m", "tpnode_tui", "stop", job["run_id"]], capture_output=True, env=env, timeout=60
        )


def test_concurrent_cli_launches_with_flock_never_share(scene, state_dir):
    env = node_env(scene, state_dir)
    sizes = [1, 2] * (PROCESSES // 2)
    results = launch_all(env, sizes)
    stop_all(env, check_no_card_shared(env, results, sizes))


@pytest.mark.redis
def test_concurrent_cli_launches_with_redis_lease_never_share(scene, state_dir, redis_url):
    env = node_env(scene, state_dir, redis_url=redis_url)
    sizes = [1, 2] * (PROCESSES // 2)
    results = launch_all(env, sizes)
    stop_all(env, check_no_card_shared(env, results, sizes))
