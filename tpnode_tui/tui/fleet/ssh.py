"""A node's own dashboard, over SSH, on this terminal while the fleet view waits."""

from __future__ import annotations

import subprocess
import sys
from typing import Callable

from tpnode_tui.config.ssh import SshTarget


def run_over_ssh(target: SshTarget) -> tuple[int, str]:
    """The node's own dashboard, ``tpnode-tui --host TARGET``, on this terminal
    until it is quit: its exit code and the last line it wrote on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "--host", str(target)], stderr=subprocess.PIPE, text=True, errors="replace"
    )
    said = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, said[-1] if said else ""


#: what opens a node's dashboard: the SSH target; returns (exit code, what it said last)
DashboardOpener = Callable[[SshTarget], tuple[int, str]]
