"""Whether a process job runs: its record in the state file, read against /proc and its cgroups."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path
from typing import Optional, Sequence

from tpnode_tui.devices.fence import ProcFiles
from tpnode_tui.model.errors import JobNotFound, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, JobState
from tpnode_tui.runtimes.jobprocs import JobProcesses, ProcessStat, process_stat
from tpnode_tui.runtimes.statefile import JobRecord, StateFile

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


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


def cgroup_of(record: JobRecord) -> Optional[Path]:
    return Path(record.cgroup) if record.cgroup else None


def devices_of(record: JobRecord) -> Optional[Path]:
    return Path(record.devices_cgroup) if record.devices_cgroup else None


#: what a record made before jobs were fenced says about its fence
NOT_RECORDED = "started by a tpnode-tui that did not fence jobs"


def device_fence(record: JobRecord) -> DeviceFence:
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


def look(record: JobRecord) -> tuple[Optional[ProcessStat], str]:
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


def is_supervisor(record: JobRecord, now: Optional[ProcessStat]) -> bool:
    return now is not None and now.ticks == record.pid_start_ticks and not now.ended


def left_behind(record: JobRecord, now: Optional[ProcessStat]) -> JobProcesses:
    """The processes of a job whose supervisor is gone.

    A session's id is not handed to a new process while any member lives, so
    if another process holds the supervisor's number now, the job's session
    is empty and only its cgroup is looked at.
    """
    mine = now is None or now.ticks == record.pid_start_ticks
    return JobProcesses(record.pid, cgroup_of(record), by_session=mine, devices=devices_of(record))


def processes(pids: Sequence[int]) -> str:
    listed = ", ".join(str(p) for p in pids[:8]) + (", ..." if len(pids) > 8 else "")
    return f"1 process (pid {listed})" if len(pids) == 1 else f"{len(pids)} processes (pids {listed})"


def _shell_left(record: JobRecord) -> list[int]:
    """The processes still running in a reservation's shell cgroup (``tpnode-tui shell``)."""
    if record.kind != "reservation" or not (record.cgroup or record.devices_cgroup):
        return []
    return JobProcesses(record.pid, cgroup_of(record), by_session=False, devices=devices_of(record)).pids()


def _hold_ended(record: JobRecord) -> tuple[str, tuple[str, ...]]:
    """A record whose end is recorded: exited, unless it is a reservation whose
    shell still runs. Its supervisor records the end first, so no shell joins
    after it, and then ends what runs in the shell; until that has ended the
    cards are in use, and held."""
    left = _shell_left(record)
    if not left:
        return "exited", ()
    return "running", (
        f"its hold has ended, but {processes(left)} still {'runs' if len(left) == 1 else 'run'} in its "
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
    now, unseen = look(record)
    if unseen:
        return alive, (unseen,)
    if is_supervisor(record, now):
        return alive, ()
    left = left_behind(record, now).pids()
    if left:
        return alive, (
            f"its supervisor (pid {record.pid}) was killed, but {processes(left)} it started "
            f"still {'runs' if len(left) == 1 else 'run'}; stop ends {'it' if len(left) == 1 else 'them'}",
        )
    return "exited", ()


def job_state(record: JobRecord, current_boot: str) -> JobState:
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
        device_fence=device_fence(record),
        shell_processes=len(_shell_left(record)) if record.boot_id == current_boot else 0,
        log=record.log,
    )


class RecordedJobs:
    """What every part of the process runtime reads: its settings (set by
    :class:`~tpnode_tui.runtimes.process.ProcessRuntime`) and its jobs' records, read afresh."""

    state: StateFile
    fence_policy: str
    fence_files: ProcFiles
    stop_timeout_s: float
    cgroups: bool
    _gates: dict[str, int]

    async def ps(self) -> list[JobState]:
        return await asyncio.to_thread(self._ps)

    def _ps(self) -> list[JobState]:
        records = self.state.read()
        current_boot = boot_id()
        states = [job_state(r, current_boot) for r in records.values()]
        return sorted(states, key=lambda s: (s.started_at or 0.0, s.name))

    def _one(self, name: str) -> JobState:
        return job_state(self._record(name), boot_id())

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
