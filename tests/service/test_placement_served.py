"""Placement as users ask for it: the CLI's flags as a user types them, and through the agent.

The allocator's own choice, under its lock with the in-memory stand-ins, is in
tests/unit/test_placement.py; here the node is simulated (a scene with two PCIe
switches of four cards) and the jobs are real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.agents import Agent, running
from helpers.load import kill_process_jobs, node_env
from helpers.services import write_scene
from tpnode_tui import NeverFits
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.topology import CONTIGUOUS, SAME_SWITCH
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.reservations import ReserveRequest


@pytest.fixture
def placed_cli(tmp_path):
    scene = write_scene(tmp_path / "node.json", 8, topology="pcie-2x4")
    state = tmp_path / "state"
    env = node_env(scene, state)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "tpnode_tui", *args], capture_output=True, text=True, env=env, timeout=60
        )

    yield run
    kill_process_jobs(state)


def test_launch_same_switch_from_the_command_line(placed_cli):
    first = placed_cli("launch", "--cards", "2", "--run-id", "p1", "--json", "--", "sleep", "60")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["gpus"] == [0, 1]
    whole = placed_cli("launch", "--cards", "4", "--same-switch", "--run-id", "p2", "--json", "--", "sleep", "60")
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["gpus"] == [4, 5, 6, 7]
    again = placed_cli("launch", "--cards", "4", "--same-switch", "--run-id", "p3", "--", "sleep", "60")
    assert again.returncode == 75
    [line] = again.stderr.splitlines()
    assert "need 4 cards same-switch" in line and "not waiting for cards" in line, line
    status = json.loads(placed_cli("status", "--json").stdout)
    assert len(status["topology"]["links"]) == 8
    both = placed_cli("launch", "--cards", "1", "--same-switch", "--contiguous", "--", "true")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_a_simulated_node_without_a_topology_says_so_and_never_fits_a_placement(tmp_path):
    scene = write_scene(tmp_path / "node.json", 8)  # as the README shows the format: no "topology"
    state = tmp_path / "state"
    env = node_env(scene, state)

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "tpnode_tui", *args], capture_output=True, text=True, env=env, timeout=60
        )

    try:
        for placement in ("--contiguous", "--same-switch"):
            done = run("launch", "--cards", "2", placement, "--run-id", "t1", "--", "sleep", "60")
            assert done.returncode == 1, done.stderr  # never fits: waiting cannot help, so not 75
            [line] = done.stderr.splitlines()
            assert (
                f'this node cannot say how its cards are linked (the simulated node {scene} has no "topology")' in line
            )
            assert f"waiting cannot help; ask without {placement}" in line, line
        status = run("status")
        assert (
            f'topology: this node cannot say how its cards are linked (the simulated node {scene} has no "topology"): '
            "--same-switch and --contiguous never fit here; other launches get consecutive cards"
        ) in status.stdout.splitlines(), status.stdout
        doc = json.loads(run("status", "--json").stdout)
        assert doc["topology"] is None and 'has no "topology"' in doc["topology_unknowable"]
        plain = run("launch", "--cards", "2", "--run-id", "t2", "--json", "--", "sleep", "60")
        assert plain.returncode == 0 and json.loads(plain.stdout)["gpus"] == [0, 1], plain.stderr
    finally:
        kill_process_jobs(state)


async def test_the_placement_travels_through_the_agent(tmp_path):
    agent = Agent(tmp_path)
    write_scene(agent.scene, 8, topology="pcie-2x4")
    async with running(agent):
        node = AgentNode(agent.socket)
        try:
            held = await node.reserve(ReserveRequest(cards=4, duration_s=600, run_id="r", placement=SAME_SWITCH))
            assert held.gpus == (0, 1, 2, 3)
            result = await node.launch(
                LaunchRequest(cards=4, command=("sleep", "60"), run_id="j", placement=CONTIGUOUS)
            )
            assert result.launched is not None and result.launched.gpus == (4, 5, 6, 7)
            with pytest.raises(NeverFits):
                await node.launch(LaunchRequest(cards=5, command=("sleep", "60"), run_id="k", placement=SAME_SWITCH))
            with pytest.raises(BadRequest, match="not a placement"):
                await node.launch(LaunchRequest(cards=1, command=("true",), placement="near"))
        finally:
            await node.close()
