"""The fleet's enter, for real: a node's own dashboard drawn on the operator's terminal over SSH.

bob runs ``tpnode-tui fleet`` on a pseudo-terminal, as he would in his shell;
a real agent publishes its node (with its SSH address) to a real redis-server,
and a real sshd lets bob in. Enter must hand the terminal to the node's
dashboard (drawn where bob can see it, not into a pipe), and quitting it must
give the terminal back to the fleet.
"""

from __future__ import annotations

import pytest

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.ssh import Sshd
from helpers.terminal import Terminal

pytestmark = pytest.mark.redis
NODE = "tpn-fleet-node"


@pytest.fixture
def published(accounts, redis_url):
    """A node whose agent publishes to the fleet with its SSH address, and an sshd bob may log in through."""
    settings = {
        "TUNEPLANE_FLEET_URL": redis_url,
        "TUNEPLANE_NODE_NAME": NODE,
        "TUNEPLANE_SSH_ADDRESS": NODE,
        "TUNEPLANE_FLEET_PUBLISH_S": "1",
    }
    with SharedNode.started(accounts, "tpn-fleet-enter-", **settings) as node:
        sshd = Sshd(node.root, node.socket)
        sshd.start()
        try:
            sshd.let_in(accounts.bob, NODE)
            yield node, redis_url, sshd
        finally:
            sshd.end_logins(accounts.bob)
            sshd.stop()


def test_enter_draws_the_node_s_dashboard_on_the_terminal_and_q_or_a_failure_comes_back_to_the_fleet(
    published, accounts
):
    _node, redis_url, sshd = published
    bob = accounts.bob
    env = bob.env(TUNEPLANE_FLEET_URL=redis_url, TUNEPLANE_AGENT_SOCKET="/nonexistent/a.sock", TERM="xterm-256color")
    term = Terminal(bob, runnable().argv("fleet"), env)
    try:
        term.shows("1 node: 1 up", what="the fleet to show the node up")
        term.shows("Dashboard", what="the footer to offer enter")
        before = term.mark()
        term.press("\r")
        # the node's own dashboard, drawn here: its header names bob and where it reads
        term.shows(f"{bob.name} │ agent on {NODE} over ssh", before, "the node's dashboard on the terminal")
        back = term.mark()
        term.press("q")
        term.shows("enter: a node's dashboard · g: its cards", back, "the fleet to draw itself again")
        assert "press enter to go back" not in term.text(back)  # quit is not a failure
        # the node cannot be reached now: what SSH said stays on the terminal until enter
        sshd.end_logins(bob)
        sshd.stop()
        failed = term.mark()
        term.press("\r")
        term.shows("press enter to go back to the fleet", failed, "the failure to wait for enter")
        assert f"tpnode-tui: cannot reach {NODE} over ssh" in term.text(failed), term.text(failed)[-2000:]
        again = term.mark()
        term.press("\r")
        term.shows("enter: a node's dashboard · g: its cards", again, "the fleet to draw itself again after it")
        term.shows("exit code 1, for the reason it gave", again, "the fleet to say the dashboard failed")
        term.press("q")
        assert term.proc.wait(30) == 0
    finally:
        term.close()
