"""The process runtime: jobs are local processes, for nodes without Docker.

What the platform knows about its processes lives in the state file
(:mod:`.statefile`) and nowhere else; every call reads it afresh, so a
restarted CLI or dashboard sees the same jobs. Each job runs under a
supervisor (:mod:`.supervise`) that records its exit code, because the
launcher is long gone when the job ends.

A record counts as running only while its supervisor's pid exists *and*
that process started when the record says. A pid is reused once its process
is gone; taking whatever now holds the number for the job would keep its
cards held for ever, and stopping the job would signal a stranger. The
supervisor outlives its command until every process of the job has ended
(:mod:`.jobprocs`), so a job holds its cards for as long as anything it
started runs. A supervisor killed outright records nothing; its job then
counts as running for as long as any of its processes is left.

A caller's job (``spec.run_as``, set by the node's agent) runs as the caller:
their uid, gid and groups, their environment and working directory, checked
as them before any card is held. Its supervisor stays the launcher's (it
writes the state file) and never sees the caller's environment: it starts
clean, under ``python -I``, and gets the launch on a sheet (:mod:`.launchsheet`).

Logs (``state_dir/logs/<name>.log``) belong to the account the command runs
as, readable by it alone; the state dir and the logs dir let everyone through
to their own log but list nothing. A log goes with its record (``reclaim``,
or the agent removing an account's exited jobs beyond its limit), so logs are
bounded as the records are. A log an earlier version left behind is appended
to by a later job with the same name, unless it belongs to another account:
then it is moved aside (it stays theirs) and the new job starts a log of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.fence import ProcFiles
from tpnode_tui.host.rerun import CLEAN_ENV, rerun_argv
from tpnode_tui.model.errors import BadRequest, ConfigError, Conflict, JobNotFound, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, JobOutput, JobSpec, JobState, RunAs, ShellEntry, visible_devices
from tpnode_tui.model.validation import check_run_id
from tpnode_tui.runtimes import jobfence, shells
from tpnode_tui.runtimes.base import check_cards, check_kind, check_slices, hold_seconds
from tpnode_tui.runtimes.jobfence import JobFence
from tpnode_tui.runtimes.jobprocs import (
    POLL_S,
    JobProcesses,
    ProcessStat,
    cgroup_parent,
    make_cgroup,
    process_stat,
    remove_cgroup,
)
from tpnode_tui.runtimes.launchsheet import LaunchSheet, write_sheet
from tpnode_tui.runtimes.runnable import check_runnable
from tpnode_tui.runtimes.statefile import DEFAULT_LOCK_TIMEOUT_S, JobRecord, StateFile
from tpnode_tui.runtimes.waiting import collect
from tpnode_tui.text.printable import shown
from tpnode_tui.text.refusals import not_a_reservation

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_STOP_POLL_S = 0.05
#: The supervisor's whole environment. It runs as the launcher (root, in the
#: node's agent), so nothing a caller sent may shape how it starts.
SUPERVISOR_ENV = CLEAN_ENV
#: The PATH of a command run as another account that sent no environment: the
#: launcher's own environment (root's, the agent's settings) is never handed on.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def boot_id(path: Path = _BOOT_ID) -> str:
    """This boot of the machine (``path``: where the kernel tells it). Pids and
    start ticks only mean something within one, and a drain for a reboot lasts
    until it changes."""
    try:
        return path.read_text().strip()
    except OSError as e:
        raise RuntimeUnavailable(
            f"cannot read {path} ({e.strerror}): the process runtime needs Linux /proc "
            "to tell its jobs from other processes"
        ) from None


@functools.lru_cache(maxsize=1)
def pid_namespace() -> str:
    """This process's PID namespace, e.g. "pid:[4026531836]"; "" when unreadable."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _cgroup(record: JobRecord) -> Optional[Path]:
    return Path(record.cgroup) if record.cgroup else None


def _devices(record: JobRecord) -> Optional[Path]:
    return Path(record.devices_cgroup) if record.devices_cgroup else None


#: what a reservation says of its fence when a shell on it could not be fenced
SHELL_UNFENCED = "its shell cannot be fenced: "
#: what a record made before jobs were fenced says about its fence
NOT_RECORDED = "started by a tpnode-tui that did not fence jobs"


def _device_fence(record: JobRecord) -> DeviceFence:
    """Whether the job is fenced, as the launcher recorded when it fenced it, before its command ran.

    The record, not the kernel: the launcher writes it in the same hold of the
    state file's lock as the job itself, so it is never missing or stale while
    the job runs, and every reader of the state file can read it; asking the
    kernel (``bpf.attached_programs``) takes CAP_NET_ADMIN, and the job's
    cgroup is gone once the job has ended. A fencing cgroup its command could
    not join keeps the command from running at all, so the record never
    claims a fence the job is not in.
    """
    if record.fence_mechanism:
        return DeviceFence.by(record.fence_mechanism)
    return DeviceFence.missing(record.fence_problem or NOT_RECORDED)


def _remove_devices(record: JobRecord) -> None:
    """Remove the job's v1 devices cgroup, left behind if its supervisor was killed."""
    devices = _devices(record)
    if devices is not None:
        try:
            v1.remove(devices)
        except CannotFence:
            pass  # not removable now; a later remove or reclaim tries again


