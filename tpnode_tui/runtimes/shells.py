"""A shell on a reservation's cards: the asking process moved into the reservation's fence.

``tpnode-tui shell RUN_ID`` asks the node to move the CLI's own process into
the reservation's *shell cgroup*, and then executes the shell (or a command)
there, as Slurm's ``salloc``/``srun --pty`` runs a shell in a job step whose
cgroup is constrained to the allocation's devices. Everything the shell
starts inherits the cgroup, ``setsid`` and double forks included.

The shell cgroup is made the first time a shell is asked for, as a job's
cgroup is made (a cgroup v2 under the launcher's own, with the device program
attached, else a v1 devices cgroup with its deny list: :mod:`.jobfence`), and
recorded on the reservation (``cgroup``, ``devices_cgroup``, and how it is
fenced); a later shell joins the same one. Its processes are the
reservation's own: they keep it in use (the node never gives back a
reservation a shell of which runs), they are its holder on its cards (never
an intruder), and when the reservation ends (stopped, released, expired) its
supervisor ends them, SIGTERM then SIGKILL after the grace, and removes the
cgroup once it is empty. Until they have ended, its cards stay held.

Which process is moved is never what a client says: it is the peer of the
agent's socket as the kernel names it (``SO_PEERCRED``), and before it is
moved it must still be that process: it belongs to the caller's uid, it
started before this check (a pid handed to a new process since would have
started after), and it is held by a pidfd across the move, which tells if it
ended meanwhile. Through ``--host`` the peer is the SSH bridge (``tpnode-tui
dial-stdio``), not the person's shell, so a bridge is refused.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from typing import Optional

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence, errno_words
from tpnode_tui.model.errors import Conflict, NotAllowed
from tpnode_tui.runtimes.jobprocs import process_stat

#: what the SSH bridge runs on the node: a shell through it would fence the bridge, not the person
BRIDGE_WORD = b"dial-stdio"
#: what a refused bridge is told to do instead
ON_THE_NODE = (
    "a shell runs in the process that asks for it, and through --host that is the SSH bridge, not "
    "your shell: log in to the node (ssh) and run tpnode-tui shell there"
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


def _ticks_now() -> int:
    """Clock ticks since boot now, as /proc/<pid>/stat counts a process's start."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _is_bridge(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return BRIDGE_WORD in f.read().split(b"\0")
    except OSError:
        return False


def _gone(pidfd: int) -> bool:
    """Whether the process held by ``pidfd`` has ended (a pidfd reads as ready then)."""
    return bool(select.select([pidfd], [], [], 0)[0])


def _check(pid: int, uid: int) -> None:
    """Refuse to move ``pid`` unless it is, as far as /proc can tell, the caller's process that asked."""
    if _is_bridge(pid):
        raise Conflict(ON_THE_NODE)
    stat = process_stat(pid)
    if stat is None or stat.ended:
        raise Conflict(f"the process that asked for the shell (pid {pid}) has ended; nothing was moved")
    uids = _uids(pid)
    if not uids or uids[0] != uid or uids[1] != uid:
        raise NotAllowed(
            f"process {pid} is not the asking account's own (uid {uid}) any more, so it was not moved; ask again"
        )
    if stat.ticks > _ticks_now():
        raise NotAllowed(f"process {pid} started after it asked, so it is not the one that did; ask again")


def move(pid: int, uid: int, cgroup: Optional[Path], devices: Optional[Path]) -> None:
    """Move the caller's process ``pid`` (the kernel's peer, of ``uid``) into the
    shell's cgroup v2 and v1 devices cgroup (either may be None).

    Conflict or NotAllowed when it is not that process any more (see the module);
    CannotFence when the kernel refuses the move: then the shell must not run
    as if it were fenced.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise Conflict(f"the process that asked for the shell (pid {pid}) has ended; nothing was moved") from None
    try:
        _check(pid, uid)
        if cgroup is not None:
            try:
                fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY)
                try:
                    os.write(fd, str(pid).encode())
                finally:
                    os.close(fd)
            except OSError as e:
                raise CannotFence(f"cannot move process {pid} into {cgroup}: {errno_words(e.errno or 0)}") from None
        if devices is not None:
            v1.join(devices, pid)
        if _gone(pidfd):
            raise Conflict(f"the process that asked for the shell (pid {pid}) ended while it was moved")
    finally:
        os.close(pidfd)
