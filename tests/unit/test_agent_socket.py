"""Making room for the agent's socket: a stale one goes, a live one (flooded or not) stays."""

from __future__ import annotations

import socket

import pytest

from tpnode_tui.agent.serve import prepare_socket
from tpnode_tui.model.errors import ConfigError


def test_a_socket_nobody_answers_on_is_removed(tmp_path):
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(path))  # as an agent killed outright leaves it: bound, nobody listening
    prepare_socket(path)
    assert not path.exists()


def test_an_agent_whose_queue_is_full_is_still_an_agent(tmp_path):
    """A flooded agent's socket answers a connect EAGAIN: it is not stale, and is kept."""
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as agent:
        agent.bind(str(path))
        agent.listen(0)
        waiting = []
        while True:  # the queue filled, as a flood fills it
            one = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            one.setblocking(False)
            try:
                one.connect(str(path))
            except BlockingIOError:
                one.close()
                break
            waiting.append(one)
        try:
            with pytest.raises(ConfigError, match="another agent already answers at"):
                prepare_socket(path)
        finally:
            for one in waiting:
                one.close()
    assert path.exists()
