"""The agent's publisher on its own, over a real redis-server: when it publishes, and what an outage costs.

The service it follows is a stand-in with a reading the test sets, so that
"the picture changed" and "nothing changed" are exactly what the test says.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
import redis as redis_sync

from helpers.fleet import T, job, node_snapshot
from helpers.services import free_port
from helpers.waiting import until_async
from tpnode_tui.fleet import record
from tpnode_tui.fleet.publisher import FleetPublisher
from tpnode_tui.port.types.readings import Reading

pytestmark = pytest.mark.redis


class Service:
    """What a publisher asks of a NodeService: the reading, and each new one."""

    def __init__(self, snap) -> None:
        self.reading = Reading(1, snap)
        self._queues: list[asyncio.Queue] = []

    def set(self, snap) -> None:
        self.reading = Reading(self.reading.seq + 1, snap)
        for q in self._queues:
            q.put_nowait(self.reading)

    async def subscribe(self):
        q: asyncio.Queue = asyncio.Queue()
        self._queues.append(q)
        yield self.reading
        while True:
            yield await q.get()


async def test_a_change_is_published_at_once_and_sameness_only_once_a_period(redis_url):
    service = Service(node_snapshot())
    publisher = FleetPublisher(redis_url, redis_url, "gpu-01", 30.0)
    task = asyncio.ensure_future(publisher.run(service))
    try:
        await until_async(lambda: publisher.published == 1, "the first publication")
        for n in range(20):  # twenty polls that change nothing but the time
            service.set(node_snapshot(taken_at=T + n))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert publisher.published == 1  # the 30 s period has not passed
        service.set(node_snapshot(jobs=(job("train", (0, 1)),)))
        await until_async(lambda: publisher.published == 2, "the change to be published")
        client = redis_sync.Redis.from_url(redis_url)
        raw = client.get(record.snapshot_key(publisher.instance))
        assert record.Decoder().decode(publisher.instance, raw).snapshot.occupancy.by_job == {0: "train", 1: "train"}
        assert client.pttl(record.snapshot_key(publisher.instance)) > 60_000  # three periods
        client.close()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await publisher.close()


async def test_a_short_period_publishes_the_same_picture_again(redis_url):
    service = Service(node_snapshot())
    publisher = FleetPublisher(redis_url, redis_url, "gpu-01", 0.2)
    task = asyncio.ensure_future(publisher.run(service))
    try:
        await until_async(lambda: publisher.published >= 4, "publications every period")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await publisher.close()


async def test_an_unreachable_redis_is_logged_once_and_costs_nothing_else(caplog):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    service = Service(node_snapshot())
    publisher = FleetPublisher(url, url, "gpu-01", 0.2)
    caplog.set_level(logging.INFO, logger="tpnode_tui.fleet")
    task = asyncio.ensure_future(publisher.run(service))
    await asyncio.sleep(3.5)  # several attempts, backing off
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await publisher.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeps allocating" in warnings[0].getMessage()
    assert publisher.published == 0


async def test_a_clean_stop_says_so_at_once(redis_url):
    publisher = FleetPublisher(redis_url, redis_url, "gpu-01", 30.0)
    assert await publisher.publish(Reading(1, replace(node_snapshot(), taken_at=T)))
    await publisher.close()
    client = redis_sync.Redis.from_url(redis_url)
    assert client.get(record.snapshot_key(publisher.instance)) is None
    reg = record.decode_registration(publisher.instance, client.hget(record.AGENTS_KEY, publisher.instance))
    assert reg.stopped_at is not None and reg.node == "gpu-01"
    client.close()


async def test_a_hostile_registration_in_redis_does_not_stop_this_node_publishing(redis_url):
    """Anyone who can write to the fleet's Redis can put anything in the agents hash."""
    client = redis_sync.Redis.from_url(redis_url)
    client.hset(record.AGENTS_KEY, "hostile", b"[" * 100_000)
    service = Service(node_snapshot())
    publisher = FleetPublisher(redis_url, redis_url, "gpu-01", 0.2)
    task = asyncio.ensure_future(publisher.run(service))
    try:
        await until_async(lambda: publisher.published >= 3, "publications despite it")
        assert not task.done()
        assert client.get(record.snapshot_key(publisher.instance)) is not None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await publisher.close()
        client.delete(record.AGENTS_KEY)
        client.close()


async def test_before_the_first_reading_the_publisher_waits_for_it_and_does_not_spin(redis_url):
    service = Service(None)
    service.reading = Reading(0, None)  # the agent's first poll (NVML, Docker) can take seconds
    publisher = FleetPublisher(redis_url, redis_url, "gpu-01", 0.2)
    asked: list[int] = []
    due = publisher.due
    publisher.due = lambda reading: asked.append(1) or due(reading)  # type: ignore[method-assign]
    task = asyncio.ensure_future(publisher.run(service))
    try:
        await asyncio.sleep(0.5)
        assert asked == [] and publisher.published == 0, "nothing to say yet, and nothing asked"
        service.set(node_snapshot())
        await until_async(lambda: publisher.published == 1, "the first reading published")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await publisher.close()
