"""The process runtime: jobs are local processes, for nodes without Docker.

What the platform knows about its processes lives in the state file
(:mod:`.statefile`) and nowhere else; every call reads it afresh, so a
restarted CLI or dashboard sees the same jobs. Each job runs under a
supervisor (:mod:`.supervise`) that records its exit code, because the
launcher is long gone when the job ends.

A record counts as running only while its supervisor's pid exists *and*
that process started when the record says. A pid is reused once its process
is gone; taking whatever now holds the number for the job would keep its
cards held for ever, and stopping the job would signal a stranger.

Logs (``state_dir/logs/<name>.log``) are kept when a record is removed, for a
post-mortem; a later job with the same name appends to the same log.
"""
from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from ..model import (
    JOB_KINDS,
    BadRequest,
    Conflict,
    JobNotFound,
    JobSpec,
    JobState,
    RuntimeUnavailable,
    check_run_id,
)
from .statefile import DEFAULT_LOCK_TIMEOUT_S, JobRecord, StateFile

#: A reservation's workload: sleep for the seconds appended to it.
DEFAULT_HOLD_COMMAND = (
    sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1]))",
)
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_STOP_POLL_S = 0.05


def boot_id() -> str:
    """This boot of the machine. Pids and start ticks only mean something within one."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError as e:
        raise RuntimeUnavailable(
            f"cannot read {_BOOT_ID} ({e.strerror}): the process runtime needs Linux /proc "
            "to tell its jobs from other processes"
        ) from None


@functools.lru_cache(maxsize=1)
def pid_namespace() -> str:
    """This process's PID namespace, e.g. "pid:[4026531836]"; "" when unreadable."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessStart:
    """What ``/proc/<pid>/stat`` says: the state letter and the start in ticks since boot."""

    state: str
    ticks: int


