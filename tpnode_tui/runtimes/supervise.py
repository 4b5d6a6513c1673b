"""The supervisor a process job runs under: ``python -I -m tpnode_tui.runtimes.supervise``.

The CLI that launches a job exits at once, so nobody would ``wait()`` for the
job and its exit code would be lost. Each job runs under this small parent,
in a session of its own: it starts the command from its launch sheet
(:mod:`.launchsheet`) as the caller, holds a reservation's cards until its
expiry, ends whatever the command left running, and records the exit code in
the state file. With ``--gate FD`` the command waits for ``start``. See
docs/architecture.md, sections 'A caller's process job runs as the caller',
'A process job ends when all of it has ended' and 'The supervisor's exit
codes'.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.jobs import RunAs
from tpnode_tui.runtimes.jobprocs import JobProcesses, join_cgroup, remove_cgroup
from tpnode_tui.runtimes.launchsheet import LaunchSheet, read_sheet
from tpnode_tui.runtimes.statefile import JobRecord, StateFile

_PR_SET_PDEATHSIG = 1
_USAGE = (
    "usage: python -I -m tpnode_tui.runtimes.supervise STATE_DIR NAME --sheet FD [--gate FD] [--grace S] "
    "[--cgroup DIR] [--fence cgroup-v2|cgroup-v1] [--devices-cgroup DIR]"
)
_OPTIONS = ("--sheet", "--gate", "--grace", "--cgroup", "--fence", "--devices-cgroup")
#: the fence that is the job's own cgroup v2, whose joining is then not optional
_FENCED_BY_CGROUP = "cgroup-v2"
NOT_STARTED = 125
CANNOT_START = 126
DEFAULT_GRACE_S = 10.0
#: how often a holding supervisor reads its record's expiry before it is due
RECHECK_S = 5.0


def exit_code(returncode: int) -> int:
    """A ``Popen`` return code in the shell's terms (``-15`` becomes 143)."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass(frozen=True)
class Cgroups:
    """The cgroups a job's command joins before it runs."""

    #: its own cgroup v2, which keeps its processes together; None: it has none
    own: Optional[Path] = None
    #: True when ``own`` carries the job's device fence, so it must be joined
    own_fences: bool = False
    #: its cgroup of the v1 devices hierarchy, which fences it; None: none
    devices: Optional[Path] = None


def _join(cgroups: Cgroups, report: int, fail: Callable[[str, OSError], None]) -> None:
    """Join the job's cgroups, in the child, before anything else. A cgroup that
    only keeps processes together may fail (reported; the command runs without
    it); one that fences the job may not."""
    if cgroups.own is not None:
        try:
            join_cgroup(cgroups.own)
        except OSError as e:
            if cgroups.own_fences:
                fail(f"cannot move it into its cgroup {cgroups.own}, which fences it to its cards", e)
                raise
            os.write(report, b"cgroup\n")
    if cgroups.devices is not None:
        try:
            join_cgroup(cgroups.devices)
        except OSError as e:
            fail(f"cannot move it into its devices cgroup {cgroups.devices}, which fences it to its cards", e)
            raise


def _child_setup(parent: int, cgroups: Cgroups, run_as: Optional[RunAs], cwd: str, report: int) -> Callable[[], None]:
    """A ``preexec_fn`` that readies the child to become the command, in the
    one order that works for a caller's job started by root.

    The cgroups are joined first, then groups, gid and uid are dropped (real,
    effective and saved), then the parent-death signal is asked for (a change of
    identity clears it; hence the check of the parent pid), and last the working
    directory is entered as the caller. Python's ``user``/``group`` switch comes
    too late for the cgroups, so the switch is made here. What went wrong is
    written to ``report`` (closed at exec): ``cgroup`` when its own cgroup could
    not be joined, or ``error <reason>`` before the child gives up. See
    docs/architecture.md, section 'A caller's process job runs as the caller'.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def fail(reason: str, error: OSError) -> None:
        os.write(report, f"error {reason}: {error.strerror}\n".encode(errors="backslashreplace"))

    def preexec() -> None:
        _join(cgroups, report, fail)
        if run_as is not None:
            try:
                os.setgroups(list(run_as.groups))
                os.setresgid(run_as.gid, run_as.gid, run_as.gid)
                os.setresuid(run_as.uid, run_as.uid, run_as.uid)
            except OSError as e:
                fail(f"cannot switch to {run_as.user} (uid {run_as.uid})", e)
                raise
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(exit_code(-signal.SIGKILL))
        try:
            os.chdir(cwd)
        except OSError as e:
            who = f" as {run_as.user}" if run_as is not None else ""
            fail(f"cannot enter the working directory {cwd!r}{who}", e)
            raise

    return preexec


def _read_report(fd: int) -> list[str]:
    """Every line the child wrote before it ran the command or gave up."""
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace").splitlines()


def run(
    sheet: LaunchSheet, cgroups: Cgroups = Cgroups(), on_no_cgroup: Callable[[str], None] = lambda why: None
) -> int:
    """Run the sheet's command to its end, passing on SIGTERM and SIGINT; its exit code.

    If the command cannot be put into its own cgroup (one that does not fence
    it), ``on_no_cgroup`` is told why and the command runs without it.
    """
    command = list(sheet.command)
    child: Optional[subprocess.Popen[bytes]] = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            pending.append(signum)  # arrived before the command existed
        else:
            child.send_signal(signum)  # once it has been waited for, this does nothing

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    report_r, report_w = os.pipe()  # close-on-exec: the command never holds it
    try:
        try:
            child = subprocess.Popen(
                command,
                env=dict(sheet.env),
                preexec_fn=_child_setup(os.getpid(), cgroups, sheet.run_as, sheet.cwd, report_w),
            )
        finally:
            os.close(report_w)
            report = _read_report(report_r)
    except subprocess.SubprocessError:
        reason = next((line[6:] for line in report if line.startswith("error ")), "its set-up failed")
        print(f"tpnode-tui: cannot start {command[0]!r}: {reason}", file=sys.stderr)
        return CANNOT_START
    except OSError as e:
        print(f"tpnode-tui: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else CANNOT_START
    if "cgroup" in report:
        on_no_cgroup(f"it could not be moved into {cgroups.own}")
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
    """Say in the record that the job has no cgroup after all (its command runs without one)."""
    _update_own(state_dir, name, lambda record: replace(record, cgroup=""))


def _own_record(state_dir: Path, name: str) -> list[JobRecord]:
    """This supervisor's record as the state file reads now (none when it cannot be read, or is not ours)."""
    try:
        record = StateFile(state_dir).read().get(name)
    except RuntimeUnavailable:
        return []
    return [record] if record is not None and record.pid == os.getpid() else []


def end_hold(
    state_dir: Path, name: str, ended_by: Optional[int], grace_s: float, seen: Sequence[JobRecord] = ()
) -> int:
    """End a reservation's hold: record the end (an expiry already is, ``ended_by``
    None; a signal's code otherwise), then end what runs in its shell (see
    :mod:`.shells`) and remove the shell's cgroups. The end is recorded first,
    in the same hold of the state file's lock that reads which cgroups the shell
    has, so no shell joins after it; the record says the cards are held until
    the shell's processes have ended. If the end cannot be recorded (a state
    file that cannot be locked or read), the shell is ended all the same, from
    the record as it reads, else as the hold last read it (``seen``): a hold
    that has ended leaves nothing running on its cards. The exit code."""
    code = 0 if ended_by is None else ended_by
    shell: list[JobRecord] = []

    def ended(record: JobRecord) -> JobRecord:
        done = record if record.exit_code is not None else replace(record, exit_code=code)
        shell.append(done)
        return done

    try:
        _update_own(state_dir, name, ended)
    except RuntimeUnavailable as e:
        print(f"tpnode-tui: could not record the end of reservation {name!r}: {e}", file=sys.stderr)
        # the hold has ended all the same: its shell is ended too, from the record as
        # it reads now, else as the hold last read it
        shell[:] = _own_record(state_dir, name) or seen[-1:]
    if not shell or not (shell[0].cgroup or shell[0].devices_cgroup):
        return code
    cgroup = Path(shell[0].cgroup) if shell[0].cgroup else None
    devices = Path(shell[0].devices_cgroup) if shell[0].devices_cgroup else None
    note = end_the_rest(JobProcesses(os.getpid(), cgroup, by_session=False, devices=devices), grace_s)
    remove_cgroup(cgroup)
    _remove_devices(devices, name)
    if note:
        try:
            _update_own(
                state_dir, name, lambda r: replace(r, note="; ".join(n for n in (r.note, f"its shell: {note}") if n))
            )
        except RuntimeUnavailable as e:
            print(f"tpnode-tui: reservation {name!r}: {note}; not recorded: {e}", file=sys.stderr)
    return code


def wait_for_start(fd: int) -> bool:
    """Block until ``start`` writes to the gate (True) or the launcher is gone (False)."""
    try:
        return os.read(fd, 1) == b"g"
    finally:
        os.close(fd)


