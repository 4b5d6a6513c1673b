"""The real agent, in its own process, with every probe read counted.

``python bench/agent_counted.py COUNT_FILE [tpnode-tui arguments...]``

Runs ``tpnode_tui.cli.main`` (``agent`` and the given flags), exactly as
``tpnode-tui agent`` would, after wrapping ``SimulatedProbe.read`` so that
each read appends one byte to COUNT_FILE: its size is the number of reads so
far. Counting at the probe, not at the scene file, because the simulated
XID watcher also reads that file (five times a second), and a file's atime
or inotify would count those too; on a real node the probe is the driver,
and a probe read is what twenty dashboards must not multiply.
"""
from __future__ import annotations

import os
import sys

import common  # noqa: F401  (the checkout on sys.path)
from tpnode_tui import cli
from tpnode_tui.probes.simulated import SimulatedProbe


def count_reads(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    read = SimulatedProbe.read

    async def counted(self: SimulatedProbe):
        os.write(fd, b".")  # one append: a whole byte or none, whoever reads the size
        return await read(self)

    SimulatedProbe.read = counted  # type: ignore[method-assign]


if __name__ == "__main__":
    count_reads(sys.argv[1])
    sys.exit(cli.main(sys.argv[2:]))