def _look(record: JobRecord) -> tuple[Optional[ProcessStat], str]:
    """The process now holding the supervisor's pid, or why it cannot be looked at."""
    here = pid_namespace()
    if record.pid_ns and here and record.pid_ns != here:
        # Its pid means nothing here (a container beside the host, or the other
        # way round): until its supervisor records an exit code, it holds its cards.
        return None, (
            f"started in another PID namespace ({record.pid_ns}), so pid {record.pid} "
            "cannot be looked at from here; counted as running until it records its exit"
        )
    try:
        return process_stat(record.pid), ""
    except PermissionError:
        return None, (f"cannot look at pid {record.pid} in /proc (permission denied), so it is counted as running")


def _is_supervisor(record: JobRecord, now: Optional[ProcessStat]) -> bool:
    return now is not None and now.ticks == record.pid_start_ticks and not now.ended


def _left_behind(record: JobRecord, now: Optional[ProcessStat]) -> JobProcesses:
    """The processes of a job whose supervisor is gone.

    A session's id is not handed to a new process while any member lives, so
    if another process holds the supervisor's number now, the job's session
    is empty and only its cgroup is looked at.
    """
    mine = now is None or now.ticks == record.pid_start_ticks
    return JobProcesses(record.pid, _cgroup(record), by_session=mine, devices=_devices(record))


def end_abandoned(record: JobRecord, timeout_s: float) -> bool:
    """End a job whose launcher is gone for good (a killed demo's node), and remove its cgroups.

    Killing its supervisor's process group is not enough: a process that left
    the group (setsid) runs on, and the supervisor, killed, removes no cgroup.
    So whatever is left in its session or cgroups is SIGKILLed until none is,
    at most ``timeout_s``; False when something still runs then (its cgroups stay).
    """
    try:
        os.killpg(record.pid, signal.SIGKILL)  # the supervisor leads its job's group
    except OSError:
        pass
    try:
        now = process_stat(record.pid)
    except PermissionError:
        return False
    procs = _left_behind(record, now)
    if not procs.wait_gone(timeout_s, kill=True):
        return False
    remove_cgroup(_cgroup(record))
    _remove_devices(record)
    return True


def _processes(pids: Sequence[int]) -> str:
    listed = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    return f"1 process (pid {listed})" if len(pids) == 1 else f"{len(pids)} processes (pids {listed})"


def _shell_left(record: JobRecord) -> list[int]:
    """The processes still running in a reservation's shell cgroup (``tpnode-tui shell``)."""
    if record.kind != "reservation" or not (record.cgroup or record.devices_cgroup):
        return []
    return JobProcesses(record.pid, _cgroup(record), by_session=False, devices=_devices(record)).pids()


def _hold_ended(record: JobRecord) -> tuple[str, tuple[str, ...]]:
    """A record whose end is recorded: exited, unless it is a reservation whose
    shell still runs. Its supervisor records the end first, so no shell joins
    after it, and then ends what runs in the shell; until that has ended the
    cards are in use, and held."""
    left = _shell_left(record)
    if not left:
        return "exited", ()
    return "running", (
        f"its hold has ended, but {_processes(left)} still {'runs' if len(left) == 1 else 'run'} in its "
        "shell; they are being ended, and its cards stay held until they have",
    )


def liveness(record: JobRecord, current_boot: str) -> tuple[str, tuple[str, ...]]:
    """Whether ``record`` is "running" or "exited", with any doubt in plain words.

    A zombie has ended; it only waits for its parent to collect it. When the
    process cannot be looked at, the job counts as running: unknown is not
    ended, and an ended job's cards would be handed out. A supervisor that
    was killed outright leaves the job running while anything it started runs.
    """
    if record.boot_id != current_boot:
        return "exited", ()
    if record.exit_code is not None:
        return _hold_ended(record)
    alive = "created" if record.gated else "running"
    now, unseen = _look(record)
    if unseen:
        return alive, (unseen,)
    if _is_supervisor(record, now):
        return alive, ()
    left = _left_behind(record, now).pids()
    if left:
        return alive, (
            f"its supervisor (pid {record.pid}) was killed, but {_processes(left)} it started "
            f"still {'runs' if len(left) == 1 else 'run'}; stop ends {'it' if len(left) == 1 else 'them'}",
        )
    return "exited", ()


def _job_state(record: JobRecord, current_boot: str) -> JobState:
    status, problems = liveness(record, current_boot)
    return JobState(
        name=record.name,
        run_id=record.run_id,
        gpus=record.gpus,
        status=status,
        kind=record.kind,
        owner=record.owner,
        command=record.command,
        started_at=record.started_at,
        expires_at=record.expires_at,
        exit_code=record.exit_code,
        pid=record.pid,
        lease_token=record.lease_token,
        problems=problems,
        uid=record.uid,
        note=record.note,
        # where its processes are found (belonging): the v2 cgroup, else the v1 devices one
        cgroup=record.cgroup or record.devices_cgroup or None,
        slices=record.slices,
        device_fence=_device_fence(record),
        shell_processes=len(_shell_left(record)) if record.boot_id == current_boot else 0,
        log=record.log,
    )


