"""A separate process that takes the allocation lock, for tests/service/test_locks.py.

Settings come from the TUNEPLANE_* environment, as for the real product.

    lock_worker.py count COUNTER_FILE TIMES   print "ready", wait for a line on
        stdin, then TIMES times: inside the lock read the counter, pause, write
        counter+1 and print "<lease token> <counter read>"
    lock_worker.py nolock COUNTER_FILE TIMES  the same without the lock (the
        control that shows the count test can see lost updates)
    lock_worker.py hold                       take the lock, print "held <lease token>",
        and keep it until killed
    lock_worker.py hold-fork                  the same, after forking a child that
        outlives it; prints "held <lease token> <child pid>"
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from tpnode_tui.config.settings import load_settings
from tpnode_tui.locks import make_lock

PAUSE_S = 0.02


async def count(counter: Path, times: int, locked: bool) -> None:
    lock = make_lock(load_settings())
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        for _ in range(times):
            async with lock.hold() if locked else _no_lock() as hold:
                seen = int(counter.read_text() or 0)
                await asyncio.sleep(PAUSE_S)
                counter.write_text(str(seen + 1))
                print(f"{hold.lease_token if hold else 0} {seen}", flush=True)
    finally:
        await lock.close()


@contextlib.asynccontextmanager
async def _no_lock():
    yield None


async def hold_forever(fork: bool) -> None:
    lock = make_lock(load_settings())
    async with lock.hold() as hold:
        child = ""
        if fork:
            pid = os.fork()
            if pid == 0:
                os.closerange(0, 3)  # the test reads the parent's stdout to its end
                time.sleep(60)
                os._exit(0)
            child = f" {pid}"
        print(f"held {hold.lease_token}{child}", flush=True)
        await asyncio.sleep(3600)


def main(argv: list[str]) -> None:
    if argv[0] in ("hold", "hold-fork"):
        asyncio.run(hold_forever(fork=argv[0] == "hold-fork"))
    else:
        asyncio.run(count(Path(argv[1]), int(argv[2]), locked=argv[0] == "count"))


if __name__ == "__main__":
    main(sys.argv[1:])
