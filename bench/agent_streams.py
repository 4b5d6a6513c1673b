"""Dashboards' streams on one agent, from one process: the bench's clients.

``python bench/agent_streams.py SOCKET N``

Opens N real :class:`~tpnode_tui.node.remote.AgentNode` streams
(``GET /v1/stream``, each decoded into a NodeView as a dashboard gets it) and
counts the readings each one receives. Prints "ready" once every stream has
its first reading; then, for each line read on standard input, one JSON line:
``{"received": [...], "seq": [...]}`` (readings so far and the last reading's
seq, per stream). Ends at end of input, or when a stream ends (it says why).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import common  # noqa: F401  (the checkout on sys.path)
from tpnode_tui.node.remote import AgentNode


async def main(socket: Path, n: int) -> None:
    received = [0] * n
    seqs = [0] * n
    first = asyncio.Event()

    async def follow(i: int) -> None:
        node = AgentNode(socket)
        try:
            async for view in node.views():
                received[i] += 1
                seqs[i] = view.reading.seq
                if all(received):
                    first.set()
        finally:
            await node.close()

    tasks = [asyncio.ensure_future(follow(i)) for i in range(n)]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    waiting = asyncio.ensure_future(first.wait())
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        raise SystemExit(f"a stream ended before every stream had its first reading: {done.pop().exception()}")
    print("ready", flush=True)
    try:
        while await reader.readline():
            ended = [t for t in tasks if t.done()]
            if ended:
                raise SystemExit(f"a stream ended: {ended[0].exception()}")
            print(json.dumps({"received": received, "seq": seqs}), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
