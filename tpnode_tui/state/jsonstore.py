"""A small JSON document of named records in the state dir, right or loudly unreadable.

The node keeps a few such documents besides the process runtime's state
file (the agent's launch queue, the drained cards), and each has to survive
the same accidents, so the way they are kept is written once, here:

* Every change is a read-modify-write under an exclusive ``flock`` on a
  separate lock file (the data file is replaced on every write, and a lock on
  a replaced file guards nothing), so two writers never lose each other's change.
* A write goes to a temporary file in the same directory, is fsynced, then
  renamed over the old one: a crash or a full disk leaves the old document or
  the new one, never half of each. Files are 0600.
* A document that cannot be understood (cut short, edited badly, written by a
  newer version) raises :class:`RuntimeUnavailable` and is never written over:
  read as empty, a queue would drop people's launches and a drain list would
  hand out cards an operator took out of service.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from tpnode_tui.model.errors import RuntimeUnavailable

R = TypeVar("R")

#: A lock is only ever held for a few file operations (and a process spawn),
#: so a wait this long means another process is stuck holding it. Saying so
#: beats a launch or a dashboard that hangs without a word.
DEFAULT_LOCK_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.02


class JsonStore(Generic[R]):
    """``directory/<name>`` holding ``{"version": N, <section>: {key: record}}``.

    ``parse(key, data)`` turns one record's JSON into ``R`` or raises
    ValueError saying what is wrong; ``dump(record)`` is its inverse.
    ``losing`` says, for the error message, what reading a broken document
    as empty would lose.
    """

    def __init__(
        self,
        directory: Path,
        name: str,
        *,
        section: str,
        version: int,
        parse: Callable[[str, Any], R],
        dump: Callable[[R], dict[str, Any]],
        what: str,
        losing: str,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> None:
        self.dir = Path(directory)
        self.path = self.dir / name
        self.lock_path = self.dir / f"{name}.lock"
        self.section = section
        self.version = version
        self._parse = parse
        self._dump = dump
        self.what = what
        self.losing = losing
        self.lock_timeout_s = lock_timeout_s

    def read(self) -> dict[str, R]:
        """Every record, under a shared lock. A missing directory or file holds none."""
        if not self.path.exists():
            return {}
        with self._locked(fcntl.LOCK_SH):
            return self._load()

    @contextmanager
    def transaction(self) -> Iterator[dict[str, R]]:
        """Hold the exclusive lock; yield the records to change in place.

        Written back when the block ends without an exception and something
        changed. The document is read first, so one that cannot be read stops
        the change before anything is touched.
        """
        self.ensure_dir()
        with self._locked(fcntl.LOCK_EX):
            records = self._load()
            before = dict(records)
            yield records
            if records != before or list(records) != list(before):
                self._write(records)

    def ensure_dir(self) -> None:
        """Create the directory (0700) if missing; an existing one keeps its mode."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot create the state directory {self.dir}: {e.strerror}; "
                "run as a user who may create it (every allocator on this node shares it)"
            ) from None

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        """``flock(mode)`` on the lock file for at most ``lock_timeout_s``.

        The descriptor is close-on-exec: a job spawned while it is held must
        not inherit it, or the lock would stay held for as long as the job runs.
        """
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot open the lock file {self.lock_path}: {e.strerror}; "
                f"run as the user that owns {self.dir}, or through the node's agent"
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

    def unreadable(self, what: str) -> RuntimeUnavailable:
        return RuntimeUnavailable(
            f"the {self.what} {self.path} {what}. It was left untouched and nothing that "
            f"changes it can be done until it is repaired: read as empty, {self.losing}"
        )

    def _load(self) -> dict[str, R]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot read the {self.what} {self.path}: {e.strerror}; "
                f"run as the user that owns {self.dir}, or through the node's agent"
            ) from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise self.unreadable("is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            where = (
                "is empty"
                if not raw.strip()
                else (
                    f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                    "it may have been cut short or edited by hand"
                )
            )
            raise self.unreadable(where) from None
        if not isinstance(doc, dict) or "version" not in doc:
            raise self.unreadable('has no "version": it is not a tpnode-tui file')
        version = doc["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise self.unreadable(f"has version {version!r}, which no tpnode-tui writes")
        if version > self.version:
            raise self.unreadable(
                f"has version {version}, written by a newer tpnode-tui than this one "
                f"(which reads version {self.version}); upgrade tpnode-tui"
            )
        records = doc.get(self.section)
        if not isinstance(records, dict) or set(doc) != {"version", self.section}:
            raise self.unreadable(f'does not hold exactly "version" and a "{self.section}" object')
        try:
            return {key: self._parse(key, value) for key, value in records.items()}
        except ValueError as e:
            raise self.unreadable(f"has a record that cannot be understood ({e})") from None

    def _write(self, records: dict[str, R]) -> None:
        text = json.dumps(
            {"version": self.version, self.section: {k: self._dump(r) for k, r in records.items()}},
            indent=1,
        )
        prefix = f".{self.path.name}."
        tmp = None
        try:
            # Writers hold the exclusive lock, so a temporary file already here
            # was left by a writer that died mid-write: never read, safe to drop.
            for stale in self.dir.glob(f"{prefix}*.tmp"):
                stale.unlink(missing_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=self.dir)
            with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp makes it 0600
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            tmp = None
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot write the {self.what} {self.path}: {e.strerror}; "
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
