"""Many simulated nodes publishing to one fleet Redis, from one process: the bench's load.

``python bench/fleet_publishers.py URL NODES PERIOD_S``

Each node is a real :class:`FleetPublisher` running its real loop
(``run(service)``) over a stand-in service whose reading is a fixed snapshot of
8 cards (a mix of jobs, a reservation, outside use and free cards) taken anew
every period, as an idle node's agent would read it. The publishers share one
connection pool, as one process of many agents would not, but each makes
exactly the commands an agent makes. Prints "ready" once every node has
published, then runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace

import redis.asyncio as aioredis

import common  # noqa: F401  (puts tests/ and the checkout on sys.path)
from helpers.fleet import job, node_snapshot
from tpnode_tui.fleet.publisher import FleetPublisher
from tpnode_tui.port.types.readings import Reading


class Node:
    """Just what a publisher asks of a NodeService: the reading, and each new one."""

    def __init__(self, n: int, period_s: float) -> None:
        held = tuple(range(n % 7))
        self.snapshot = node_snapshot(
            host=f"sim-{n:03d}", jobs=(job(f"run-{n}", held),) if held else (), external=(7,) if n % 5 == 0 else ()
        )
        self.period_s = period_s
        self.reading = Reading(1, replace(self.snapshot, taken_at=time.time()))

    async def subscribe(self):
        seq = 1
        while True:
            yield self.reading
            await asyncio.sleep(self.period_s)
            seq += 1
            self.reading = Reading(seq, replace(self.snapshot, taken_at=time.time()))


async def main(url: str, nodes: int, period_s: float) -> None:
    client = aioredis.Redis(
        connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=32, timeout=None)
    )
    publishers = [FleetPublisher(url, url, f"sim-{n:03d}", period_s, client=client) for n in range(nodes)]
    tasks = []
    for n, publisher in enumerate(publishers):
        tasks.append(asyncio.ensure_future(publisher.run(Node(n, period_s))))
        await asyncio.sleep(period_s / nodes)  # spread over the period, as independent nodes are
    while any(p.published == 0 for p in publishers):
        await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
