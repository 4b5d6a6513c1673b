"""Every process of one process job: those in its session, and in its cgroup when it has one.

A container's processes all end with it; a process job's must too, or
``sleep 300 &`` would keep using the job's cards after they were handed out
again. This module says what "the job's processes" are: its session (the
supervisor's pid, which the kernel gives no new process while a member
lives), its v1 devices cgroup where it is fenced so, and its cgroup v2 where
the launcher made one. Each is signalled through a pidfd opened before its
membership is checked once more. See docs/architecture.md, section 'A
process job ends when all of it has ended'.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: A job's cgroup is ``<the launcher's cgroup>/tpnode-tui.<job name>.<random>``.
CGROUP_PREFIX = "tpnode-tui."
#: how often a wait for a job's processes to end looks again (each look reads /proc)
POLL_S = 0.1


@dataclass(frozen=True)
class ProcessStat:
    """What ``/proc/<pid>/stat`` says: state letter, session id, start in ticks since boot."""

    state: str
    session: int
    ticks: int

    @property
    def ended(self) -> bool:
        """A zombie has ended; it only waits for its parent to collect it."""
        return self.state in ("Z", "X")


def process_stat(pid: int) -> Optional[ProcessStat]:
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
    return ProcessStat(state=rest[0].decode(), session=int(rest[3]), ticks=int(rest[19]))


# ── cgroups ──────────────────────────────────────────────────────────────────


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes come as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def cgroup_parent() -> tuple[Optional[Path], str]:
    """The directory of this process's own cgroup v2, if jobs' cgroups can be made
    in it; else None and why not.

    Read from ``/proc/self/cgroup`` (its ``0::`` line) and ``/proc/self/mountinfo``
    (where cgroup2 is mounted, and which part of the hierarchy the mount shows),
    never from a fixed path: systemd mounts cgroup2 at /sys/fs/cgroup, a hybrid
    layout at /sys/fs/cgroup/unified, a container wherever it likes.
    """
    try:
        own = next(
            (line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")),
            None,
        )
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as e:
        return None, f"cannot read /proc ({e.strerror})"
    if own is None:
        return None, "this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)"
    for line in mounts:
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if not tail.startswith("cgroup2 ") or len(parts) < 5:
            continue
        root, mountpoint = _unescape(parts[3]), _unescape(parts[4])
        if own != root and not own.startswith(root.rstrip("/") + "/"):
            continue  # this mount does not show the part of the hierarchy this process is in
        here = Path(mountpoint) / own[len(root) :].lstrip("/")
        if os.access(here, os.W_OK) and os.access(here / "cgroup.procs", os.W_OK):
            return here, ""
        return None, (
            f"cannot write to this process's cgroup {here}: a job gets a cgroup of its own "
            "only as root or under a delegated cgroup (a systemd unit with Delegate=yes)"
        )
    return None, "cgroup v2 is not mounted (see /proc/self/mountinfo)"


def cgroup_dir(proc_cgroup: Path) -> Optional[Path]:
    """The directory of the cgroup v2 a ``/proc/<pid>/cgroup`` file names (its
    ``0::`` line), where this process sees it mounted; None when it cannot tell."""
    try:
        own = next((line[3:] for line in proc_cgroup.read_text().splitlines() if line.startswith("0::")), None)
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    if own is None:
        return None
    for line in mounts:
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if tail.startswith("cgroup2 ") and len(parts) >= 5:
            root, mountpoint = _unescape(parts[3]), _unescape(parts[4])
            if own == root or own.startswith(root.rstrip("/") + "/"):
                return Path(mountpoint) / own[len(root) :].lstrip("/")
    return None


def make_cgroup(name: str) -> Optional[Path]:
    """A new, empty cgroup for job ``name``; None where the node does not allow one."""
    parent, _why = cgroup_parent()
    if parent is None:
        return None
    import secrets  # here, not above: only a cgroup being made needs a random name (secrets loads hmac)

    path = parent / f"{CGROUP_PREFIX}{name}.{secrets.token_hex(4)}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not os.access(path / "cgroup.procs", os.W_OK):
        remove_cgroup(path)
        return None
    return path


def _write(path: Path, data: bytes) -> None:
    """Write to a cgroup's control file, never creating it: in a directory that
    is not a cgroup (any more) this must fail, not leave a stray file."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def join_cgroup(path: Path) -> None:
    """Move the calling process into ``path`` (a child does this before it runs the command)."""
    _write(path / "cgroup.procs", b"0")