def _check_argv(argv: Sequence[str]) -> None:
    """Refuse an argv no program can receive."""
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise BadRequest(f"argument {i} of the command is {arg!r}, not a string")
        if "\0" in arg:
            raise BadRequest(f"argument {i} of the command contains a NUL byte, which no program can receive")
    if not argv[0]:
        raise BadRequest("the command's program name is empty")


def _environment(spec: JobSpec, gpus: Sequence[int]) -> dict[str, str]:
    """The command's whole environment: the caller's as sent (else, for the
    launcher's own jobs, the launcher's), their account's HOME, USER and
    LOGNAME, and the cards, or the MIG slices by uuid (which is how CUDA is
    pointed at a MIG device: an index would name the whole card)."""
    if spec.env is not None:
        env: dict[str, str] = {}
        for pair in spec.env:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair)):
                raise BadRequest(f"environment entry {pair!r} is not a name and a value")
            key, value = pair
            if not key or "=" in key or "\0" in key:
                raise BadRequest(
                    f"environment variable name {key[:60]!r} is not valid (it must be non-empty, without '=' or NUL)"
                )
            if "\0" in value:
                raise BadRequest(f"environment variable {key[:60]} contains a NUL byte, which no program can receive")
            env[key] = value
    elif spec.run_as is not None:
        env = {"PATH": DEFAULT_PATH}
    else:
        env = dict(os.environ)
    if spec.run_as is not None:
        env.update(HOME=spec.run_as.home, USER=spec.run_as.user, LOGNAME=spec.run_as.user)
    # Python writes to a file in blocks: a job stopped (or killed) before its
    # block filled would lose what it printed. Unbuffered, each print is in the log.
    env.setdefault("PYTHONUNBUFFERED", "1")
    # the same variables `tpnode-tui env` prints for this job
    env.update(visible_devices(gpus, spec.slices))
    return env


def _inside_the_fence(sheet: LaunchSheet, gpus: Sequence[int]) -> LaunchSheet:
    """The sheet of a job fenced to its cards: ``CUDA_VISIBLE_DEVICES`` numbers them
    from 0 (see :func:`~tpnode_tui.model.jobs.visible_devices`)."""
    if not gpus:
        return sheet
    env = dict(sheet.env)
    env["CUDA_VISIBLE_DEVICES"] = visible_devices(gpus, fenced=True)["CUDA_VISIBLE_DEVICES"]
    return replace(sheet, env=tuple(env.items()))


def _working_dir(spec: JobSpec) -> str:
    """Where the command starts: the caller's directory as sent, else the home
    of the account it runs as, else (the launcher's own jobs) the launcher's."""
    if spec.cwd is not None:
        if not isinstance(spec.cwd, str) or not spec.cwd.startswith("/") or "\0" in spec.cwd:
            raise BadRequest(f"working directory {str(spec.cwd)[:200]!r} is not an absolute path")
        return spec.cwd
    if spec.run_as is not None:
        return spec.run_as.home
    try:
        return os.getcwd()
    except OSError:
        return "/"


def _let_through(directory: Path) -> None:
    """Let every account pass through ``directory`` (not list it): a job's log
    under it belongs to the job's account, who must be able to open it."""
    mode = stat.S_IMODE(os.stat(directory).st_mode)
    if mode & 0o011 != 0o011:
        os.chmod(directory, mode | 0o011)