_HOLD_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _time_left(state: StateFile, name: str, seen: list[JobRecord]) -> Optional[float]:
    """Seconds until this supervisor's reservation expires; None once it has
    ended, the end recorded (or the record gone, or another job's now).

    The end is decided and recorded in one hold of the state file's lock, so an
    ``extend`` (which moves the expiry under the same lock, and only while the
    record has no exit code) lands either before it, and is seen, or after it,
    and is refused.
    """
    record = state.read().get(name)
    if record is None or record.pid != os.getpid():
        return None
    seen[:] = [record]  # where its shell's cgroups are, should the end not be recordable later
    if record.expires_at is None:
        return math.inf  # no expiry: held until stopped
    if time.time() < record.expires_at:
        return record.expires_at - time.time()
    with state.transaction() as jobs:
        record = jobs.get(name)
        if record is None or record.pid != os.getpid():
            return None
        if record.expires_at is None or time.time() < record.expires_at:
            return math.inf if record.expires_at is None else record.expires_at - time.time()
        jobs[name] = replace(record, exit_code=0)
    return None


def hold(state_dir: Path, name: str, seen: list[JobRecord], recheck_s: float = RECHECK_S) -> Optional[int]:
    """Hold a reservation's cards until its record's expiry; the exit code when
    a signal ended it first (128 + N), None when it expired (already recorded).

    The caller blocks SIGTERM and SIGINT beforehand, so one that arrives at any
    moment waits here to be taken. A state file that cannot be read keeps the
    hold: unknown is not expired.
    """
    state = StateFile(state_dir)
    while True:
        try:
            left = _time_left(state, name, seen)
        except RuntimeUnavailable as e:
            print(f"tpnode-tui: reservation {name!r} keeps holding: {e}", file=sys.stderr)
            left = recheck_s
        if left is None:
            return None
        got = signal.sigtimedwait(_HOLD_SIGNALS, min(left, recheck_s))
        if got is not None:
            return exit_code(-got.si_signo)


def _parse(args: list[str]) -> Optional[tuple[Path, str, dict[str, str]]]:
    if len(args) < 2 or len(args) % 2:
        return None
    options = dict(zip(args[2::2], args[3::2]))
    if set(options) - set(_OPTIONS) or len(options) != len(args[2:]) // 2:
        return None
    if "--sheet" not in options:
        return None
    return Path(args[0]), args[1], options


def _remove_devices(devices: Optional[Path], name: str) -> None:
    """Remove the job's v1 devices cgroup once every process of it has ended."""
    if devices is None:
        return
    try:
        if not v1.remove(devices):
            print(f"tpnode-tui: job {name!r}'s devices cgroup {devices} is still in use; not removed", file=sys.stderr)
    except CannotFence as e:
        print(f"tpnode-tui: job {name!r}: {e}", file=sys.stderr)


def main(argv: Optional[list[str]] = None) -> int:
    parsed = _parse(sys.argv[1:] if argv is None else argv)
    try:
        state_dir, name, options = parsed  # type: ignore[misc]
        sheet_fd = int(options["--sheet"])
        gate = int(options["--gate"]) if "--gate" in options else None
        grace_s = float(options.get("--grace", DEFAULT_GRACE_S))
    except (TypeError, ValueError):
        print(_USAGE, file=sys.stderr)
        return 2
    cgroup: Optional[Path] = Path(options["--cgroup"]) if "--cgroup" in options else None
    devices = Path(options["--devices-cgroup"]) if "--devices-cgroup" in options else None
    fences = options.get("--fence") == _FENCED_BY_CGROUP
    note = ""
    try:
        sheet: Optional[LaunchSheet] = read_sheet(sheet_fd)
    except (OSError, ValueError) as e:
        print(f"tpnode-tui: job {name!r} cannot be started: its launch sheet is unreadable ({e})", file=sys.stderr)
        sheet = None
    if sheet is not None and not sheet.command:
        signal.pthread_sigmask(signal.SIG_BLOCK, _HOLD_SIGNALS)
    if sheet is None:
        code = NOT_STARTED
    elif gate is not None and not wait_for_start(gate):
        print(f"tpnode-tui: job {name!r} was never started (its launcher went away)", file=sys.stderr)
        code = NOT_STARTED
    elif not sheet.command:
        seen: list[JobRecord] = []  # its record, as the hold last read it
        return end_hold(state_dir, name, hold(state_dir, name, seen), grace_s, seen)
    else:

        def no_cgroup(why: str) -> None:
            nonlocal cgroup
            print(f"tpnode-tui: job {name!r} runs without a cgroup: {why}", file=sys.stderr)
            record_no_cgroup(state_dir, name)
            remove_cgroup(cgroup)
            cgroup = None

        code = run(sheet, Cgroups(cgroup, fences, devices), no_cgroup)
        note = end_the_rest(JobProcesses(os.getpid(), cgroup, devices=devices), grace_s)
    remove_cgroup(cgroup)
    _remove_devices(devices, name)
    try:
        record_exit(state_dir, name, code, note)
    except RuntimeUnavailable as e:
        print(f"tpnode-tui: could not record exit code {code} of job {name!r}: {e}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
