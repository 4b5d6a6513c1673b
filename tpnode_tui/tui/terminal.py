"""This terminal handed to another program while the app waits: a node's dashboard over SSH, a shell.

The child gets the terminal whole: Textual draws on standard error, so a pipe
there would leave a dashboard's screen blank while it still took keys, and a
shell needs its terminal to be one. What the child says when it cannot start
(SSH's reason, the node's refusal) is on the terminal too, and the app's next
frame would wipe it: after a failure the terminal waits for enter first.

A shell takes the terminal for its own process group and, killed (its
reservation ended under it), never gives it back, and may leave its line
editing's modes behind: the app would then be a background process on its own
terminal, stopped by its first read. So the terminal's foreground and modes
are put back as they were before the child, whatever became of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import termios
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Sequence

from textual.app import App

from tpnode_tui.model.validation import check_job_key

#: this program again, as a child: the interpreter that runs it and the package's
#: CLI. Never ``-m``, which puts the working directory first on the module path,
#: where anyone who may write in it (/tmp, a shared project) could plant a module.
THIS_PROGRAM = (
    sys.executable,
    "-c",
    "import sys; sys.path = [p for p in sys.path if p]; from tpnode_tui.cli import main; sys.exit(main())",
)


def how_it_ended(code: int) -> str:
    """How a child ended: "exit code 2", or "killed by SIGKILL" (a negative code)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def on_this_terminal(argv: Sequence[str], *, pass_fds: Sequence[int] = ()) -> int:
    """Run ``argv`` on this terminal until it ends, then take the terminal back;
    its exit code. ``pass_fds`` are handed to the child and closed here once it has them."""
    saved = _terminal_now()
    try:
        child = subprocess.Popen(list(argv), pass_fds=tuple(pass_fds))
    finally:
        for fd in pass_fds:
            os.close(fd)
    # Ctrl-C is the child's to act on (a shell's, SSH connecting); the app stays
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        _give_back(saved)


def wait_for_enter(what: str, code: int, back_to: str) -> None:
    """Keep what a child that failed said on the terminal until enter: ``what``
    names the child, ``back_to`` the app the terminal goes back to."""
    sys.stderr.write(f"{what} ended with {how_it_ended(code)}; press enter to go back to {back_to}\n")
    sys.stderr.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stdin.readline()


def suspended(app: App[Any]) -> ContextManager[None]:
    """The app's terminal handed over while the block runs; nothing to hand over when headless (tests)."""
    return contextlib.nullcontext() if app.is_headless else app.suspend()


def _terminal_now() -> Optional[tuple[int, list[Any]]]:
    """Standard input's terminal and its modes; None where it is no terminal."""
    try:
        fd = sys.stdin.fileno()
        return fd, termios.tcgetattr(fd)
    except (AttributeError, OSError, ValueError, termios.error):
        return None


def _give_back(saved: Optional[tuple[int, list[Any]]]) -> None:
    """This process's group in the terminal's foreground again, with the modes it had."""
    if saved is None:
        return
    fd, modes = saved
    # asking for the foreground from the background would stop this process (SIGTTOU)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        with contextlib.suppress(OSError, termios.error):
            if os.tcgetpgrp(fd) != os.getpgrp():
                os.tcsetpgrp(fd, os.getpgrp())
            termios.tcsetattr(fd, termios.TCSADRAIN, modes)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@dataclass(frozen=True)
class ShellEnd:
    """How a shell asked for from the dashboard ended."""

    #: the node moved the child into the reservation and it became the shell;
    #: False: it was refused (or failed) before, and said why on the terminal
    started: bool
    code: int


#: a shell on reservation RUN_ID, on this terminal
ShellOpener = Callable[[str], ShellEnd]


def shell_opener(setting_flags: Sequence[str]) -> ShellOpener:
    """The dashboard's shell key: ``tpnode-tui shell RUN_ID`` with this
    dashboard's own setting flags, so the shell asks the node this dashboard
    reads. The node moves that process into the reservation's fence and it
    becomes the login shell there, writing one byte to a pipe just before: a
    shell's own exit code says nothing of whether it started (bash exits with
    its last command's), so only a child that never started waits for enter."""

    def open_shell(run_id: str) -> ShellEnd:
        check_job_key(run_id)  # never an option to the child: it comes after "--" too
        started, told = os.pipe()
        try:
            code = on_this_terminal(
                [*THIS_PROGRAM, *setting_flags, "shell", "--started-fd", str(told), "--", run_id], pass_fds=(told,)
            )
            became_the_shell = os.read(started, 1) == b"1"  # every writer has closed by now
        finally:
            os.close(started)
        if not became_the_shell:
            wait_for_enter(f"tpnode-tui: the shell on {run_id}", code, "the dashboard")
        return ShellEnd(became_the_shell, code)

    return open_shell
