"""``tpnode-tui agent --simulated``: an agent on a machine without a GPU, started by
hand as the README's tour starts it, serves the sample node that ships with the
package, and a file that is not a simulated node is refused before anything is served.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from helpers.load import BOUND_S
from helpers.waiting import until
from tpnode_tui.probes.simulated import SAMPLE


@pytest.fixture
def node(tmp_path):
    """A private node: its own socket, state dir and (empty) settings file, nothing
    of this machine's TUNEPLANE_* settings."""
    settings = tmp_path / "agent.env"
    settings.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.pop("DOCKER_HOST", None)
    env.update(
        TUNEPLANE_NODE_ENV_FILE=str(settings),
        TUNEPLANE_AGENT_SOCKET=str(tmp_path / "run" / "agent.sock"),
        TUNEPLANE_STATE_DIR=str(tmp_path / "state"),
        TUNEPLANE_RUNTIME="process",
    )
    return env


def _tpnode(env, *args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "tpnode_tui", *args], env=env, capture_output=True, text=True, timeout=60, **kwargs
    )


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def test_an_agent_on_the_shipped_sample_serves_its_cards_to_a_client(node, tmp_path):
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "tpnode_tui", "--interval", "0.2", "agent", "--simulated"],
            env=node,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        sock = node["TUNEPLANE_AGENT_SOCKET"]
        until(lambda: _answers(sock) or agent.poll() is not None, "the agent to answer", BOUND_S)
        assert agent.poll() is None, log.read_text()
        done = _tpnode({**node, "TUNEPLANE_AGENT": "on"}, "status", "--json")
        assert done.returncode == 0, done.stderr
        status = json.loads(done.stdout)
        sample = json.loads(SAMPLE.read_text())
        assert status["via"] == "agent"
        assert status["probe"] == "simulated"
        assert [c["name"] for c in status["cards"]] == [c["name"] for c in sample["cards"]]
        assert [c["uuid"] for c in status["cards"]] == [c["uuid"] for c in sample["cards"]]
        assert status["free"] == list(range(len(sample["cards"])))
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(BOUND_S)


@pytest.mark.parametrize(
    "content,said",
    [
        (None, "cannot be read"),
        ('{"cards": 3}', 'must hold a "cards" list'),
        ("not json", "is not valid JSON"),
    ],
)
def test_a_simulated_node_that_cannot_be_read_is_one_line_and_exit_2(node, tmp_path, content, said):
    path = tmp_path / "node.json"
    if content is not None:
        path.write_text(content)
    done = _tpnode(node, "agent", "--simulated", str(path))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"tpnode-tui: --simulated: simulated node {path}: {said}"), line
    assert not (tmp_path / "run" / "agent.sock").exists()