def process_start(pid: int) -> Optional[ProcessStart]:
    """The process now holding ``pid``; ``None`` when there is none.

    Raises PermissionError when ``/proc`` refuses to show it: that is
    "cannot tell", not "gone".
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    rest = raw[raw.rindex(b")") + 2 :].split()
    return ProcessStart(state=rest[0].decode(), ticks=int(rest[19]))


def liveness(record: JobRecord, current_boot: str) -> tuple[str, tuple[str, ...]]:
    """Whether ``record`` is "running" or "exited", with any doubt in plain words.

    A zombie has ended; it only waits for its parent to collect it. When the
    process cannot be looked at, the job counts as running: unknown is not
    ended, and an ended job's cards would be handed out.
    """
    if record.exit_code is not None or record.boot_id != current_boot:
        return "exited", ()
    alive = "created" if record.gated else "running"
    here = pid_namespace()
    if record.pid_ns and here and record.pid_ns != here:
        # Its pid means nothing here (a container beside the host, or the other
        # way round): until its supervisor records an exit code, it holds its cards.
        return alive, (
            f"started in another PID namespace ({record.pid_ns}), so pid {record.pid} "
            "cannot be looked at from here; counted as running until it records its exit",
        )
    try:
        now = process_start(record.pid)
    except PermissionError:
        return alive, (
            f"cannot look at pid {record.pid} in /proc (permission denied), "
            "so it is counted as running",
        )
    if now is None or now.ticks != record.pid_start_ticks or now.state in ("Z", "X"):
        return "exited", ()
    return alive, ()


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
        fence=record.fence,
        problems=problems,
    )


def _check_argv(argv: Sequence[str], path: Optional[str]) -> None:
    """Refuse a command that cannot be started, before any record holds cards.

    The supervisor would find out too, but only after the job was recorded;
    a person who mistyped a command should hear about it straight away.
    """
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise BadRequest(f"argument {i} of the command is {arg!r}, not a string")
        if "\0" in arg:
            raise BadRequest(
                f"argument {i} of the command contains a NUL byte, which no program can receive"
            )
    program = argv[0]
    if not program:
        raise BadRequest("the command's program name is empty")
    if "/" in program:
        if not os.path.isfile(program):
            raise Conflict(f"command {program!r} not found")
        if not os.access(program, os.X_OK):
            raise Conflict(f"command {program!r} is not executable (chmod +x it)")
    elif shutil.which(program, path=path) is None:
        raise Conflict(f"command {program!r} not found on PATH; give its full path or install it")


class ProcessRuntime:
    """Jobs as local processes, recorded in ``state_dir/jobs.json``."""

    name = "process"

    def __init__(
        self,
        state_dir: Path,
        hold_command: Optional[Sequence[str]] = None,
        *,
        stop_timeout_s: float = 10.0,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ):
        self.state = StateFile(Path(state_dir), lock_timeout_s=lock_timeout_s)
        self.hold_command = tuple(hold_command or DEFAULT_HOLD_COMMAND)
        self.stop_timeout_s = stop_timeout_s
        #: job name -> write end of its supervisor's gate, for jobs created here and not started
        self._gates: dict[str, int] = {}

    def describe(self) -> str:
        return f"processes recorded in {self.state.path}"

    # ------------------------------------------------------------- reading

    async def ps(self) -> list[JobState]:
        return await asyncio.to_thread(self._ps)

    def _ps(self) -> list[JobState]:
        records = self.state.read()
        current_boot = boot_id()
        states = [_job_state(r, current_boot) for r in records.values()]
        return sorted(states, key=lambda s: (s.started_at or 0.0, s.name))

    def _one(self, name: str) -> JobState:
        record = self.state.read().get(name)
        if record is None:
            raise JobNotFound(f"no job named {name!r} in {self.state.path}")
        return _job_state(record, boot_id())

    # ------------------------------------------------------------ creating

    async def create(self, spec: JobSpec, gpus: list[int]) -> JobState:
        """Spawn the job's supervisor, gated, and record it; the record is written
        before this returns and holds the cards ("created").

        The command itself runs only at ``start``: until then the supervisor
        waits on a pipe, so the allocator can withdraw a job that met another
        on its cards before anything ran. The supervisor is spawned under the
        state file's lock and recorded in the same hold, so no reader can see a
        job without a record; if recording fails, the job is killed.
        """
        return await asyncio.to_thread(self._create, spec, list(gpus))

    def check(self, spec: JobSpec) -> None:
        _check_argv(self._argv(spec), os.environ.get("PATH"))

    def _argv(self, spec: JobSpec) -> tuple[str, ...]:
        if spec.kind not in JOB_KINDS:
            raise BadRequest(f"job kind {spec.kind!r} is not one of {', '.join(JOB_KINDS)}")
        if spec.image:
            raise BadRequest(
                f"job {spec.run_id!r} names image {spec.image!r}, but the process runtime runs "
                "commands on this machine, not images; use TUNEPLANE_RUNTIME=docker for images"
            )
        if spec.kind == "reservation":
            if spec.expires_at is None:
                raise BadRequest(f"reservation {spec.run_id!r} has no expiry time")
            seconds = spec.expires_at - time.time()
            if not seconds > 0:
                raise BadRequest(f"reservation {spec.run_id!r} would expire in the past")
            return (*self.hold_command, f"{seconds:.3f}")
        if not spec.command:
            raise BadRequest(
                f"job {spec.run_id!r} has no command: the process runtime runs a command "
                "(an argv list), not an image"
            )
        return tuple(spec.command)

    def _create(self, spec: JobSpec, gpus: list[int]) -> JobState:
        name = check_run_id(spec.run_id)
        indices = all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in gpus)
        if not indices or len(set(gpus)) != len(gpus):
            raise BadRequest(f"cards {gpus!r} are not distinct card indices")
        argv = self._argv(spec)
        env = dict(os.environ)
        env.update(
            CUDA_VISIBLE_DEVICES=",".join(str(i) for i in gpus),
            NVIDIA_VISIBLE_DEVICES=",".join(str(i) for i in gpus),
            # CUDA numbers cards fastest first unless told otherwise; the
            # indices above are the driver's (PCI bus) order, as nvidia-smi shows.
            CUDA_DEVICE_ORDER="PCI_BUS_ID",
        )
        _check_argv(argv, env.get("PATH"))
        logs = self.state.dir / "logs"
        log = logs / f"{name}.log"
        current_boot = boot_id()
        proc: Optional[subprocess.Popen[bytes]] = None
        try:
            with self.state.transaction() as jobs:
                if name in jobs:
                    raise Conflict(
                        f"a job named {name!r} is already recorded, so run id {name!r} is "
                        "taken; use another run id or reclaim the old job"
                    )
                proc, gate = self._spawn(name, argv, env, logs, log)
                started = process_start(proc.pid)
                if started is None:
                    raise RuntimeUnavailable(f"job {name!r} vanished as it was started")
                record = JobRecord(
                    name=name,
                    run_id=spec.run_id,
                    gpus=tuple(gpus),
                    kind=spec.kind,
                    owner=spec.owner,
                    command=argv,
                    started_at=time.time(),
                    expires_at=spec.expires_at,
                    pid=proc.pid,
                    pid_start_ticks=started.ticks,
                    boot_id=current_boot,
                    log=str(log),
                    fence=spec.fence,
                    gated=True,
                    pid_ns=pid_namespace(),
                )
                jobs[name] = record
        except BaseException:
            if proc is not None:
                os.close(gate)
                _kill_group(proc.pid)
                proc.wait()
            raise
        self._gates[name] = gate
        # Collects the supervisor when it ends, so a long-lived dashboard does
        # not fill with zombies; the job's truth stays in the state file.
        threading.Thread(target=proc.wait, name=f"reap-{name}", daemon=True).start()
        return _job_state(record, current_boot)

    def _spawn(
        self, name: str, argv: Sequence[str], env: dict[str, str], logs: Path, log: Path
    ) -> tuple[subprocess.Popen[bytes], int]:
        """The supervisor and the write end of its gate (non-inheritable, so no
        other child of this process can keep the gate open)."""
        try:
            logs.mkdir(mode=0o700, exist_ok=True)
            log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as e:
            raise RuntimeUnavailable(f"cannot open the log {log}: {e.strerror}") from None
        gate_r, gate_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tpnode_tui.runtimes.supervise",
                 str(self.state.dir), name, "--gate", str(gate_r), "--", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                env=env,
                start_new_session=True,
                pass_fds=(gate_r,),
            )
        except OSError as e:
            os.close(gate_w)
            raise RuntimeUnavailable(
                f"cannot start the supervisor for job {name!r} ({sys.executable}): {e.strerror}"
            ) from None
        finally:
            os.close(log_fd)
            os.close(gate_r)
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

    # ------------------------------------------------------ stopping, removing

    def _close_gate(self, name: str) -> None:
        """Let go of an unstarted job's gate: its supervisor then ends unrun."""
        gate = self._gates.pop(name, None)
        if gate is not None:
            os.close(gate)

    async def stop(self, name: str) -> None:
        """SIGTERM to the job, SIGKILL to all it started after ``stop_timeout_s``.

        The SIGTERM goes to the supervisor, which passes it on to the command,
        so the command gets it once, as ``docker stop`` sends it to a
        container's main process. Sent to the whole process group, the command
        would get a second copy through the supervisor, and a program that
        reads a second signal as "quit now" would skip its clean-up. The
        SIGKILL that follows goes to the whole process group the supervisor
        leads, so nothing the job started outlives it, whether the command
        ended by itself or had to be killed. Nothing at all is sent unless the
        pid is still the recorded process.
        """
        self._close_gate(name)
        state = await asyncio.to_thread(self._one, name)
        if state.status not in ("running", "created"):
            return
        if state.problems:
            where = (
                "Stop it from the container or host (PID namespace) that launched it"
                if any("PID namespace" in p for p in state.problems)
                else "Stop it as the user who started it, or as root"
            )
            raise RuntimeUnavailable(
                f"job {name!r} was not signalled: {'; '.join(state.problems)}. {where}"
            )
        pid = state.pid
        assert pid is not None  # every record names its supervisor
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            try:
                if (await asyncio.to_thread(self._one, name)).status not in ("running", "created"):
                    break
            except JobNotFound:
                break  # reclaimed meanwhile, which only happens once it has ended
            await asyncio.sleep(_STOP_POLL_S)
        # The group keeps the supervisor's pid as its id, and the kernel hands
        # that number to no new process while any member of the group lives;
        # so this reaches only what the job started (or, once all of it has
        # ended, nothing, unless the pid counter wrapped round meanwhile).
        _kill_group(pid)

    async def remove(self, name: str) -> None:
        """Delete the record of an exited job; the log stays."""
        await asyncio.to_thread(self._remove, name)
        self._close_gate(name)

    def _remove(self, name: str) -> None:
        current_boot = boot_id()
        with self.state.transaction() as jobs:
            record = jobs.get(name)
            if record is None:
                raise JobNotFound(f"no job named {name!r} in {self.state.path}")
            if liveness(record, current_boot)[0] != "exited":
                raise Conflict(f"job {name!r} is still running; stop it before removing it")
            del jobs[name]

    async def close(self) -> None:
        """Close the gates of jobs never started: their supervisors end unrun."""
        while self._gates:
            os.close(self._gates.popitem()[1])


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left in it, or the number now belongs to someone else
