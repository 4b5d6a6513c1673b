"""The headless CLI as a user runs it: a real process, real exit codes, real stderr.

The node is simulated (a scene file) and jobs are real local processes in a
temporary state dir, so every command goes through the real allocator and lock.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from load_tools import node_env
from services import write_scene


class Cli:
    def __init__(self, scene, state_dir):
        self.env = node_env(scene, state_dir)

    def __call__(self, *args, env=None):
        return subprocess.run([sys.executable, "-m", "tpnode_tui", *args], capture_output=True,
                              text=True, env={**self.env, **(env or {})}, timeout=60)

    def status(self):
        proc = self("status", "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def cli(scene, state_dir):
    c = Cli(scene, state_dir)
    yield c
    for job in c.status()["jobs"]:
        if job["status"] == "running":
            c("stop", job["run_id"])


def assert_one_clean_line(stderr: str):
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_status_json_shows_every_card_state(cli, scene, tmp_path):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(8)]
        cards[4].update(memory_used_mib=20000, processes=[{"pid": holder.pid, "used_memory_mib": 19000}])
        cards[5].update(memory_used_mib=30000)
        cards[6]["health"] = {"row_remap_pending": True}
        write_scene(scene, cards)
        assert cli("launch", "--cards", "2", "--run-id", "train-a", "--", "sleep", "60").returncode == 0
        assert cli("reserve", "--cards", "1", "--for", "1h", "--owner", "alice", "--run-id", "rsv-a").returncode == 0

        data = cli.status()
        states = [c["state"] for c in data["cards"]]
        assert states == ["job", "job", "reservation", "free", "external", "external", "unhealthy", "free"]
        assert data["total"] == 8 and data["free"] == [3, 7]
        assert data["by_job"] == {"0": "train-a", "1": "train-a", "2": "rsv-a"}
        assert data["external"] == [4, 5] and data["external_probe_ok"] is True
        assert "row remapping pending" in data["unhealthy"]["6"]
        assert data["explain"].startswith("8 cards total, 2 free")
        holder_info = data["cards"][4]["holders"][0]
        assert holder_info["pid"] == holder.pid and holder_info["visible"] is True
        assert "sleep 60" in holder_info["command"]
        assert {j["run_id"]: (j["kind"], j["gpus"]) for j in data["jobs"]} == {
            "train-a": ("job", [0, 1]), "rsv-a": ("reservation", [2])}
        for key in ("index", "state", "run_id", "holders", "reason", "memory_used_mib", "memory_total_mib"):
            assert key in data["cards"][0]

        write_scene(scene, cards, blind=True)
        blind = cli.status()
        assert blind["external_probe_ok"] is False
        assert [c["state"] for c in blind["cards"]][3] == "unverified"
        assert "free count may be too high" in blind["explain"]
    finally:
        holder.kill()
        holder.wait()


def test_human_status_is_readable(cli):
    out = cli("status")
    assert out.returncode == 0
    assert "8 cards total, 8 free" in out.stdout
    assert "CARD" in out.stdout and "free" in out.stdout


def test_launch_reports_cards_and_no_capacity_exits_75_with_the_explanation(cli):
    first = cli("launch", "--cards", "6", "--run-id", "big", "--json", "--", "sleep", "60")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["gpus"] == [0, 1, 2, 3, 4, 5]
    refused = cli("launch", "--cards", "3", "--", "sleep", "60")
    assert refused.returncode == 75
    assert_one_clean_line(refused.stderr)
    assert "need 3 cards, but 8 cards total, 2 free; 6 held by platform jobs" in refused.stderr
    assert "try again later" in refused.stderr


def test_a_request_that_can_never_fit_exits_1_and_says_so(cli):
    proc = cli("launch", "--cards", "9", "--", "sleep", "1")
    assert proc.returncode == 1
    assert_one_clean_line(proc.stderr)
    assert "this node has 8" in proc.stderr and "no amount of waiting" in proc.stderr


@pytest.mark.parametrize("args,words", [
    (["launch", "--cards", "0", "--", "true"], "at least 1"),
    (["launch", "--cards", "-1", "--", "true"], "at least 1"),
    (["launch", "--cards", "two", "--", "true"], "'two' is not a whole number"),
    (["launch", "--cards", "1"], "nothing to run"),
    (["launch", "--cards", "1", "--run-id", "bad id; rm -rf /", "--", "true"], "is not valid"),
    (["reserve", "--cards", "1", "--for", "forever"], "'forever' is not understood"),
    (["reserve", "--cards", "1", "--for", "0s"], "more than 0"),
    (["frobnicate"], "invalid choice"),
    (["launch", "--", "true"], "--cards"),
])
def test_bad_usage_exits_2_with_one_clear_line(cli, args, words):
    proc = cli(*args)
    assert proc.returncode == 2, proc
    assert_one_clean_line(proc.stderr)
    assert words in proc.stderr
    assert cli.status()["jobs"] == []  # nothing half-done


def test_a_bad_setting_is_refused_at_start_naming_it(cli):
    proc = cli("status", env={"TUNEPLANE_MEM_BUSY_MIB": "lots"})
    assert proc.returncode == 2
    assert_one_clean_line(proc.stderr)
    assert "TUNEPLANE_MEM_BUSY_MIB" in proc.stderr


def test_flags_override_environment(cli, tmp_path):
    scene2 = write_scene(tmp_path / "four.json", 4)
    data = json.loads(cli("--probe", f"simulated:{scene2}", "status", "--json").stdout)
    assert data["total"] == 4


def test_stop_then_reclaim(cli):
    assert cli("launch", "--cards", "1", "--run-id", "j1", "--", "sleep", "60").returncode == 0
    proc = cli("reclaim", "j1")
    assert proc.returncode == 1 and "still running; stop it first" in proc.stderr
    stopped = cli("stop", "j1")
    assert stopped.returncode == 0 and "stopped j1 (card 0)" in stopped.stdout
    job = cli.status()["jobs"][0]
    assert job["status"] == "exited" and cli.status()["free"] == list(range(8))
    reclaimed = cli("reclaim")
    assert reclaimed.returncode == 0 and "removed j1" in reclaimed.stdout
    assert cli.status()["jobs"] == []
    missing = cli("stop", "j1")
    assert missing.returncode == 1 and "no running platform job has run id j1" in missing.stderr


def test_hostile_command_is_stored_and_run_literally(cli, tmp_path):
    marker = tmp_path / "pwned"
    args = ["sh", "-c", "sleep 60", "x", f"$(touch {marker})", "a b", "it's", "line\nbreak", "ünïcode"]
    assert cli("launch", "--cards", "1", "--run-id", "hostile", "--", *args).returncode == 0
    job = cli.status()["jobs"][0]
    assert job["command"] == args
    assert not marker.exists()


def test_same_run_id_twice_is_idempotent(cli):
    assert cli("launch", "--cards", "2", "--run-id", "same", "--", "sleep", "60").returncode == 0
    again = cli("launch", "--cards", "2", "--run-id", "same", "--", "sleep", "60")
    assert again.returncode == 0 and "already holds cards 0,1" in again.stdout
    assert len(cli.status()["jobs"]) == 1


def test_a_command_that_does_not_exist_is_refused_even_on_a_full_node(cli):
    assert cli("launch", "--cards", "8", "--", "sleep", "60").returncode == 0
    missing = cli("launch", "--cards", "1", "--", "/nonexistent/train")
    assert missing.returncode == 1 and "not found" in missing.stderr  # not 75: waiting cannot help
    image = cli("launch", "--cards", "1", "--image", "pytorch/pytorch", "--", "python")
    assert image.returncode == 2 and "TUNEPLANE_RUNTIME=docker" in image.stderr
