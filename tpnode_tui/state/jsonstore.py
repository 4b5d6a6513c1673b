"""A small JSON document of named records in the state dir, right or loudly unreadable.

The launch queue, the drains and the checks must each survive the same
accidents, so the way they are kept is written once: a read-modify-write
under ``flock`` on a separate lock file, an atomic replace (0600), a document
that cannot be understood raising :class:`RuntimeUnavailable` and never
written over, and, with ``set_aside``, one bad record moved beside it. See
docs/architecture.md, section 'The state dir's documents'.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

from tpnode_tui.config.statedir import state_dir_unusable
from tpnode_tui.model.errors import RuntimeUnavailable

R = TypeVar("R")

#: A lock is only ever held for a few file operations (and a process spawn),
#: so a wait this long means another process is stuck holding it. Saying so
#: beats a launch or a dashboard that hangs without a word.
DEFAULT_LOCK_TIMEOUT_S = 30.0
_LOCK_POLL_S = 0.02
#: how many records a set-aside file keeps (the newest): it is for an operator to look at, not a second store
SET_ASIDE_KEPT = 1000


@dataclass(frozen=True)
class SetAside:
    """A record moved out of its document because it could not be understood."""

    key: str
    why: str
    #: where it was moved to
    path: Path


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
        set_aside: Optional[str] = None,
        on_set_aside: Optional[Callable[[SetAside], None]] = None,
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
        #: where a record that cannot be understood is moved (None: it stops the whole document)
        self.set_aside_path = None if set_aside is None else self.dir / set_aside
        #: told of each record set aside, once, after it was moved
        self.on_set_aside = on_set_aside

    def read(self) -> dict[str, R]:
        """Every record, under a shared lock. A missing directory or file holds none.
        A record that cannot be understood is set aside first, under the
        exclusive lock, where the document allows it."""
        if not self.path.exists():
            return {}
        with self._locked(fcntl.LOCK_SH):
            records, bad = self._sorted()
        if not bad:
            return records
        with self.transaction() as records:
            return dict(records)

    @contextmanager
    def transaction(self) -> Iterator[dict[str, R]]:
        """Hold the exclusive lock; yield the records to change in place.

        Written back when the block ends without an exception and something
        changed. The document is read first, so one that cannot be read stops
        the change before anything is touched.
        """
        self.ensure_dir()
        moved: list[SetAside] = []
        with self._locked(fcntl.LOCK_EX):
            records, bad = self._sorted()
            if bad:
                moved = self._set_aside(bad)
                self._write(records)
            before = dict(records)
            yield records
            if records != before or list(records) != list(before):
                self._write(records)
        for record in moved:
            if self.on_set_aside is not None:
                self.on_set_aside(record)

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
        except OSError as e:  # the allocation lock's words for the same cause; RuntimeUnavailable, which
            # the supervisors and the queue catch to keep a hold and a launch as they are
            raise RuntimeUnavailable(state_dir_unusable(self.dir, e, f"be used to lock {self.path.name}")) from None
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

    def _sorted(self) -> tuple[dict[str, R], dict[str, tuple[Any, str]]]:
        """The records, and those that could not be understood (key -> what was
        written, and why) where they may be set aside; else one bad record
        raises for the whole document."""
        good: dict[str, R] = {}
        bad: dict[str, tuple[Any, str]] = {}
        for key, value in self._records().items():
            try:
                good[key] = self._parse(key, value)
            except ValueError as e:
                if self.set_aside_path is None:
                    raise self.unreadable(f"has a record that cannot be understood ({e})") from None
                bad[key] = (value, str(e))
        return good, bad

    def _records(self) -> dict[str, Any]:
        """The document's records as written (none when there is no file); the
        document itself refused, whole, when it is not one this code wrote."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot read the {self.what} {self.path}: {e.strerror}; "
                f"run as the user that owns {self.dir}, or through the node's agent"
            ) from None
        doc = self._json(raw)
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
        return records

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise self.unreadable("is not UTF-8 text") from None
        except RecursionError:
            raise self.unreadable("is nested too deep to be read") from None
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

    def _set_aside(self, bad: dict[str, tuple[Any, str]]) -> list[SetAside]:
        """Move ``bad`` records to the set-aside file (0600, the newest
        SET_ASIDE_KEPT kept), with why and when, before the document is written
        without them: a record is never dropped without a trace."""
        assert self.set_aside_path is not None
        path = self.set_aside_path
        try:
            kept = json.loads(path.read_text(encoding="utf-8")).get("set_aside", [])
            kept = kept if isinstance(kept, list) else []
        except (OSError, ValueError, AttributeError):
            kept = []
        now = time.time()
        kept += [{"key": key, "why": why, "at": now, "record": value} for key, (value, why) in bad.items()]
        self._write_file(path, json.dumps({"version": 1, "set_aside": kept[-SET_ASIDE_KEPT:]}, indent=1))
        return [SetAside(key, why, path) for key, (_value, why) in bad.items()]

    def set_aside_count(self) -> int:
        """How many records the set-aside file holds (0 when there is none)."""
        if self.set_aside_path is None:
            return 0
        try:
            kept = json.loads(self.set_aside_path.read_text(encoding="utf-8")).get("set_aside", [])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, AttributeError):
            return 1  # something is there, and an operator should look
        return len(kept) if isinstance(kept, list) else 1

    def _write(self, records: dict[str, R]) -> None:
        text = json.dumps(
            {"version": self.version, self.section: {k: self._dump(r) for k, r in records.items()}},
            indent=1,
        )
        self._write_file(self.path, text)

    def _write_file(self, path: Path, text: str) -> None:
        prefix = f".{path.name}."
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
            os.replace(tmp, path)
            tmp = None
        except OSError as e:
            raise RuntimeUnavailable(
                f"cannot write the {self.what} {path}: {e.strerror}; the previous version was kept, so nothing changed"
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
