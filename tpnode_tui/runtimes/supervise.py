"""The supervisor a process job runs under: ``python -m tpnode_tui.runtimes.supervise``.

The CLI that launches a job exits at once, so nobody would be left to
``wait()`` for the job and its exit code would be lost. Each job therefore
runs under this small parent, started in a session of its own so it outlives
the launcher. It starts the command (an argv list, never a shell), passes
SIGTERM and SIGINT on to it, waits for it, and records its exit code in the
job's record in the state file, under the state file's lock. The supervisor's
pid and start time are what the record names as the job.

Exit codes follow the shell, as Docker reports them too: the command's own
code, ``128 + N`` when signal N ended it, 127 when the command does not exist
and 126 when it cannot be executed.

With ``--gate FD`` the supervisor waits for one byte on that pipe before it
runs the command. That is the process runtime's "created" state: the record
holds the cards while the allocator checks that no other job landed on them
(see the allocator's fencing), and the command runs only once ``start``
writes the byte. If the launcher goes away first, the pipe reads end-of-file
and the command never runs (exit code 125, as Docker uses for "not started").

The command gets ``PR_SET_PDEATHSIG``: if the supervisor is killed outright
(``kill -9``), the record can only say "exited, code unknown", and a command
left running then would hold its cards while the platform counts them free.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from ..model import RuntimeUnavailable
from .statefile import StateFile

_PR_SET_PDEATHSIG = 1
_USAGE = "usage: python -m tpnode_tui.runtimes.supervise STATE_DIR NAME [--gate FD] -- COMMAND [ARG...]"
NOT_STARTED = 125


def exit_code(returncode: int) -> int:
    """A ``Popen`` return code in the shell's terms (``-15`` becomes 143)."""
    return returncode if returncode >= 0 else 128 - returncode


def _die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child die when ``parent`` does.

    libc is loaded here, before the fork, so the child does not have to. A
    supervisor that died before the child asked for the signal would never send
    it, hence the check of the parent pid afterwards.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(exit_code(-signal.SIGKILL))

    return preexec


def run(command: list[str]) -> int:
    """Run ``command`` to its end, passing on SIGTERM and SIGINT; its exit code."""
    child: Optional[subprocess.Popen[bytes]] = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            pending.append(signum)  # arrived before the command existed
        else:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        child = subprocess.Popen(command, preexec_fn=_die_with(os.getpid()))
    except OSError as e:
        print(f"tpnode-tui: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    for signum in pending:
        child.send_signal(signum)
    return exit_code(child.wait())


def record_exit(state_dir: Path, name: str, code: int) -> None:
    """Write ``code`` into this supervisor's record, if the record is still ours.

    The record may be gone (reclaimed) or, in principle, belong to a later job
    of the same name; only the one naming this pid is changed. A state file
    that was deleted meanwhile is not brought back for it.
    """
    state = StateFile(state_dir)
    if not state.path.exists():
        return
    with state.transaction() as jobs:
        record = jobs.get(name)
        if record is not None and record.pid == os.getpid():
            jobs[name] = replace(record, exit_code=code)


def wait_for_start(fd: int) -> bool:
    """Block until ``start`` writes to the gate (True) or the launcher is gone (False)."""
    try:
        return os.read(fd, 1) == b"g"
    finally:
        os.close(fd)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    gate = None
    if len(args) >= 4 and args[2] == "--gate" and args[3].isdigit():
        gate = int(args[3])
        args = args[:2] + args[4:]
    if len(args) < 4 or args[2] != "--":
        print(_USAGE, file=sys.stderr)
        return 2
    state_dir, name, command = Path(args[0]), args[1], args[3:]
    if gate is not None and not wait_for_start(gate):
        print(f"tpnode-tui: job {name!r} was never started (its launcher went away)", file=sys.stderr)
        code = NOT_STARTED
    else:
        code = run(command)
    try:
        record_exit(state_dir, name, code)
    except RuntimeUnavailable as e:
        print(f"tpnode-tui: could not record exit code {code} of job {name!r}: {e}",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
