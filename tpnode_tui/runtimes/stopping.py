"""Stopping a process job: SIGTERM, then SIGKILL after the grace; waiting for its end; removing its record and log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.model.errors import Conflict, JobNotFound, RuntimeUnavailable
from tpnode_tui.model.jobs import JobState
from tpnode_tui.runtimes.jobprocs import POLL_S, JobProcesses, process_stat, remove_cgroup
from tpnode_tui.runtimes.liveness import (
    RecordedJobs,
    boot_id,
    cgroup_of,
    devices_of,
    is_supervisor,
    left_behind,
    liveness,
    look,
    processes,
)
from tpnode_tui.runtimes.statefile import JobRecord

_STOP_POLL_S = 0.05

#: the note a job's record gets when it is stopped (tpnode-tui stop, the dashboard,
#: an idle reservation given back): how it ended, where 143 would say only "SIGTERM"
STOPPED = "stopped"


def remove_devices(record: JobRecord) -> None:
    """Remove the job's v1 devices cgroup, left behind if its supervisor was killed."""
    devices = devices_of(record)
    if devices is not None:
        try:
            v1.remove(devices)
        except CannotFence:
            pass  # not removable now; a later remove or reclaim tries again


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
    procs = left_behind(record, now)
    if not procs.wait_gone(timeout_s, kill=True):
        return False
    remove_cgroup(cgroup_of(record))
    remove_devices(record)
    return True


class Stopping(RecordedJobs):
    """Stopping, waiting for the end, and removing: the process runtime's part that ends jobs."""

    def _close_gate(self, name: str) -> None:
        """Let go of an unstarted job's gate: its supervisor then ends unrun."""
        gate = self._gates.pop(name, None)
        if gate is not None:
            os.close(gate)

    async def stop(self, name: str) -> None:
        """SIGTERM to the job, SIGKILL to every process of it after ``stop_timeout_s``.

        The SIGTERM goes once, through the supervisor, as ``docker stop`` sends
        it; the SIGKILL to every process but the supervisor, which then records
        137 (see docs/architecture.md, section 'A process job ends when all of it
        has ended'). Nothing is sent unless the pid is still the recorded process.
        Raises RuntimeUnavailable when the job cannot be reached, or a process of
        it outlives SIGKILL: the job then still holds its cards.
        """
        self._close_gate(name)
        record = await asyncio.to_thread(self._record, name)
        if liveness(record, boot_id())[0] not in ("running", "created"):
            return
        now, unseen = look(record)
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
        if is_supervisor(record, now):
            procs = JobProcesses(record.pid, cgroup_of(record), devices=devices_of(record))
            try:
                os.kill(record.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # it has just ended
        else:  # nobody is left to pass it on
            procs = left_behind(record, now)
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
                    f"job {name!r} was killed with SIGKILL, but {processes(left)} of it "
                    f"{'has' if len(left) == 1 else 'have'} not ended after {self.stop_timeout_s:g} s "
                    "(stuck in the kernel, perhaps in the GPU driver); the job holds its cards "
                    "until they end"
                )
            if not await self._ended(name):
                raise RuntimeUnavailable(
                    f"every process of job {name!r} has ended, but its supervisor (pid "
                    f"{record.pid}) has not recorded it within {self.stop_timeout_s:g} s"
                )
        remove_cgroup(cgroup_of(record))
        remove_devices(record)

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

    def _note(self, record: JobRecord, note: str) -> None:
        """Note how the job is being ended, in its record, if the record is still that job's."""
        with self.state.transaction() as jobs:
            now = jobs.get(record.name)
            if now is None or (now.pid, now.pid_start_ticks) != (record.pid, record.pid_start_ticks):
                return
            said = [n for n in now.note.split("; ") if n]
            if now.exit_code is None and note not in said:  # a second stop during the first's grace says nothing new
                jobs[record.name] = replace(now, note="; ".join([*said, note]))

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
        remove_cgroup(cgroup_of(record))
        remove_devices(record)

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
