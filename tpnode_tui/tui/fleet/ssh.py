"""A node's own dashboard, over SSH, on this terminal while the fleet view waits."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from typing import Callable

from tpnode_tui.config.ssh import SshTarget


def run_over_ssh(target: SshTarget) -> int:
    """The node's own dashboard, ``tpnode-tui --host TARGET``, on this terminal
    until it is quit; its exit code.

    The child gets the terminal whole (Textual draws on standard error, so a
    pipe there would leave its screen blank while it still took keys). What it
    says when it cannot start (SSH's reason, the agent's refusal) is on the
    terminal too: it stays there until the operator presses enter, rather
    than being wiped by the fleet's next frame."""
    child = subprocess.Popen([sys.executable, "-m", "tpnode_tui", "--host", str(target)])
    # Ctrl-C while SSH connects is the child's to act on; the fleet stays
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if code != 0:
        sys.stderr.write(
            f"tpnode-tui fleet: the dashboard of {target} ended with exit code {code}; "
            "press enter to go back to the fleet\n"
        )
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.readline()
    return code


#: what opens a node's dashboard on this terminal: the SSH target; returns its exit code
DashboardOpener = Callable[[SshTarget], int]
