"""The demo cleans up after demos that were killed, and never touches a live one's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers.load import node_env
from helpers.waiting import until
from tpnode_tui.demo.stage import DEMO_PREFIX, OWNER_FILE, clean_up_after_dead_demos, start_demo

#: a demo in a process of its own, as `tpnode-tui --demo` runs it, until it is killed
DEMO = """
import sys, time
from tpnode_tui.demo.stage import start_demo
demo = start_demo()
print(demo.root, demo.squatter.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def demo_process():
    started = []

    def start() -> tuple[subprocess.Popen, Path, int]:
        proc = subprocess.Popen([sys.executable, "-c", DEMO], stdout=subprocess.PIPE, text=True)
        root, squatter = proc.stdout.readline().split()
        started.append((proc, Path(root)))
        return proc, Path(root), int(squatter)

    yield start
    for proc, _root in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        clean_up_after_dead_demos()


def test_a_killed_demo_s_jobs_and_directory_go_with_the_next_demo_and_a_live_one_s_stay(demo_process):
    killed, killed_root, squatter = demo_process()
    env = node_env(killed_root / "node.json", killed_root / "state")
    launched = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "launch", "--cards", "1", "--run-id", "left", "--", "sleep", "600"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launched.returncode == 0, launched.stderr
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tpnode_tui", "status", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    )
    record = json.loads((killed_root / "state" / "jobs.json").read_text())["jobs"]["left"]
    assert [j["run_id"] for j in status["jobs"]] == ["left"]
    supervisor = record["pid"]
    alive, alive_root, _ = demo_process()

    os.kill(killed.pid, signal.SIGKILL)  # no chance to clean up
    killed.wait(30)
    assert killed_root.exists() and not _gone(supervisor), "the job should outlive its demo"

    demo = start_demo()
    try:
        assert not killed_root.exists()
        until(lambda: _gone(supervisor), "the dead demo's job to end")
        until(lambda: _gone(squatter), "the dead demo's squatter to end")
        # its supervisor, killed, removed no cgroup: the cleanup does, once nothing is left in it
        assert not record["cgroup"] or not Path(record["cgroup"]).exists()
        assert alive_root.exists() and (alive_root / OWNER_FILE).exists()
        assert alive.poll() is None
    finally:
        demo.close()


def test_only_directories_with_an_owner_file_are_touched(tmp_path):
    (tmp_path / f"{DEMO_PREFIX}being-made").mkdir()  # a demo between mkdtemp and its owner file
    (tmp_path / f"{DEMO_PREFIX}garbage").mkdir()
    (tmp_path / f"{DEMO_PREFIX}garbage" / OWNER_FILE).write_text("not json")
    (tmp_path / "someone-else").mkdir()
    assert clean_up_after_dead_demos(tmp_path) == []
    assert {p.name for p in tmp_path.iterdir()} == {f"{DEMO_PREFIX}being-made", f"{DEMO_PREFIX}garbage", "someone-else"}
