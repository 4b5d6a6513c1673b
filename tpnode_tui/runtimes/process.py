"""The process runtime: jobs are local processes, for nodes without Docker.

What the platform knows of its processes is the state file (:mod:`.statefile`),
read afresh by every call, and a record counts as running only while its
supervisor's pid is there with the start time recorded (a reused pid is never
the job). How a job runs as its caller, ends with all of its processes, and
keeps its log: see docs/architecture.md, sections 'Where the truth lives',
'A process job ends when all of it has ended' and 'A caller's process job runs as the caller'.
"""

from __future__ import annotations

import asyncio
import math
import os
import stat
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from tpnode_tui.devices.fence import ProcFiles
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, JobOutput, JobState
from tpnode_tui.runtimes import jobfence
from tpnode_tui.runtimes.jobprocs import cgroup_parent
from tpnode_tui.runtimes.launching import Launching
from tpnode_tui.runtimes.liveness import boot_id, job_state, liveness
from tpnode_tui.runtimes.shells import ReservationShells
from tpnode_tui.runtimes.statefile import DEFAULT_LOCK_TIMEOUT_S, StateFile
from tpnode_tui.runtimes.stopping import Stopping
from tpnode_tui.text.printable import shown


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


class ProcessRuntime(Launching, Stopping, ReservationShells):
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
        return job_state(record, current_boot)

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
        ended = not job_state(record, boot_id()).live
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
