"""The process runtime's state file: the only record of which cards its jobs hold.

Processes carry no labels, so the platform's knowledge of them lives in one
JSON document, ``jobs.json``, next to a lock file. Everything about it is
chosen so that the file is either right or loudly unreadable:

* Every change is a read-modify-write under an exclusive ``flock`` on a
  separate lock file, so two launchers (the dashboard and a CLI) cannot both
  read the old list and each write back a copy missing the other's job.
  The lock lives on its own file because the data file is replaced on every
  write, and a lock on a file that has been replaced guards nothing.
* A write goes to a temporary file in the same directory, is fsynced, then
  renamed over the old one: a crash or a full disk leaves the old document or
  the new one, never half of each.
* A file that cannot be understood (cut short, hand-edited badly, written by a
  newer version) raises :class:`RuntimeUnavailable` and is never written over.
  Treating it as "no jobs" would hand every card to the next launch while the
  jobs it listed still run; writing over it would lose them for good.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Optional

from ..model import JOB_KINDS, RuntimeUnavailable
from .jobprocs import CGROUP_PREFIX

STATE_VERSION = 1
STATE_FILE = "jobs.json"
LOCK_FILE = "jobs.json.lock"

#: The lock is only ever held for a few file operations and one process spawn,
#: so a wait this long means another process is stuck holding it. Saying so
#: beats a launch or a dashboard that hangs without a word.
DEFAULT_LOCK_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.02


@dataclass(frozen=True)
class JobRecord:
    """One job as the state file records it.

    ``pid`` is the job's supervisor, and ``pid_start_ticks`` and ``boot_id`` say
    which process that pid meant: pids are reused, and signalling or counting
    as running whatever process holds the number now would be wrong. The start
    is kept in clock ticks since boot (from ``/proc``), not as a wall-clock
    time, because a wall-clock start time is derived from the boot time, which
    moves whenever the system clock is stepped or slewed; a job running for
    days would then stop matching its own record and its cards would look free.
    """

    name: str
    run_id: str
    gpus: tuple[int, ...]
    kind: str
    owner: str
    command: tuple[str, ...]
    #: unix seconds, for display
    started_at: float
    expires_at: Optional[float]
    pid: int
    pid_start_ticks: int
    boot_id: str
    log: str
    #: ``None`` until the supervisor records how the command ended
    exit_code: Optional[int] = None
    #: the allocation lock's fencing number when the cards were picked
    fence: Optional[int] = None
    #: True while the supervisor waits for ``start``: the job holds its cards
    #: ("created") but its command has not run yet
    gated: bool = False
    #: the PID namespace the pid belongs to (``/proc/self/ns/pid`` of the
    #: launcher); a reader in another namespace cannot look the pid up
    pid_ns: str = ""
    #: the directory of the job's own cgroup (v2), "" when it has none: then
    #: only its session can be found, and a process that left it (setsid) is not
    cgroup: str = ""
    #: how the job ended, in plain words, where the exit code does not say it
    #: all (e.g. "killed by SIGKILL after 10 s")
    note: str = ""
    #: the owner's uid, so that rules compare accounts, not names (None: not recorded)
    uid: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        data["command"] = list(self.command)
        return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_CHECKS: dict[str, tuple[Any, str]] = {
    "name": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "run_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "gpus": (
        lambda v: isinstance(v, list) and all(_is_int(i) and i >= 0 for i in v),
        "a list of card indices",
    ),
    "kind": (lambda v: v in JOB_KINDS, f"one of {', '.join(JOB_KINDS)}"),
    "owner": (lambda v: isinstance(v, str), "a string"),
    "command": (
        lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
        "a list of strings",
    ),
    "started_at": (_is_number, "a number"),
    "expires_at": (lambda v: v is None or _is_number(v), "a number or null"),
    "pid": (lambda v: _is_int(v) and v > 0, "a positive whole number"),
    "pid_start_ticks": (lambda v: _is_int(v) and v >= 0, "a whole number"),
    "boot_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "log": (lambda v: isinstance(v, str), "a string"),
    "exit_code": (lambda v: v is None or _is_int(v), "a whole number or null"),
    "fence": (lambda v: v is None or (_is_int(v) and v >= 0), "a whole number or null"),
    "gated": (lambda v: isinstance(v, bool), "true or false"),
    "pid_ns": (lambda v: isinstance(v, str), "a string"),
    # Only a cgroup this runtime made: stopping the job kills everything in it.
    "cgroup": (
        lambda v: isinstance(v, str) and (
            v == "" or (v.startswith("/") and "\0" not in v and ".." not in PurePosixPath(v).parts
                        and PurePosixPath(v).name.startswith(CGROUP_PREFIX))
        ),
        f'"" or the absolute path of a cgroup named {CGROUP_PREFIX}*',
    ),
    "note": (lambda v: isinstance(v, str), "a string"),
    "uid": (lambda v: v is None or (_is_int(v) and v >= 0), "a whole number or null"),
}


def record_from_json(key: str, data: Any) -> JobRecord:
    """A record from its JSON form; ValueError saying what is wrong with it.

    Every field is checked, and an unknown one is refused rather than dropped:
    a record that cannot be fully understood might hold cards nobody can see,
    and rewriting the file without a field would lose it silently.
    """
    if not isinstance(data, dict):
        raise ValueError(f"job {key!r} is not a JSON object")
    names = {f.name for f in fields(JobRecord)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"job {key!r} has unknown fields {unknown}")
    optional = {f.name for f in fields(JobRecord) if f.default is not MISSING}
    for name in names:
        if name not in data:
            if name in optional:
                continue
            raise ValueError(f"job {key!r} has no {name!r}")
        check, wanted = _CHECKS[name]
        if not check(data[name]):
            raise ValueError(f"job {key!r} field {name!r} is {data[name]!r}, expected {wanted}")
    if data["name"] != key:
        raise ValueError(f"job {key!r} is recorded under the name {data['name']!r}")
    values = dict(data, gpus=tuple(data["gpus"]), command=tuple(data["command"]))
    return JobRecord(**values)


class StateFile:
    """``state_dir/jobs.json`` and its lock. Holds nothing between calls."""

    def __init__(self, state_dir: Path, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        self.lock_path = self.dir / LOCK_FILE
        self.lock_timeout_s = lock_timeout_s

    def read(self) -> dict[str, JobRecord]:
        """Every record, under a shared lock. A missing directory or file is no jobs."""
        if not self.dir.exists():
            return {}
        with self._locked(fcntl.LOCK_SH):
            return self._load()

    @contextmanager
    def transaction(self) -> Iterator[dict[str, JobRecord]]:
        """Hold the exclusive lock; yield the records to change in place.

        They are written back when the block ends without an exception and
        something changed. The file is read first, so a file that cannot be
        read stops the write before anything is touched.
        """
        self.ensure_dir()
        with self._locked(fcntl.LOCK_EX):
            jobs = self._load()
            before = dict(jobs)
            yield jobs
            if jobs != before:
                self._write(jobs)

    def ensure_dir(self) -> None:
        """Create the state directory (0700) if missing; an existing one keeps its mode."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot create the state directory {self.dir}: {e.strerror}; "
                "run as a user who may create it (every allocator on this node shares it)"
            ) from None

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        """Hold ``flock(mode)`` on the lock file, waiting at most ``lock_timeout_s``.

        The descriptor is close-on-exec (Python's default, relied on here): a
        job spawned while the lock is held must not inherit it, or the lock
        would stay held for as long as the job runs.
        """
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot open the lock file {self.lock_path}: {e.strerror}; "
                f"run as the user that owns {self.dir}"
            ) from None
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise RuntimeUnavailable(
                            f"the lock file {self.lock_path} has been held by another process "
                            f"for {self.lock_timeout_s:g}s; find it with: fuser -v {self.lock_path}"
                        ) from None
                    time.sleep(_LOCK_POLL_S)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _unreadable(self, what: str) -> RuntimeUnavailable:
        return RuntimeUnavailable(
            f"the state file {self.path} {what}. It was left untouched, and no job can be "
            "launched or changed until it is repaired: moving it aside would make the cards "
            "of the jobs it lists look free while those jobs may still run"
        )

    def _load(self) -> dict[str, JobRecord]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot read the state file {self.path}: {e.strerror}; "
                f"run as the user that owns {self.dir}"
            ) from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise self._unreadable("is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            where = "is empty" if not raw.strip() else (
                f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                "it may have been cut short or edited by hand"
            )
            raise self._unreadable(where) from None
        if not isinstance(doc, dict) or "version" not in doc:
            raise self._unreadable("has no \"version\": it is not a tpnode-tui state file")
        version = doc["version"]
        if not _is_int(version) or version < 1:
            raise self._unreadable(f"has version {version!r}, which no tpnode-tui writes")
        if version > STATE_VERSION:
            raise self._unreadable(
                f"has version {version}, written by a newer tpnode-tui than this one "
                f"(which reads version {STATE_VERSION}); upgrade tpnode-tui"
            )
        jobs = doc.get("jobs")
        if not isinstance(jobs, dict) or set(doc) != {"version", "jobs"}:
            raise self._unreadable("does not hold exactly \"version\" and a \"jobs\" object")
        try:
            return {key: record_from_json(key, value) for key, value in jobs.items()}
        except ValueError as e:
            raise self._unreadable(f"has a record that cannot be understood ({e})") from None

    def _write(self, jobs: dict[str, JobRecord]) -> None:
        text = json.dumps(
            {"version": STATE_VERSION, "jobs": {k: r.to_json() for k, r in jobs.items()}},
            indent=1,
        )
        tmp = None
        try:
            # Writers hold the exclusive lock, so any temporary file already
            # here was left by a writer that died mid-write: never read, safe to drop.
            for stale in self.dir.glob(".jobs.json.*.tmp"):
                stale.unlink(missing_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".jobs.json.", suffix=".tmp", dir=self.dir)
            with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp makes it 0600
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            tmp = None
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot write the state file {self.path}: {e.strerror}; "
                "the previous version was kept, so nothing changed"
            ) from None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        # The new document is in place; syncing the directory only makes the
        # rename survive a power cut, so a failure here changes no answer.
        try:
            dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass
