"""The node's log: who did what, and what happened to the cards, as JSON lines.

Append-only files in the state dir; every action is appended before its
answer, so the log never misses an attempt someone may have seen. Each line
has at least ``time``, ``kind`` and ``message``. It is kept on shelves, the
node's (``events.jsonl``) and each ordinary account's
(``accounts/<uid>.jsonl``), each rotated on its own, so one account's flood
pushes out only its own entries. Times are unique and rising, so a page ends
exactly where the next begins. The log is evidence, not truth. See
docs/architecture.md, section 'The door' ("Refusals and the audit").
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

log = logging.getLogger(__name__)

LOG_FILE = "events.jsonl"
#: the directory of the ordinary accounts' shelves, one file (and its rotations) per uid
ACCOUNTS_DIR = "accounts"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_ACCOUNT_MAX_BYTES = 2 * 1024 * 1024
DEFAULT_KEEP = 3
#: how far apart two entries' times are at least (well above a float's step at today's unix time)
_TICK_S = 1e-6
#: what of one entry is read back at most: a text's characters, a list's items, an
#: object's keys. Entries are written short (service/journal.py), but a log kept by
#: an older version, or edited, may hold a line of megabytes; read back whole, a
#: page of a thousand of them would be held, and sent, whole.
ENTRY_TEXT_MOST, ENTRY_ITEMS_MOST = 1000, 64


class NodeLog:
    """``state_dir/events.jsonl``, each ordinary account's shelf, and their rotated predecessors."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = DEFAULT_KEEP,
        account_max_bytes: int = DEFAULT_ACCOUNT_MAX_BYTES,
    ) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOG_FILE
        self.accounts = self.dir / ACCOUNTS_DIR
        self.max_bytes = max_bytes
        self.account_max_bytes = account_max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._warned = False
        self._last = 0.0

    def shelf(self, account: Optional[int]) -> Path:
        """The file an entry goes to: an ordinary account's own (``account``, its
        uid), or the node's (None)."""
        return self.path if account is None else self.accounts / f"{account}.jsonl"

    def append(self, kind: str, message: str, *, account: Optional[int] = None, **fields: Any) -> dict[str, Any]:
        """Append one entry (to ``account``'s shelf, else the node's) and return
        it. A log that cannot be written is said once in the process's log and
        never stops the action it records: the node's truth is elsewhere.
        Without a state dir nothing is written."""
        path = self.shelf(account)
        with self._lock:
            # unique and rising: a page that ends at one entry's time misses none
            now = max(time.time(), self._last + _TICK_S)
            self._last = now
            entry = {"time": now, "kind": kind, "message": message, **fields}
            line = json.dumps(entry, separators=(",", ":")) + "\n"
            try:
                if account is not None:
                    self.accounts.mkdir(mode=0o700, exist_ok=True)
                self._rotate_if_full(path, len(line), self.max_bytes if account is None else self.account_max_bytes)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
                self._warned = False
            except OSError as e:
                # No state dir (yet): nothing has been kept on this node, and a
                # log is no reason to make one (a docker node with a Redis lock
                # needs none). The agent's, and a process launch's, exists.
                if isinstance(e, FileNotFoundError) and not self.dir.exists():
                    return entry
                # A state dir this process may not write in is said by whatever it
                # was doing there (the lock, the record), in one line: not twice.
                if not self._warned and os.access(self.dir, os.W_OK | os.X_OK):
                    log.warning("cannot write the node log %s: %s", path, e.strerror or e)
                    self._warned = True
        return entry

    def _rotate_if_full(self, path: Path, adding: int, most: int) -> None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return
        if size + adding <= most:
            return
        _rotated(path, self.keep).unlink(missing_ok=True)
        for n in range(self.keep - 1, 0, -1):
            if _rotated(path, n).exists():
                os.replace(_rotated(path, n), _rotated(path, n + 1))
        os.replace(path, _rotated(path, 1))

    def _shelves(self, accounts: Optional[Iterable[int]]) -> list[Path]:
        """The shelves to read: the node's, and every account's (None) or those named."""
        if accounts is not None:
            return [self.path, *(self.shelf(uid) for uid in sorted(set(accounts)))]
        try:
            own = sorted(p for p in self.accounts.iterdir() if p.name.endswith(".jsonl"))
        except OSError:
            own = []
        return [self.path, *own]

    def files(self, accounts: Optional[Iterable[int]] = None) -> list[Path]:
        """The log's files, each shelf's oldest first: every shelf (None), or the
        node's and those of ``accounts`` (uids)."""
        return [p for shelf in self._shelves(accounts) for p in _generations(shelf, self.keep) if p.exists()]

    def read(
        self,
        *,
        since: Optional[float] = None,
        before: Optional[float] = None,
        kinds: Optional[set[str]] = None,
        accounts: Optional[Iterable[int]] = None,
    ) -> Iterator[dict[str, Any]]:
        """Entries from ``since`` to before ``before``, oldest first, from every
        shelf (``accounts`` None) or the node's and those accounts' own, merged
        by time; a line that is not an entry (cut short by a crash mid-write) is
        skipped, since the next ones are still good."""
        shelves = [_entries(_generations(shelf, self.keep), since, before, kinds) for shelf in self._shelves(accounts)]
        return heapq.merge(*shelves, key=_time)


def bounded(value: Any, depth: int = 0) -> Any:
    """``value`` as it is read back: texts, lists and objects cut to what an
    entry may hold (ENTRY_TEXT_MOST, ENTRY_ITEMS_MOST), nested at most 4 deep."""
    if isinstance(value, str):
        return value if len(value) <= ENTRY_TEXT_MOST else value[: ENTRY_TEXT_MOST - 1] + "…"
    if depth >= 4 and isinstance(value, (list, dict)):
        return "…"
    if isinstance(value, list):
        return [bounded(v, depth + 1) for v in value[:ENTRY_ITEMS_MOST]]
    if isinstance(value, dict):
        return {k[:ENTRY_TEXT_MOST]: bounded(v, depth + 1) for k, v in list(value.items())[:ENTRY_ITEMS_MOST]}
    return value


def _time(entry: dict[str, Any]) -> float:
    return float(entry["time"])


def _rotated(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def _generations(path: Path, keep: int) -> list[Path]:
    """A shelf's files, oldest first."""
    return [*(_rotated(path, n) for n in range(keep, 0, -1)), path]


def _entries(
    paths: list[Path], since: Optional[float], before: Optional[float], kinds: Optional[set[str]]
) -> Iterator[dict[str, Any]]:
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if kinds is not None and not any(kind in line for kind in kinds):
                        continue  # cannot be one of them: not parsed (the service reads its kinds back at start)
                    try:
                        entry = json.loads(line)
                    except (json.JSONDecodeError, RecursionError, ValueError):
                        continue
                    if not isinstance(entry, dict) or not isinstance(entry.get("time"), (int, float)):
                        continue
                    when = entry["time"]
                    if (since is not None and when < since) or (before is not None and when >= before):
                        continue
                    if kinds is not None and entry.get("kind") not in kinds:
                        continue
                    # a line shorter than a text may be holds nothing to cut: most of them, left as read
                    yield bounded(entry) if len(line) > ENTRY_TEXT_MOST else entry
        except FileNotFoundError:
            continue  # rotated away while reading
