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

import contextlib
import os
import select
from pathlib import Path
from typing import Optional

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence, errno_words
from tpnode_tui.model.errors import Conflict, NotAllowed
from tpnode_tui.runtimes.jobprocs import cgroup_dir, process_stat

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
