"""The whole product on a real Docker engine: CLI processes, labels as the only record.

Every command is a new process with a new allocator, so each check also shows
that the picture is rebuilt from container labels alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.load import node_env
from helpers.waiting import until

pytestmark = pytest.mark.docker


@pytest.fixture
def cli(dockerd, scene, state_dir):
    env = node_env(scene, state_dir, runtime="docker", docker_host=dockerd.host, TUNEPLANE_HOLD_IMAGE=dockerd.image)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "tpnode_tui", *args], capture_output=True, text=True, env=env, timeout=120
        )

    run.status = lambda: json.loads(run("status", "--json").stdout)
    return run


def test_launch_stop_reclaim_through_labels(cli, dockerd):
    out = cli("launch", "--cards", "2", "--run-id", "train-1", "--image", dockerd.image, "--", "sleep", "60")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "launched train-1 on cards 0,1",
        "its output is kept by the Docker engine: docker logs tpn-train-1, for an account that may use it",
    ]
    logs = cli("logs", "train-1")
    assert (logs.returncode, logs.stdout) == (1, "") and "docker logs tpn-train-1" in logs.stderr
    labels = json.loads(dockerd.cli("inspect", "tpn-train-1").stdout)[0]["Config"]["Labels"]
    assert labels["tuneplane.gpus"] == "0,1" and labels["tuneplane.run_id"] == "train-1"
    assert labels["tuneplane.lease_token"].isdigit() and "tuneplane.fence" not in labels

    data = cli.status()
    assert data["by_job"] == {"0": "train-1", "1": "train-1"}
    assert data["runtime"].startswith("docker at unix://")

    assert cli("stop", "train-1").returncode == 0
    after = cli.status()
    assert after["free"] == list(range(8))
    assert [(j["run_id"], j["status"]) for j in after["jobs"]] == [("train-1", "exited")]
    assert "removed train-1" in cli("reclaim").stdout
    assert dockerd.cli("ps", "-aq").stdout.strip() == b""


def test_a_container_labelled_by_hand_holds_its_cards(cli, dockerd):
    dockerd.cli("run", "-d", "--name", "by-hand", "--label", "tuneplane.gpus=0,1,2", dockerd.image, "sleep", "60")
    out = cli("launch", "--cards", "2", "--image", dockerd.image, "--json", "--", "sleep", "60")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["gpus"] == [3, 4]
    assert cli.status()["by_job"]["0"] == "by-hand"


def test_a_failed_start_leaves_nothing_holding_cards(cli, dockerd):
    out = cli("launch", "--cards", "1", "--run-id", "broken", "--image", dockerd.image, "--", "/nonexistent")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "broken" in out.stderr
    assert dockerd.cli("ps", "-aq").stdout.strip() == b""
    assert cli.status()["free"] == list(range(8))


def test_a_reservation_frees_its_cards_when_it_expires(cli):
    out = cli("reserve", "--cards", "3", "--for", "2s", "--owner", "alice", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["gpus"] == [0, 1, 2]
    assert cli.status()["cards"][0]["state"] == "reservation"
    until(lambda: cli.status()["free"] == list(range(8)), "the reservation to end", 30, every=0.5)
    job = cli.status()["jobs"][0]
    assert (job["kind"], job["owner"], job["status"]) == ("reservation", "alice", "exited")


def test_engine_unreachable_is_one_clear_line_and_nothing_is_free(cli, tmp_path):
    env_host = f"unix://{tmp_path}/no-such.sock"
    out = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "TUNEPLANE_RUNTIME": "docker",
            "DOCKER_HOST": env_host,
            "TUNEPLANE_PROBE": "simulated:/dev/null",
        },
    )
    assert out.returncode == 1 and out.stdout == ""
    assert "Traceback" not in out.stderr and "DOCKER_HOST" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
