"""The real agent, in its own process, with its probe reads and snapshot encodings counted.

``python bench/agent_counted.py READS_FILE ENCODES_FILE [tpnode-tui arguments...]``

Runs ``tpnode_tui.cli.main`` (``agent`` and the given flags), exactly as
``tpnode-tui agent`` would, after wrapping two functions so that each call
appends one byte to a file, whose size is then the number of calls so far:

- ``SimulatedProbe.read``, into READS_FILE: a probe read. Counted at the
  probe, not at the scene file, because the simulated XID watcher also reads
  that file (five times a second), and a file's atime or inotify would count
  those too; on a real node the probe is the driver, and a probe read is what
  twenty dashboards must not multiply.
- ``snapshot_to_json`` as the agent's door calls it (for the streams) and as
  the port's table does (for ``GET /v1/snapshot``'s answer), into
  ENCODES_FILE: a snapshot made into JSON for a client. The streams share one
  encoding per reading; every ``GET /v1/snapshot`` makes its own.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import common  # noqa: F401  (the checkout on sys.path)
from tpnode_tui import cli
from tpnode_tui.agent import api
from tpnode_tui.port import operations
from tpnode_tui.probes.simulated import SimulatedProbe


def _appender(path: str) -> Callable[[], None]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    return lambda: os.write(fd, b".") and None  # one append: a whole byte or none, whoever reads the size


def count_calls(reads_path: str, encodes_path: str) -> None:
    read, encode = SimulatedProbe.read, api.snapshot_to_json
    count_read, count_encode = _appender(reads_path), _appender(encodes_path)

    async def counted_read(self: SimulatedProbe):
        count_read()
        return await read(self)

    def counted_encode(*args: Any, **kwargs: Any):
        count_encode()
        return encode(*args, **kwargs)

    SimulatedProbe.read = counted_read  # type: ignore[method-assign]
    api.snapshot_to_json = counted_encode  # type: ignore[assignment]
    operations.snapshot_to_json = counted_encode  # type: ignore[assignment]


if __name__ == "__main__":
    count_calls(sys.argv[1], sys.argv[2])
    sys.exit(cli.main(sys.argv[3:]))
