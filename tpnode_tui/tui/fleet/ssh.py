"""A node's own dashboard, over SSH, on this terminal while the fleet view waits."""

from __future__ import annotations

from typing import Callable

from tpnode_tui.config.ssh import SshTarget
from tpnode_tui.tui.terminal import THIS_PROGRAM, on_this_terminal, wait_for_enter


def run_over_ssh(target: SshTarget) -> int:
    """The node's own dashboard, ``tpnode-tui --host TARGET``, on this terminal
    until it is quit; its exit code. What it says when it cannot start (SSH's
    reason, the agent's refusal) stays on the terminal until the operator
    presses enter (:func:`wait_for_enter`)."""
    code = on_this_terminal([*THIS_PROGRAM, "--host", str(target)])
    if code != 0:
        wait_for_enter(f"tpnode-tui fleet: the dashboard of {target}", code, "the fleet")
    return code


#: what opens a node's dashboard on this terminal: the SSH target; returns its exit code
DashboardOpener = Callable[[SshTarget], int]
