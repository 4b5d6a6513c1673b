"""The node's log: who did what, and what happened to the cards, as JSON lines.

One append-only file in the state dir (``events.jsonl``), written by whoever
serves the node (the agent, or an in-process allocator). Every action asked
of the node is appended before its answer is sent, allowed or not, so the log
never misses an attempt whose effect someone may have seen. Each line is one
JSON object with at least ``time``, ``kind`` and ``message``, a plain sentence.

It never grows without bound: past ``max_bytes`` the file is rotated
(``events.jsonl.1`` ... ``.N``, oldest dropped), as logrotate would. Reading
spans the rotated files too, oldest first.

The log is evidence, not truth: nothing decides who holds a card from it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

log = logging.getLogger(__name__)

LOG_FILE = "events.jsonl"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_KEEP = 3


class NodeLog:
    """``state_dir/events.jsonl`` and its rotated predecessors."""

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOG_FILE
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._warned = False

    def append(self, kind: str, message: str, **fields: Any) -> dict[str, Any]:
        """Append one entry and return it. A log that cannot be written is
        said once in the process's log and never stops the action it records:
        the node's truth is elsewhere. Without a state dir nothing is written."""
        entry = {"time": time.time(), "kind": kind, "message": message, **fields}
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                self._rotate_if_full(len(line))
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
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
                if not self._warned:
                    log.warning("cannot write the node log %s: %s", self.path, e.strerror or e)
                    self._warned = True
        return entry

    def _rotate_if_full(self, adding: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + adding <= self.max_bytes:
            return
        oldest = self._rotated(self.keep)
        oldest.unlink(missing_ok=True)
        for n in range(self.keep - 1, 0, -1):
            if self._rotated(n).exists():
                os.replace(self._rotated(n), self._rotated(n + 1))
        os.replace(self.path, self._rotated(1))

    def _rotated(self, n: int) -> Path:
        return self.dir / f"{LOG_FILE}.{n}"

    def files(self) -> list[Path]:
        """The log's files, oldest first."""
        rotated = [self._rotated(n) for n in range(self.keep, 0, -1)]
        return [p for p in (*rotated, self.path) if p.exists()]

    def read(self, *, since: Optional[float] = None, kinds: Optional[set[str]] = None) -> Iterator[dict[str, Any]]:
        """Entries oldest first; a line that is not an entry (cut short by a
        crash mid-write) is skipped, since the next ones are still good."""
        for path in self.files():
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        try:
                            entry = json.loads(line)
                        except json.JSONDecodeError:
                            continue
                        if not isinstance(entry, dict) or not isinstance(entry.get("time"), (int, float)):
                            continue
                        if since is not None and entry["time"] < since:
                            continue
                        if kinds is not None and entry.get("kind") not in kinds:
                            continue
                        yield entry
            except FileNotFoundError:
                continue  # rotated away while reading
