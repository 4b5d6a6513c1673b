"""The supervisor a process job runs under: ``python -m tpnode_tui.runtimes.supervise``.

The CLI that launches a job exits at once, so nobody would be left to
``wait()`` for the job and its exit code would be lost. Each job therefore
runs under this small parent, started in a session of its own so it outlives
the launcher. It starts the command (an argv list, never a shell), passes
SIGTERM and SIGINT on to it, waits for it, and records its exit code in the
job's record in the state file, under the state file's lock. The supervisor's
pid and start time are what the record names as the job.

A job ends when all of it has ended, as a container does. When the command
ends, whatever it left running (:mod:`.jobprocs`: its session, and its cgroup
when it has one) gets SIGTERM, and SIGKILL after the grace (``--grace``, the
launcher's stop timeout). Until nothing is left the supervisor lives, so the
job counts as running and holds its cards; only then is the exit code
recorded, and the cgroup removed. The SIGKILL, if it was needed, is noted in
the record.

Exit codes follow the shell, as Docker reports them too: the command's own
code, ``128 + N`` when signal N ended it, 127 when the command does not exist
and 126 when it cannot be executed.

With ``--gate FD`` the supervisor waits for one byte on that pipe before it
runs the command. That is the process runtime's "created" state: the record
holds the cards while the allocator checks that no other job landed on them
(see the allocator's fencing), and the command runs only once ``start``
writes the byte. If the launcher goes away first, the pipe reads end-of-file
and the command never runs (exit code 125, as Docker uses for "not started").

With ``--cgroup DIR`` the command is moved into that (empty) cgroup before it
runs. Should that fail, the command runs without it and the record says so.

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
from .jobprocs import JobProcesses, join_cgroup, remove_cgroup
from .statefile import JobRecord, StateFile

_PR_SET_PDEATHSIG = 1
_USAGE = (
    "usage: python -m tpnode_tui.runtimes.supervise STATE_DIR NAME [--gate FD] [--grace S] "
    "[--cgroup DIR] -- COMMAND [ARG...]"
)
_OPTIONS = ("--gate", "--grace", "--cgroup")
NOT_STARTED = 125
DEFAULT_GRACE_S = 10.0


def exit_code(returncode: int) -> int:
    """A ``Popen`` return code in the shell's terms (``-15`` becomes 143)."""
    return returncode if returncode >= 0 else 128 - returncode


def _child_setup(parent: int, cgroup: Optional[Path]) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child die when ``parent`` does, and puts
    it into ``cgroup``, before the command runs.

    libc is loaded here, before the fork, so the child does not have to. A
    supervisor that died before the child asked for the signal would never send
    it, hence the check of the parent pid afterwards. The child joins the cgroup
    itself, before it can start anything, so nothing of the job runs outside it.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(exit_code(-signal.SIGKILL))
        if cgroup is not None:
            join_cgroup(cgroup)

    return preexec


def run(command: list[str], cgroup: Optional[Path] = None,
        on_no_cgroup: Callable[[str], None] = lambda why: None) -> int:
    """Run ``command`` to its end, passing on SIGTERM and SIGINT; its exit code.

    If the command cannot be put into ``cgroup``, ``on_no_cgroup`` is told why
    and the command runs without it.
    """
    child: Optional[subprocess.Popen[bytes]] = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            pending.append(signum)  # arrived before the command existed
        else:
            child.send_signal(signum)  # once it has been waited for, this does nothing

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        try:
            child = subprocess.Popen(command, preexec_fn=_child_setup(os.getpid(), cgroup))
        except subprocess.SubprocessError:
            # Only joining the cgroup can fail in the set-up, and the command has not run.
            on_no_cgroup(f"it could not be moved into {cgroup}")
            child = subprocess.Popen(command, preexec_fn=_child_setup(os.getpid(), None))
    except OSError as e:
        print(f"tpnode-tui: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    for signum in pending:
        child.send_signal(signum)
    return exit_code(child.wait())


def end_the_rest(procs: JobProcesses, grace_s: float) -> str:
    """End what the command left running; how, when SIGKILL was needed ("" otherwise).

    SIGTERM first, as ``docker stop`` does, then SIGKILL to whatever is left
    after ``grace_s``, and then wait for as long as it takes: a process that
    has not ended may still be using the job's cards.
    """
    if not procs.pids():
        return ""
    procs.send(signal.SIGTERM)
    if procs.wait_gone(grace_s):
        return ""
    left = len(procs.pids())
    procs.wait_gone(float("inf"), kill=True)
    if not left:
        return ""
    what = "1 process it left running" if left == 1 else f"{left} processes it left running"
    return f"{what} did not end on SIGTERM and {'was' if left == 1 else 'were'} killed by SIGKILL after {grace_s:g} s"


def _update_own(state_dir: Path, name: str, change: Callable[[JobRecord], JobRecord]) -> None:
    """Change this supervisor's record, if the record is still ours.

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
            jobs[name] = change(record)


def record_exit(state_dir: Path, name: str, code: int, note: str = "") -> None:
    """Write ``code`` (and ``note``, after any the record has) into this supervisor's record."""

    def ended(record: JobRecord) -> JobRecord:
        notes = "; ".join(n for n in (record.note, note) if n)
        return replace(record, exit_code=code, note=notes)

    _update_own(state_dir, name, ended)


def record_no_cgroup(state_dir: Path, name: str) -> None:
    """Say in the record that the job has no cgroup after all (before its command runs)."""
    _update_own(state_dir, name, lambda record: replace(record, cgroup=""))


def wait_for_start(fd: int) -> bool:
    """Block until ``start`` writes to the gate (True) or the launcher is gone (False)."""
    try:
        return os.read(fd, 1) == b"g"
    finally:
        os.close(fd)


def _parse(args: list[str]) -> Optional[tuple[Path, str, dict[str, str], list[str]]]:
    if "--" not in args:
        return None
    split = args.index("--")
    head, command = args[:split], args[split + 1 :]
    if len(head) < 2 or len(head) % 2 or not command:
        return None
    options = dict(zip(head[2::2], head[3::2]))
    if set(options) - set(_OPTIONS) or len(options) != len(head[2:]) // 2:
        return None
    return Path(head[0]), head[1], options, command


def main(argv: Optional[list[str]] = None) -> int:
    parsed = _parse(sys.argv[1:] if argv is None else argv)
    try:
        state_dir, name, options, command = parsed  # type: ignore[misc]
        gate = int(options["--gate"]) if "--gate" in options else None
        grace_s = float(options.get("--grace", DEFAULT_GRACE_S))
    except (TypeError, ValueError):
        print(_USAGE, file=sys.stderr)
        return 2
    cgroup: Optional[Path] = Path(options["--cgroup"]) if "--cgroup" in options else None
    note = ""
    if gate is not None and not wait_for_start(gate):
        print(f"tpnode-tui: job {name!r} was never started (its launcher went away)", file=sys.stderr)
        code = NOT_STARTED
    else:

        def no_cgroup(why: str) -> None:
            nonlocal cgroup
            print(f"tpnode-tui: job {name!r} runs without a cgroup: {why}", file=sys.stderr)
            record_no_cgroup(state_dir, name)
            remove_cgroup(cgroup)
            cgroup = None

        code = run(command, cgroup, no_cgroup)
        note = end_the_rest(JobProcesses(os.getpid(), cgroup), grace_s)
    remove_cgroup(cgroup)
    try:
        record_exit(state_dir, name, code, note)
    except RuntimeUnavailable as e:
        print(f"tpnode-tui: could not record exit code {code} of job {name!r}: {e}",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
