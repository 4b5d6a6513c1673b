"""Open pages of tpnode-tui web, from one process: the bench's browsers' streams.

``python bench/web_streams.py PORT N``

Opens N ``GET /events`` streams (Server-Sent Events) on 127.0.0.1:PORT with
the standard library only, so nothing of the product is measured here, and
counts the events and bytes each receives. Prints "ready" once every stream
has its first page; then, for each line read on standard input, one JSON
line: ``{"pages": [...], "fresh": [...], "bytes": [...]}`` per stream. Ends
at end of input, or when a stream ends (it says why).
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(port: int, n: int) -> None:
    pages, fresh, got = [0] * n, [0] * n, [0] * n
    first = asyncio.Event()

    async def follow(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
        await writer.drain()
        try:
            while True:
                line = await reader.readline()
                if not line:
                    raise ConnectionError("the server ended the stream")
                got[i] += len(line)
                if line.startswith(b"event: page"):
                    pages[i] += 1
                    if all(pages):
                        first.set()
                elif line.startswith(b"event: fresh"):
                    fresh[i] += 1
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(follow(i)) for i in range(n)]
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    waiting = asyncio.ensure_future(first.wait())
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        raise SystemExit(f"a stream ended before every stream had its first page: {done.pop().exception()}")
    print("ready", flush=True)
    try:
        while await stdin.readline():
            ended = [t for t in tasks if t.done()]
            if ended:
                raise SystemExit(f"a stream ended: {ended[0].exception()}")
            print(json.dumps({"pages": pages, "fresh": fresh, "bytes": got}), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
