"""This terminal handed to another program while the app waits: a node's dashboard over SSH, a shell.

The child gets the terminal whole: Textual draws on standard error, so a pipe
there would leave a dashboard's screen blank while it still took keys, and a
shell needs its terminal to be one. What the child says when it cannot start
(SSH's reason, the node's refusal) is on the terminal too, and the app's next
frame would wipe it: after a failure the terminal waits for enter first.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from typing import Callable, Sequence


def on_this_terminal(argv: Sequence[str], what: str, back_to: str) -> int:
    """Run ``argv`` on this terminal until it ends; its exit code. ``what``
    names it and ``back_to`` the app in the line a failure waits on."""
    child = subprocess.Popen(list(argv))
    # Ctrl-C is the child's to act on (a shell's, SSH connecting); the app stays
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if code != 0:
        sys.stderr.write(f"{what} ended with exit code {code}; press enter to go back to {back_to}\n")
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.readline()
    return code


#: a shell on reservation RUN_ID, on this terminal; returns its exit code
ShellOpener = Callable[[str], int]


def shell_opener(cli: Sequence[str]) -> ShellOpener:
    """The dashboard's shell key: ``tpnode-tui shell RUN_ID`` with ``cli``, this
    dashboard's own command line up to the command (the interpreter, the
    package, the setting flags it was given), so the shell asks the node this
    dashboard reads. The node moves that process into the reservation's fence
    and it becomes the login shell there, as when typed in a shell."""

    def open_shell(run_id: str) -> int:
        return on_this_terminal([*cli, "shell", run_id], f"tpnode-tui: the shell on {run_id}", "the dashboard")

    return open_shell