def _open_log(log: Path, run_as: Optional[RunAs]) -> int:
    """The job's log, opened for appending, belonging to the account the command
    runs as and readable by it alone.

    A log an earlier job of the same name left, that belongs to another
    account, is moved aside first (it stays theirs): appending to it would
    hand its contents to the new owner.
    """
    uid = run_as.uid if run_as is not None else os.geteuid()
    try:
        old = os.lstat(log)
    except FileNotFoundError:
        old = None
    if old is not None and old.st_uid != uid:
        os.rename(log, log.with_name(f"{log.name}.uid{old.st_uid}.{old.st_mtime_ns}"))
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if run_as is not None:
            os.fchown(fd, run_as.uid, run_as.gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _offset(after: Optional[str]) -> int:
    """Where in a log file a page starts: a byte offset, as the last page said it."""
    if after is None:
        return 0
    if not after.isascii() or not after.isdigit() or len(after) > 18:
        raise BadRequest(f"{shown(after, 30)} is not a place in a job's output: give back what the last page said")
    return int(after)


def whole_characters(data: bytes, at_end: bool) -> bytes:
    """``data`` without a UTF-8 character cut short at its end, which the next
    page then starts with; all of it ``at_end``, when nothing follows to complete it."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # the character's first byte: it has 2, 3 or 4
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= length or at_end else data[:-back]
    return data


#: the note a job's record gets when it is stopped (tpnode-tui stop, the dashboard,
#: an idle reservation given back): how it ended, where 143 would say only "SIGTERM"
STOPPED = "stopped"


class ProcessRuntime:
    """Jobs as local processes, recorded in ``state_dir/jobs.json``."""

    name = "process"

    def __init__(
        self,
        state_dir: Path,
        *,
        stop_timeout_s: float = 10.0,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        cgroups: bool = True,
        fence_policy: str = jobfence.AUTO,
        fence_files: Optional[ProcFiles] = None,
    ):
        self.state = StateFile(Path(state_dir), lock_timeout_s=lock_timeout_s)
        #: TUNEPLANE_FENCE: fence each job to its cards' device files where the
        #: node can ("auto"), refuse one that cannot be ("required"), or never ("off")
        self.fence_policy = fence_policy
        #: where the driver's and the kernel's files are read for the fence
        self.fence_files = fence_files or ProcFiles()
        self._node_fence: Optional[DeviceFence] = None
        #: the grace between SIGTERM and SIGKILL, for ``stop`` and for what a
        #: job's command leaves running when it ends
        self.stop_timeout_s = stop_timeout_s
        #: give each job a cgroup of its own where the node allows it (False:
        #: never, so a job's processes are only those in its session)
        self.cgroups = cgroups
        #: job name -> write end of its supervisor's gate, for jobs created here and not started
        self._gates: dict[str, int] = {}

    def describe(self) -> str:
        return f"processes recorded in {self.state.path}"

    def output_of(self, job: JobState) -> str:
        return str(self.state.dir / "logs" / f"{job.name}.log")

    def node_fence(self) -> DeviceFence:
        """Whether this runtime fences the jobs it starts on this node: found once,
        the first time it is asked, by fencing a throwaway cgroup."""
        if self._node_fence is None:
            parent, why = cgroup_parent() if self.cgroups else (None, "this runtime gives jobs no cgroup")
            self._node_fence = jobfence.node_fence(self.fence_policy, parent, why, self.fence_files)
        return self._node_fence

    # ------------------------------------------------------------- reading

    async def ps(self) -> list[JobState]:
        return await asyncio.to_thread(self._ps)

    def _ps(self) -> list[JobState]:
        records = self.state.read()
        current_boot = boot_id()
        states = [_job_state(r, current_boot) for r in records.values()]
        return sorted(states, key=lambda s: (s.started_at or 0.0, s.name))

    def _one(self, name: str) -> JobState:
        return _job_state(self._record(name), boot_id())

    # ------------------------------------------------------------ creating

    async def create(self, spec: JobSpec, gpus: list[int]) -> JobState:
        """Spawn the job's supervisor, gated, and record it; the record is written
        before this returns and holds the cards ("created").

        The command itself runs only at ``start``: until then the supervisor
        waits on a pipe, so the allocator can withdraw a job that met another
        on its cards before anything ran. The supervisor is spawned under the
        state file's lock and recorded in the same hold, so no reader can see a
        job without a record; if recording fails, the job is killed. Once
        recorded, the supervisor is collected by the event loop when it ends
        (:mod:`.waiting`), so a long-lived agent never fills with zombies, nor
        keeps a thread per job; the job's truth stays in the state file.
        """
        job, supervisor = await asyncio.to_thread(self._create, spec, list(gpus))
        collect(supervisor)
        return job

    async def check(self, spec: JobSpec) -> None:
        """Refuse what cannot run, before the allocation lock: the spec's rules,
        then the command and its directory as the account it runs as would
        find them (:mod:`.runnable`). Only here: creation, under the lock,
        runs nothing of the caller's, and a command that stopped being
        runnable since fails as its job's first step."""
        sheet = self._sheet(spec, ())
        if sheet.command:
            await check_runnable(sheet.command, dict(sheet.env).get("PATH", os.defpath), sheet.cwd, sheet.run_as)

    def _sheet(self, spec: JobSpec, gpus: Sequence[int]) -> LaunchSheet:
        """What the supervisor is to run for ``spec`` on ``gpus``; BadRequest or
        Conflict when the spec breaks a rule. Runs nothing."""
        check_kind(spec)
        if spec.image:
            raise BadRequest(
                f"job {spec.run_id!r} names image {spec.image!r}, but the process runtime runs "
                "commands on this machine, not images; use TUNEPLANE_RUNTIME=docker for images"
            )
        if spec.kind == "reservation":
            hold_seconds(spec)
            # No command: the supervisor holds the cards itself, until the
            # expiry its record holds, however often that moves.
            return LaunchSheet(command=(), env=(), cwd="/")
        if not spec.command:
            raise BadRequest(
                f"job {spec.run_id!r} has no command: the process runtime runs a command (an argv list), not an image"
            )
        argv = tuple(spec.command)
        _check_argv(argv)
        if spec.run_as is not None and os.geteuid() != 0:
            raise Conflict(
                f"this node's launcher runs as uid {os.geteuid()}, not root, so it cannot run "
                f"a command as {spec.run_as.user}; run the node's agent as root, or launch "
                "from that account"
            )
        env = _environment(spec, gpus)
        return LaunchSheet(command=argv, env=tuple(env.items()), cwd=_working_dir(spec), run_as=spec.run_as)

    def _create(self, spec: JobSpec, gpus: list[int]) -> tuple[JobState, subprocess.Popen[bytes]]:
        name = check_run_id(spec.run_id)
        check_cards(gpus)
        check_slices(gpus, spec.slices)
        sheet = self._sheet(spec, gpus)
        logs = self.state.dir / "logs"
        log = logs / f"{name}.log"
        current_boot = boot_id()
        proc: Optional[subprocess.Popen[bytes]] = None
        cgroup: Optional[Path] = None
        made = JobFence(DeviceFence())
        try:
            with self.state.transaction() as jobs:
                if name in jobs:
                    raise Conflict(
                        f"a job named {name!r} is already recorded, so run id {name!r} is "
                        "taken; use another run id or reclaim the old job"
                    )
                # A reservation runs nothing, so it has no processes to keep together.
                cgroup = make_cgroup(name) if self.cgroups and sheet.command else None
                made = jobfence.fence_job(
                    self.fence_policy,
                    spec.granted,
                    name=name,
                    cgroup=cgroup,
                    runs_command=bool(sheet.command),
                    files=self.fence_files,
                )
                jobfence.refuse_unfenced(self.fence_policy, name, made)
                if made.fence.fenced:
                    sheet = _inside_the_fence(sheet, gpus)
                proc, gate = self._spawn(name, sheet, logs, log, cgroup, made)
                started = process_stat(proc.pid)
                if started is None:
                    raise RuntimeUnavailable(f"job {name!r} vanished as it was started")
                record = JobRecord(
                    name=name,
                    run_id=spec.run_id,
                    gpus=tuple(gpus),
                    kind=spec.kind,
                    owner=spec.owner,
                    command=sheet.command,
                    started_at=time.time(),
                    expires_at=spec.expires_at,
                    pid=proc.pid,
                    pid_start_ticks=started.ticks,
                    boot_id=current_boot,
                    log=str(log),
                    lease_token=spec.lease_token,
                    gated=True,
                    pid_ns=pid_namespace(),
                    cgroup=str(cgroup or ""),
                    uid=spec.uid,
                    slices=tuple(spec.slices),
                    granted=spec.granted,
                    fence_mechanism=made.fence.mechanism,
                    fence_problem=made.fence.problem,
                    devices_cgroup=str(made.v1_cgroup or ""),
                )
                jobs[name] = record
        except BaseException:
            if proc is not None:
                os.close(gate)
                _kill_group(proc.pid)
                proc.wait()
            remove_cgroup(cgroup)
            jobfence.undo(made)
            raise
        self._gates[name] = gate
        return _job_state(record, current_boot), proc

    def _spawn(
        self,
        name: str,
        sheet: LaunchSheet,
        logs: Path,
        log: Path,
        cgroup: Optional[Path],
        made: JobFence,
    ) -> tuple[subprocess.Popen[bytes], int]:
        """The supervisor and the write end of its gate (non-inheritable, so no
        other child of this process can keep the gate open). Where the job is
        fenced, the supervisor is told which cgroup fences it: its command joins
        that one or does not run.

        The supervisor gets a clean environment, ``python -I`` (no PYTHON*
        variables, no user site, not even the working directory on its path)
        with only this package's own directory added, and "/" as its
        directory; the job's environment, directory and account reach it only
        on the launch sheet.
        """
        try:
            logs.mkdir(mode=0o700, exist_ok=True)
            if sheet.run_as is not None:  # its account must reach its log, and only that
                _let_through(self.state.dir)
                _let_through(logs)
            log_fd = _open_log(log, sheet.run_as)
        except OSError as e:
            raise RuntimeUnavailable(f"cannot open the log {log}: {e.strerror}") from None
        gate_r, gate_w = os.pipe()
        sheet_fd = -1
        # A reservation's supervisor takes SIGTERM as "stop holding" and records
        # it, but only once it runs: blocked from the start (a child inherits the
        # mask of the thread that spawns it), one sent while it starts waits.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, set() if sheet.command else {signal.SIGTERM, signal.SIGINT})
        try:
            sheet_fd = write_sheet(sheet)
            proc = subprocess.Popen(
                rerun_argv(
                    "tpnode_tui.runtimes.supervise",
                    str(self.state.dir),
                    name,
                    "--sheet",
                    str(sheet_fd),
                    "--gate",
                    str(gate_r),
                    "--grace",
                    str(float(self.stop_timeout_s)),
                    *(("--cgroup", str(cgroup)) if cgroup else ()),
                    *(("--fence", made.fence.mechanism) if made.fence.fenced else ()),
                    *(("--devices-cgroup", str(made.v1_cgroup)) if made.v1_cgroup else ()),
                ),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                env=SUPERVISOR_ENV,
                cwd="/",
                start_new_session=True,
                pass_fds=(gate_r, sheet_fd),
            )
        except OSError as e:
            os.close(gate_w)
            raise RuntimeUnavailable(
                f"cannot start the supervisor for job {name!r} ({sys.executable}): {e.strerror}"
            ) from None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(log_fd)
            os.close(gate_r)
            if sheet_fd >= 0:
                os.close(sheet_fd)
        return proc, gate_w

    async def start(self, name: str) -> JobState:
        """Open the gate of a job created by this runtime, so its command runs.

        A job created by another process (whose gate is not here) is only
        reported: its own launcher starts it, or its supervisor ends when that
        launcher is gone.
        """
        return await asyncio.to_thread(self._start, name)

    def _start(self, name: str) -> JobState:
        gate = self._gates.pop(name, None)
        if gate is not None:
            try:
                os.write(gate, b"g")
            except BrokenPipeError:
                pass  # the supervisor is gone; the record will say it exited
            finally:
                os.close(gate)
            with self.state.transaction() as jobs:
                if name in jobs and jobs[name].gated:
                    jobs[name] = replace(jobs[name], gated=False)
        return self._one(name)

    async def run(self, spec: JobSpec, gpus: list[int]) -> JobState:
        return await self.start((await self.create(spec, gpus)).name)

    # ------------------------------------------------------------ extending

    async def extend(self, name: str, expires_at: float) -> JobState:
        """Move a live reservation's expiry in its record.

        The record is the truth: the supervisor holding the reservation reads
        its expiry from there when the old one comes (and every few seconds),
        and decides that it has expired under the state file's lock, recording
        the end in the same hold. This changes the expiry under that lock too,
        only while no end is recorded, so the reservation never stops holding
        its cards in between.
        """
        return await asyncio.to_thread(self._extend, name, expires_at)

    def _extend(self, name: str, expires_at: float) -> JobState:
        if not (isinstance(expires_at, (int, float)) and math.isfinite(expires_at) and expires_at > time.time()):
            raise BadRequest(f"cannot extend {name!r} to {expires_at!r}: not a time to come")
        current_boot = boot_id()
        with self.state.transaction() as jobs:
            record = jobs.get(name)
            if record is None:
                raise JobNotFound(f"no job named {name!r} in {self.state.path}")
            if record.kind != "reservation":
                raise Conflict(f"{name!r} is a job, not a reservation: it ends when its command does")
            if record.command:
                raise Conflict(
                    f"reservation {name!r} was made by an older tpnode-tui, whose hold ends at "
                    "its first expiry whatever the record says; reserve again when it ends"
                )
            if record.exit_code is not None or liveness(record, current_boot)[0] == "exited":
                raise Conflict(f"reservation {name!r} has ended; reserve the cards again")
            record = jobs[name] = replace(record, expires_at=float(expires_at))
        return _job_state(record, current_boot)

    # --------------------------------------------------------------- shells

    async def shell(
        self, name: str, pid: int, uid: int, start_ticks: int, may: Callable[[JobState], None]
    ) -> ShellEntry:
        """Move process ``pid`` (the caller's own, of ``uid``, as the kernel named
        it; started at ``start_ticks``, as the caller says) into live reservation
        ``name``'s shell cgroup, fenced to its cards as the node's policy says
        (:mod:`.shells`); the exports its shell runs with.

        ``may`` refuses (raises) when the caller may not open a shell on the
        reservation as the record reads now, inside the state file's lock: a run
        id checked on an earlier reading may have ended and been reserved again,
        by someone else, before the move."""
        return await asyncio.to_thread(self._shell, name, pid, uid, start_ticks, may)

    def _shell(self, name: str, pid: int, uid: int, start_ticks: int, may: Callable[[JobState], None]) -> ShellEntry:
        current_boot = boot_id()
        with self.state.transaction() as jobs:
            record = jobs.get(name)
            if record is None:
                raise JobNotFound(f"no job named {name!r} in {self.state.path}")
            if record.kind != "reservation" or record.command:
                raise Conflict(not_a_reservation(name))
            if record.exit_code is not None or liveness(record, current_boot)[0] == "exited":
                raise Conflict(f"reservation {name!r} has ended; reserve the cards again")
            may(_job_state(record, current_boot))
            record, made, fence = self._shell_cgroups(record)
            jobs[name] = record  # written only if the move succeeds: the transaction drops it on an error
            try:
                try:
                    shells.move(pid, uid, start_ticks, _cgroup(record), _devices(record))
                except CannotFence as e:
                    raise RuntimeUnavailable(f"the shell of reservation {name!r} cannot be fenced: {e}") from None
            except BaseException:
                if made:  # nothing joined them
                    remove_cgroup(_cgroup(record))
                    _remove_devices(record)
                raise
        if not fence.fenced:  # the caller is told why, not what the reservation says of it
            fence = DeviceFence.missing(fence.problem.removeprefix(SHELL_UNFENCED))
        return ShellEntry(
            run_id=record.run_id,
            env=tuple(visible_devices(record.gpus, record.slices, fenced=fence.fenced).items()),
            device_fence=fence,
            cgroup=record.cgroup or record.devices_cgroup,
            gpus=record.gpus,
            slices=record.slices,
        )

    def _shell_cgroups(self, record: JobRecord) -> tuple[JobRecord, bool, DeviceFence]:
        """The reservation's record with its shell cgroups, made now (True) unless
        an earlier shell made them, and the shell's fence; under ``required``,
        ConfigError when the shell cannot be fenced. Where no cgroup at all can be
        made, the record is left as it was: such a shell is no part of the
        reservation, so the reservation says nothing of its fence. Called under
        the state file's lock."""
        mine = [p for p in (_cgroup(record), _devices(record)) if p is not None]
        if mine and all(p.is_dir() for p in mine):
            if self.fence_policy == jobfence.REQUIRED and not _device_fence(record).fenced:
                # made by an earlier shell under auto or off: joining it would run this one unfenced
                raise ConfigError(
                    f"a shell on reservation {record.run_id!r} would join its shell cgroup, which is not fenced "
                    f"to its cards ({_device_fence(record).problem.removeprefix(SHELL_UNFENCED)}), and "
                    "TUNEPLANE_FENCE=required starts no shell that is not; stop and reserve again under required"
                )
            return record, False, _device_fence(record)
        cgroup = make_cgroup(record.name) if self.cgroups else None
        made = jobfence.fence_job(
            self.fence_policy,
            record.granted,
            name=record.name,
            cgroup=cgroup,
            runs_command=True,
            files=self.fence_files,
        )
        if self.fence_policy == jobfence.REQUIRED and not made.fence.fenced:
            remove_cgroup(cgroup)
            jobfence.undo(made)
            raise ConfigError(
                f"a shell on reservation {record.run_id!r} cannot be fenced to its cards ({made.fence.problem}), "
                "and TUNEPLANE_FENCE=required starts no shell that is not; ask through the node's agent, "
                "or ask an operator about the node's cgroups"
            )
        fence = made.fence if made.fence.fenced else DeviceFence.missing(SHELL_UNFENCED + made.fence.problem)
        if cgroup is None and made.v1_cgroup is None:
            return record, False, fence
        updated = replace(
            record,
            cgroup=str(cgroup or ""),
            devices_cgroup=str(made.v1_cgroup or ""),
            fence_mechanism=fence.mechanism,
            fence_problem=fence.problem,
        )
        return updated, True, fence

    # ------------------------------------------------------ stopping, removing

    def _close_gate(self, name: str) -> None:
        """Let go of an unstarted job's gate: its supervisor then ends unrun."""
        gate = self._gates.pop(name, None)
        if gate is not None:
            os.close(gate)

    async def stop(self, name: str) -> None:
        """SIGTERM to the job, SIGKILL to every process of it after ``stop_timeout_s``.

        The SIGTERM goes to the supervisor, which passes it on to the command,
        so the command gets it once, as ``docker stop`` sends it to a
        container's main process. Sent to every process, the command would get
        a second copy through the supervisor, and a program that reads a
        second signal as "quit now" would skip its clean-up. Once the command
        has ended, the supervisor ends what it left running. The SIGKILL that
        follows the grace goes to every process of the job (:mod:`.jobprocs`)
        but not the supervisor, which then records the exit code (137 for a
        command killed so) after the note saying it was killed. Nothing at all
        is sent unless the pid is still the recorded process.

        Raises RuntimeUnavailable when the job cannot be reached, or when a
        process of it has not ended even after SIGKILL (stuck in the kernel):
        the job then still holds its cards, and saying "stopped" would be false.
        """
        self._close_gate(name)
        record = await asyncio.to_thread(self._record, name)
        if liveness(record, boot_id())[0] not in ("running", "created"):
            return
        now, unseen = _look(record)
        if unseen:
            where = (
                "Stop it from the container or host (PID namespace) that launched it"
                if "PID namespace" in unseen
                else "Stop it as the user who started it, or as root"
            )
            raise RuntimeUnavailable(f"job {name!r} was not signalled: {unseen}. {where}")
        # said in its record before the signal, so its end reads "stopped", not as the 143 of a
        # SIGTERM; a record that cannot be written now stops no stop: the words are only words
        with contextlib.suppress(RuntimeUnavailable):
            await asyncio.to_thread(self._note, record, STOPPED)
        if _is_supervisor(record, now):
            procs = JobProcesses(record.pid, _cgroup(record), devices=_devices(record))
            try:
                os.kill(record.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # it has just ended
        else:  # nobody is left to pass it on
            procs = _left_behind(record, now)
            await asyncio.to_thread(procs.send, signal.SIGTERM)
        if not await self._ended(name):
            await asyncio.to_thread(
                self._note,
                record,
                f"killed by SIGKILL after {self.stop_timeout_s:g} s (it did not end on SIGTERM)",
            )
            if not await _killed(procs, self.stop_timeout_s):
                left = procs.pids()
                raise RuntimeUnavailable(
                    f"job {name!r} was killed with SIGKILL, but {_processes(left)} of it "
                    f"{'has' if len(left) == 1 else 'have'} not ended after {self.stop_timeout_s:g} s "
                    "(stuck in the kernel, perhaps in the GPU driver); the job holds its cards "
                    "until they end"
                )
            if not await self._ended(name):
                raise RuntimeUnavailable(
                    f"every process of job {name!r} has ended, but its supervisor (pid "
                    f"{record.pid}) has not recorded it within {self.stop_timeout_s:g} s"
                )
        remove_cgroup(_cgroup(record))
        _remove_devices(record)

    async def _ended(self, name: str) -> bool:
        """Wait up to ``stop_timeout_s`` for the job to stop counting as live."""
        deadline = time.monotonic() + self.stop_timeout_s
        while True:
            try:
                if not (await asyncio.to_thread(self._one, name)).live:
                    return True
            except JobNotFound:
                return True  # reclaimed meanwhile, which only happens once it has ended
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_STOP_POLL_S)

    def _still(self, job: JobState) -> JobRecord:
        """The record of ``job`` as it was read (its supervisor's pid and start), or
        JobNotFound: reclaimed since, and its name perhaps another job's now."""
        record = self.state.read().get(job.name)
        if record is None or (record.pid, record.started_at) != (job.pid, job.started_at):
            raise JobNotFound(f"{job.key} is no longer recorded: it was reclaimed")
        return record

    def _record(self, name: str) -> JobRecord:
        record = self.state.read().get(name)
        if record is None:
            raise JobNotFound(f"no job named {name!r} in {self.state.path}")
        return record

    def _note(self, record: JobRecord, note: str) -> None:
        """Note how the job is being ended, in its record, if the record is still that job's."""
        with self.state.transaction() as jobs:
            now = jobs.get(record.name)
            if now is None or (now.pid, now.pid_start_ticks) != (record.pid, record.pid_start_ticks):
                return
            said = [n for n in now.note.split("; ") if n]
            if now.exit_code is None and note not in said:  # a second stop during the first's grace says nothing new
                jobs[record.name] = replace(now, note="; ".join([*said, note]))

    async def output(self, job: JobState, after: Optional[str], most: int) -> JobOutput:
        """At most ``most`` bytes of the job's log from ``after`` (a byte offset;
        None: its beginning), read as whoever runs this (the agent: root) though
        the file is the job's account's. Only a regular file is read, never
        through a link, and without waiting on it: the logs directory is this
        runtime's, and nothing the account does to its file makes the reader
        block or read something else."""
        return await asyncio.to_thread(self._output, job, after, most)

    def _output(self, job: JobState, after: Optional[str], most: int) -> JobOutput:
        start = _offset(after)
        record = self._still(job)  # read first: whatever a job that has ended wrote is in the file by now
        ended = not _job_state(record, boot_id()).live
        try:
            fd = os.open(record.log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return JobOutput(text="", after="0", ended=ended, log=record.log)
        except OSError as e:
            raise RuntimeUnavailable(f"cannot read the log {record.log} of {record.run_id}: {e.strerror}") from None
        try:
            seen = os.fstat(fd)
            if not stat.S_ISREG(seen.st_mode):
                raise RuntimeUnavailable(f"the log {record.log} of {record.run_id} is not a file")
            size = seen.st_size
            if start > size:  # the file was emptied meanwhile: read it again from its beginning
                start = 0
            read = os.pread(fd, most, start)
        finally:
            os.close(fd)
        # Still this job's record after the read, so the file read was its log all along: a
        # name is given to another job (and its log begun anew) only once this record is gone.
        self._still(job)
        data = whole_characters(read, at_end=ended and start + len(read) >= size)
        end = start + len(data)
        return JobOutput(
            text=data.decode("utf-8", errors="replace"), after=str(end), more=end < size, ended=ended, log=record.log
        )

    async def remove(self, name: str) -> None:
        """Delete the record of an exited job, and its log."""
        self._let_go(await asyncio.to_thread(self._remove, name))

    async def remove_exited(self, jobs: Sequence[JobState]) -> list[str]:
        """Delete the records of these exited jobs, and their logs, in one hold of the
        state file's lock (one rewrite of the file, however many); a record that is
        another job's by now (its run id reclaimed and given again) is passed over."""
        records = await asyncio.to_thread(self._remove_exited, list(jobs))
        for record in records:
            self._let_go(record)
        return [r.name for r in records]

    def _let_go(self, record: JobRecord) -> None:
        """What a removed job may have left: its gate, and its cgroups (left behind
        if its supervisor was killed)."""
        self._close_gate(record.name)
        remove_cgroup(_cgroup(record))
        _remove_devices(record)

    def _remove_exited(self, read: list[JobState]) -> list[JobRecord]:
        current_boot = boot_id()
        removed = []
        with self.state.transaction() as jobs:
            for job in read:
                record = jobs.get(job.name)
                if record is None or (record.pid, record.started_at) != (job.pid, job.started_at):
                    continue
                if liveness(record, current_boot)[0] != "exited":
                    continue
                _forget_log(self.state.dir / "logs", record)
                del jobs[job.name]
                removed.append(record)
        return removed

    def _remove(self, name: str) -> JobRecord:
        current_boot = boot_id()
        with self.state.transaction() as jobs:
            record = jobs.get(name)
            if record is None:
                raise JobNotFound(f"no job named {name!r} in {self.state.path}")
            if liveness(record, current_boot)[0] != "exited":
                raise Conflict(f"job {name!r} is still running; stop it before removing it")
            # under the state file's lock: no job of the same name can open it anew meanwhile
            _forget_log(self.state.dir / "logs", record)
            del jobs[name]
        return record

    async def close(self) -> None:
        """Close the gates of jobs never started: their supervisors end unrun."""
        while self._gates:
            os.close(self._gates.popitem()[1])


async def _killed(procs: JobProcesses, timeout_s: float) -> bool:
    """:meth:`JobProcesses.wait_gone` with kill, waited for in the event loop: the
    job's processes are its owner's, and a stop must not keep one of the threads
    everyone's requests share for as long as they take to die."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(procs.left, kill=True):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def _forget_log(logs: Path, record: JobRecord) -> None:
    """Remove an exited job's log, where this runtime put it (a record naming
    another file, edited by hand, is not followed)."""
    log = logs / f"{record.name}.log"
    if record.log != str(log):
        return
    try:
        log.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise RuntimeUnavailable(f"cannot remove the log {log} of job {record.name!r}: {e.strerror}") from None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left in it, or the number now belongs to someone else
