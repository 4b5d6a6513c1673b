"""A shell on a reservation's cards: the asking process moved into the reservation's fence.

``tpnode-tui shell RUN_ID`` has its own process moved into the reservation's
shell cgroup, made the first time as a job's is (:mod:`.jobfence`), and then
executes the shell there, as Slurm's ``salloc`` does. Which process is moved
is the socket's peer as the kernel names it; the pid and start the CLI sends
are only compared, and a process that ended, or a later step that failed, is
moved back where it was. See docs/architecture.md, section 'A shell on a
reservation'.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence, errno_words
from tpnode_tui.model.errors import ConfigError, Conflict, JobNotFound, NotAllowed, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, JobState, ShellEntry, visible_devices
from tpnode_tui.runtimes import jobfence
from tpnode_tui.runtimes.jobprocs import cgroup_dir, make_cgroup, process_stat, remove_cgroup
from tpnode_tui.runtimes.liveness import RecordedJobs, boot_id, cgroup_of, device_fence, devices_of, job_state, liveness
from tpnode_tui.runtimes.statefile import JobRecord
from tpnode_tui.runtimes.stopping import remove_devices
from tpnode_tui.text.refusals import not_a_reservation

#: what the node says when the kernel cannot name the asking process (a peer in another PID namespace)
CANNOT_TELL = (
    "the node cannot tell which process asks (it connected from another PID namespace, which the kernel "
    "names as pid 0), so it can move none into the reservation: run tpnode-tui shell on the node itself"
)
#: what a forwarder between the asking CLI and the agent's socket is told
FORWARDED = (
    "the process asking is not the one connected to the agent (a forwarder such as ssh -L or socat): "
    "run tpnode-tui shell on the node itself"
)


def _uids(pid: int) -> tuple[int, ...]:
    """The real, effective, saved and filesystem uids of ``pid``, from /proc."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return tuple(int(n) for n in line.split()[1:])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return ()


def _gone(pidfd: int) -> bool:
    """Whether the process held by ``pidfd`` has ended (a pidfd reads as ready then)."""
    return bool(select.select([pidfd], [], [], 0)[0])


def _ended(pid: int) -> Conflict:
    return Conflict(f"the process that asked for the shell (pid {pid}) has ended; nothing was moved")


def _check(pid: int, pidfd: int, uid: int, start_ticks: int) -> None:
    """Refuse to move ``pid`` unless it is the process that asked: the one the
    pidfd holds, started when the asking CLI says it did, of the caller's uid."""
    stat = process_stat(pid)
    if stat is None or stat.ended or _gone(pidfd):
        raise _ended(pid)  # read after the pidfd was opened: not gone now, so the stat is the held one's
    if stat.ticks != start_ticks:
        raise Conflict(FORWARDED)
    uids = _uids(pid)
    if not uids or uids[0] != uid or uids[1] != uid:
        raise NotAllowed(
            f"process {pid} is not the asking account's own (uid {uid}) any more, so it was not moved; ask again"
        )


def _put(cgroup: Path, pid: int) -> None:
    """Write ``pid`` into ``cgroup``; CannotFence when the kernel refuses."""
    try:
        fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise CannotFence(f"cannot move process {pid} into {cgroup}: {errno_words(e.errno or 0)}") from None


def _where(pid: int) -> tuple[Optional[Path], Optional[Path]]:
    """The cgroup v2 and v1 devices cgroup ``pid`` is in now (None where unknown): where it goes back to."""
    v2 = cgroup_dir(Path(f"/proc/{pid}/cgroup"))
    try:
        devices: Optional[Path] = v1.hierarchy_dir(own_cgroup=Path(f"/proc/{pid}/cgroup"))
    except CannotFence:
        devices = None
    return v2, devices


def _back(pid: int, homes: list[Path]) -> None:
    """Move ``pid`` back into each cgroup it was in before it was moved; as far as the kernel lets."""
    for home in homes:
        with contextlib.suppress(CannotFence):
            _put(home, pid)


def move(pid: int, uid: int, start_ticks: int, cgroup: Optional[Path], devices: Optional[Path]) -> None:
    """Move the caller's process ``pid`` (the kernel's peer, of ``uid``, which
    the CLI says started at ``start_ticks``) into the shell's cgroup v2 and v1
    devices cgroup (either may be None).

    Conflict or NotAllowed when it is not that process (see the module);
    CannotFence when the kernel refuses the move: then the shell must not run
    as if it were fenced. On any failure it is moved back where it was.
    """
    if pid <= 0:
        raise NotAllowed(CANNOT_TELL)
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise _ended(pid) from None
    try:
        _check(pid, pidfd, uid, start_ticks)
        homes: list[Path] = []  # where it was, in each hierarchy it has been moved out of so far
        try:
            for target, home in zip((cgroup, devices), _where(pid)):
                if target is not None:
                    _put(target, pid)
                    if home is not None:
                        homes.append(home)
            if _gone(pidfd):  # it ended during the move: whatever holds its number now is not the asker
                raise Conflict(f"the process that asked for the shell (pid {pid}) ended while it was moved")
        except BaseException:
            _back(pid, homes)
            raise
    finally:
        os.close(pidfd)


#: what a reservation says of its fence when a shell on it could not be fenced
SHELL_UNFENCED = "its shell cannot be fenced: "


class ReservationShells(RecordedJobs):
    """A shell on a reservation: the process runtime's part that moves a caller's process into its shell cgroup."""

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
            may(job_state(record, current_boot))
            record, made, fence = self._shell_cgroups(record)
            jobs[name] = record  # written only if the move succeeds: the transaction drops it on an error
            try:
                try:
                    move(pid, uid, start_ticks, cgroup_of(record), devices_of(record))
                except CannotFence as e:
                    raise RuntimeUnavailable(f"the shell of reservation {name!r} cannot be fenced: {e}") from None
            except BaseException:
                if made:  # nothing joined them
                    remove_cgroup(cgroup_of(record))
                    remove_devices(record)
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
        mine = [p for p in (cgroup_of(record), devices_of(record)) if p is not None]
        if mine and all(p.is_dir() for p in mine):
            if self.fence_policy == jobfence.REQUIRED and not device_fence(record).fenced:
                # made by an earlier shell under auto or off: joining it would run this one unfenced
                raise ConfigError(
                    f"a shell on reservation {record.run_id!r} would join its shell cgroup, which is not fenced "
                    f"to its cards ({device_fence(record).problem.removeprefix(SHELL_UNFENCED)}), and "
                    "TUNEPLANE_FENCE=required starts no shell that is not; stop and reserve again under required"
                )
            return record, False, device_fence(record)
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
