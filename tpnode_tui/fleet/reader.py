"""The reader's side of the fleet: every agent's registration and latest publication, read at once.

One read is two commands in one round trip, however many nodes: ``HGETALL``
of the agents hash, then one ``MGET`` of their publications. The notices on
the channel only say "read again soon"; whether a node is up is decided from
what is read, never from a notice or a keyspace event.
"""

from __future__ import annotations

import contextlib
import time
from typing import AsyncIterator, Callable, Optional

from redis.exceptions import RedisError

from tpnode_tui.fleet import record
from tpnode_tui.fleet.connect import open_client, scrub
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.port.wire.reader import WireError


class FleetUnavailable(TpnodeError):
    """The fleet's Redis cannot be read."""


class FleetReader:
    def __init__(self, url: str, safe_url: str, *, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.safe_url = safe_url
        self.clock = clock
        self._client = open_client(url, safe_url)
        self._decoder = record.Decoder()
        #: instance -> (its registration as stored, decoded): most reads find it unchanged
        self._registrations: dict[str, tuple[bytes | str, record.Registration]] = {}
        #: node name -> the newest publication time read, so "unreachable since"
        #: stays exact after that publication has expired
        self._seen: dict[str, float] = {}

    def _unavailable(self, e: BaseException) -> FleetUnavailable:
        why = scrub(str(e), self.url) or type(e).__name__
        return FleetUnavailable(f"cannot read the fleet from Redis at {self.safe_url} ({why})")

    async def read(self) -> record.FleetPicture:
        try:
            raw_agents = await self._client.hgetall(record.AGENTS_KEY)
            problems = []
            if len(raw_agents) > record.MAX_AGENTS:
                problems.append(
                    f"{len(raw_agents)} agents are registered; only the first "
                    f"{record.MAX_AGENTS} by instance id are read"
                )
            instances = sorted(raw_agents)[: record.MAX_AGENTS]
            docs = (
                await self._client.mget([record.snapshot_key(record.text_of(i)) for i in instances])
                if instances
                else []
            )
        except (RedisError, OSError) as e:
            raise self._unavailable(e) from None
        now = self.clock()
        registrations: dict[str, record.Registration] = {}
        publications: dict[str, record.Publication] = {}
        broken: dict[str, str] = {}
        unreadable = 0
        for raw_instance, doc in zip(instances, docs):
            instance = record.text_of(raw_instance)
            raw_reg = raw_agents[raw_instance]
            known = self._registrations.get(instance)
            try:
                registrations[instance] = (
                    known[1]
                    if known is not None and known[0] == raw_reg
                    else record.decode_registration(instance, raw_reg)
                )
            except WireError:
                unreadable += 1
                continue
            self._registrations[instance] = (raw_reg, registrations[instance])
            if doc is None:
                continue
            try:
                publications[instance] = self._decoder.decode(instance, doc)
            except WireError as e:
                broken[instance] = str(e)
        if unreadable:
            problems.append(
                f"{unreadable} registration{'s' if unreadable != 1 else ''} in {record.AGENTS_KEY} cannot be read"
            )
        self._decoder.forget_except(publications)
        for gone in set(self._registrations) - set(registrations):
            del self._registrations[gone]
        fleet = record.assemble(registrations, publications, broken, now, problems=problems, remembered=self._seen)
        names = {node.name for node in fleet.nodes}
        self._seen = {n: t for n, t in self._seen.items() if n in names}  # names come and go: keep the ones there
        for node in fleet.nodes:
            if node.seen_exactly and node.last_seen is not None:
                self._seen[node.name] = max(node.last_seen, self._seen.get(node.name, 0.0))
        return fleet

    async def notices(self) -> AsyncIterator[None]:
        """Once after each batch of notices of a changed picture: read again.
        (A node publishes every period even when nothing changed; those notices,
        on another channel, say nothing a reader's own timer does not.) Raises
        FleetUnavailable when the subscription breaks."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(record.CHANGED)
            while True:
                if await pubsub.get_message(timeout=None) is None:
                    continue
                # Drain what else has arrived: one read answers them all.
                while await pubsub.get_message(timeout=0) is not None:
                    pass
                yield None
        except (RedisError, OSError) as e:
            raise self._unavailable(e) from None
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    async def close(self) -> None:
        await self._client.aclose()


async def read_once(url: str, safe_url: str, clock: Optional[Callable[[], float]] = None) -> record.FleetPicture:
    reader = FleetReader(url, safe_url, clock=clock or time.time)
    try:
        return await reader.read()
    finally:
        await reader.close()