def remove_cgroup(path: Optional[Path]) -> None:
    """Remove an empty job cgroup; one already gone, or still in use, is left alone."""
    if path is None:
        return
    try:
        path.rmdir()
    except OSError:
        pass


def _cgroup_pids(path: Path) -> set[int]:
    try:
        return {int(p) for p in (path / "cgroup.procs").read_text().split()}
    except (FileNotFoundError, ValueError):
        return set()


# ── the job's processes ──────────────────────────────────────────────────────


@dataclass(frozen=True)
class JobProcesses:
    """The processes of the job whose supervisor is (or was) ``session``.

    The supervisor itself is not one of them: it outlives its command to end
    them and to record how the job ended.
    """

    session: int
    cgroup: Optional[Path] = None
    #: False when ``session``'s number now belongs to another process, so no
    #: session of this job can exist (only its cgroups are looked at)
    by_session: bool = True
    #: the job's cgroup of the v1 devices hierarchy, where that fences it
    devices: Optional[Path] = None

    def _cgroups_pids(self) -> set[int]:
        return {pid for path in (self.cgroup, self.devices) if path is not None for pid in _cgroup_pids(path)}

    def pids(self) -> list[int]:
        """Every process of the job that has not ended, by pid."""
        found = self._cgroups_pids()
        if self.by_session:
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and self._in_session(int(entry.name)):
                    found.add(int(entry.name))
        found.discard(self.session)
        return sorted(p for p in found if not self._ended(p))

    def send(self, signum: int) -> None:
        """Send ``signum`` once to every process of the job."""
        for pid in self.pids():
            self._send(pid, signum)

    def kill(self) -> None:
        """SIGKILL to every process of the job, the cgroup's all at once where the kernel can."""
        if self.cgroup is not None:
            try:
                _write(self.cgroup / "cgroup.kill", b"1")
            except OSError:
                pass  # no cgroup.kill before Linux 5.14: each is signalled below
        self.send(signal.SIGKILL)

    def wait_gone(self, timeout_s: float, *, kill: bool = False) -> bool:
        """Wait until no process of the job is left (True), at most ``timeout_s``.

        With ``kill``, every process is SIGKILLed again each round: one forked
        between two rounds is caught by the next.
        """
        deadline = time.monotonic() + timeout_s
        while self.left(kill=kill):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def left(self, *, kill: bool = False) -> bool:
        """Whether any process of the job is left; with ``kill``, each gets SIGKILL
        again: one round of :meth:`wait_gone`, for a caller that waits its own way."""
        if not self.pids():
            return False
        if kill:
            self.kill()
        return True

    def _in_session(self, pid: int) -> bool:
        try:
            stat = process_stat(pid)
        except PermissionError:
            return False
        return stat is not None and stat.session == self.session

    def _member(self, pid: int) -> bool:
        if self.by_session and self._in_session(pid):
            return True
        return pid in self._cgroups_pids()

    @staticmethod
    def _ended(pid: int) -> bool:
        try:
            stat = process_stat(pid)
        except PermissionError:
            return False
        return stat is None or stat.ended

    def _send(self, pid: int, signum: int) -> None:
        """Signal ``pid`` only if, held by a pidfd, it is still one of the job's."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError:  # no pidfd (before Linux 5.3): checked, then signalled by number
            if self._member(pid):
                _kill(pid, signum)
            return
        try:
            if self._member(pid):
                signal.pidfd_send_signal(fd, signum)
        except (ProcessLookupError, PermissionError):
            pass
        finally:
            os.close(fd)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
