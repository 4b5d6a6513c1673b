"""Launching a process job: its supervisor spawned gated and recorded, the launch sheet, the fence, the log."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from tpnode_tui.host.rerun import CLEAN_ENV, rerun_argv
from tpnode_tui.model.errors import BadRequest, Conflict, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, JobSpec, JobState, RunAs, visible_devices
from tpnode_tui.model.validation import check_run_id
from tpnode_tui.runtimes import jobfence
from tpnode_tui.runtimes.base import check_cards, check_kind, check_slices, hold_seconds
from tpnode_tui.runtimes.jobfence import JobFence
from tpnode_tui.runtimes.jobprocs import make_cgroup, process_stat, remove_cgroup
from tpnode_tui.runtimes.launchsheet import LaunchSheet, write_sheet
from tpnode_tui.runtimes.liveness import RecordedJobs, boot_id, job_state, pid_namespace
from tpnode_tui.runtimes.runnable import check_runnable
from tpnode_tui.runtimes.statefile import JobRecord
from tpnode_tui.runtimes.waiting import collect

#: The supervisor's whole environment. It runs as the launcher (root, in the
#: node's agent), so nothing a caller sent may shape how it starts.
SUPERVISOR_ENV = CLEAN_ENV
#: The PATH of a command run as another account that sent no environment: the
#: launcher's own environment (root's, the agent's settings) is never handed on.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


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


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left in it, or the number now belongs to someone else


class Launching(RecordedJobs):
    """Creating and starting jobs: the process runtime's part that launches them."""

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
        return job_state(record, current_boot), proc

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
