"""The agent's side of the fleet: publish the node's latest reading to Redis.

After every poll whose picture changed, and at least once a period, the agent
sets its publication and sends a notice, pipelined; it registers itself again
whenever Redis may have lost it. Redis is never in the allocation path:
publishing runs in a task of its own, and a failure only delays the next
publication. See docs/architecture.md, section 'Many nodes'.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from typing import Any, Callable, Optional

from redis.exceptions import RedisError

from tpnode_tui import __version__
from tpnode_tui.fleet import record
from tpnode_tui.fleet.connect import open_client, scrub
from tpnode_tui.port.types.readings import Reading
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.service import NodeService

log = logging.getLogger("tpnode_tui.fleet")

#: how often the registration is written again, with the time: all a reader that
#: starts after a node went quiet knows of when it was last alive. Rare, so a
#: publication stays two commands: once in 10 minutes adds 0.002 a second.
REGISTRATION_REFRESH_S = 600.0
#: first wait after a failed publication; doubled on each failure in a row
BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


class FleetPublisher:
    def __init__(
        self,
        url: str,
        safe_url: str,
        node: str,
        period_s: float,
        *,
        ssh: str = "",
        client: Any = None,
        version: str = __version__,
        clock: Callable[[], float] = time.time,
        ticks: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` is the time published (readers compare it); ``ticks`` times the
        periods, so a wall clock stepped back an hour does not silence the node."""
        self.url = url
        self.safe_url = safe_url
        self.node = node
        #: how others reach this node over SSH, published with it
        self.ssh = ssh or node
        self.period_s = period_s
        self.version = version
        self.clock = clock
        self.ticks = ticks
        self.instance = secrets.token_hex(8)
        self.key = record.snapshot_key(self.instance)
        self._own_client = client is None
        self._client = client if client is not None else open_client(url, safe_url)
        self._started_at = clock()
        self._seq = 0
        self._picture: Optional[tuple[bool, bytes]] = None
        #: (series, total) as last registered; None: register before the next publication
        self._registered: Optional[tuple[str, Optional[int]]] = None
        self._registered_tick = float("-inf")
        #: whether the entries of this node's earlier agents were swept (once, at the first registration)
        self._swept = False
        self._last_ok_tick = float("-inf")
        self._outage = False
        self._backoff = BACKOFF_S
        #: publications made, for tests and benchmarks
        self.published = 0

    # ── one publication ──────────────────────────────────────────────────────

    def _registration(self, series: str, total: Optional[int], now: float, stopped_at: Optional[float] = None) -> str:
        return json.dumps(
            record.registration(
                node=self.node,
                version=self.version,
                period_s=self.period_s,
                host=socket.gethostname(),
                pid=os.getpid(),
                started_at=self._started_at,
                seen_at=now,
                series=series,
                total=total,
                stopped_at=stopped_at,
                ssh=self.ssh,
            )
        )

    async def _register(self, series: str, total: Optional[int], now: float) -> None:
        """Add this agent to the agents hash (or refresh its entry), and the
        first time drop the entries of earlier agents of this node whose
        publications have expired (a restart leaves one behind each time). A
        live one is left: that is a conflict to show."""
        client = self._client
        await client.hset(record.AGENTS_KEY, self.instance, self._registration(series, total, now))
        self._registered, self._registered_tick = (series, total), self.ticks()
        if self._swept:
            return
        others = []
        for key, raw in (await client.hgetall(record.AGENTS_KEY)).items():
            instance = record.text_of(key)
            if instance == self.instance:
                continue
            try:
                if record.decode_registration(instance, raw).node == self.node:
                    others.append(instance)
            except WireError:
                continue
        if others:
            async with client.pipeline(transaction=False) as pipe:
                for instance in others:
                    pipe.exists(record.snapshot_key(instance))
                alive = await pipe.execute()
            dead = [i for i, n in zip(others, alive) if not n]
            if dead:
                await client.hdel(record.AGENTS_KEY, *dead)
        self._swept = True  # only once it is done: a sweep cut short by Redis is tried again

    def _document(self, reading: Reading, now: float) -> record.Encoded:
        return record.publication(
            node=self.node,
            instance=self.instance,
            version=self.version,
            period_s=self.period_s,
            seq=self._seq + 1,
            published_at=now,
            reading=reading,
        )

    async def publish(self, reading: Reading, doc: Optional[record.Encoded] = None) -> bool:
        """Publish ``reading`` now (as ``doc``, when already made); False (and
        logged once per outage) when Redis cannot take it."""
        if doc is None:
            doc = self._document(reading, self.clock())
        now = doc.envelope["published_at"]
        self._seq += 1
        snap = reading.snapshot
        series, total = (snap.series, snap.occupancy.total) if snap is not None else ("", None)
        try:
            if (
                self._registered is None
                or (snap is not None and (series, total) != self._registered)
                or self.ticks() - self._registered_tick >= REGISTRATION_REFRESH_S
            ):
                await self._register(series, total, now)
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.set(self.key, doc.encode(), px=record.expiry_ms(self.period_s), get=True)
                pipe.publish(
                    record.CHANGED if doc.picture != self._picture else record.SAME,
                    json.dumps({"node": self.node, "instance": self.instance, "seq": self._seq}),
                )
                previous, _ = await pipe.execute()
            if previous is None and self._registered is not None and self._seq > 1:
                # Our last publication is gone: Redis restarted (and lost the
                # registration with it) between two publications, or we were silent.
                await self._register(series, total, now)
        except (RedisError, OSError) as e:
            self._failed(e)
            return False
        if self._outage:
            self._outage = False
            log.info("publishing to the fleet at %s again", self.safe_url)
        self._backoff = BACKOFF_S
        self._picture = doc.picture
        self._last_ok_tick = self.ticks()
        self.published += 1
        return True

    def _failed(self, e: BaseException) -> None:
        self._registered = None  # a restarted Redis may have lost the registration
        if not self._outage:
            self._outage = True
            log.warning(
                "cannot publish to the fleet at %s (%s); this node keeps allocating, and publishing is retried",
                self.safe_url,
                scrub(str(e), self.url) or type(e).__name__,
            )

    def due(self, reading: Reading) -> Optional[record.Encoded]:
        """The publication to make now, or None: one is due when the picture
        changed or a period passed since the last that Redis took."""
        if not _read_yet(reading):
            return None  # nothing to say
        doc = self._document(reading, self.clock())
        if self.ticks() - self._last_ok_tick >= self.period_s or doc.picture != self._picture:
            return doc
        return None

    # ── the loop ─────────────────────────────────────────────────────────────

    async def run(self, service: NodeService) -> None:
        """Publish the service's readings until cancelled."""
        latest = service.reading
        fresh = asyncio.Event()

        async def follow() -> None:
            nonlocal latest
            async for reading in service.subscribe():
                latest = reading
                fresh.set()

        follower = asyncio.ensure_future(follow())
        try:
            while True:
                fresh.clear()  # a reading that arrives while this one is published is not missed
                if not _read_yet(latest):  # the first poll (NVML, Docker) can take seconds
                    await fresh.wait()
                    continue
                try:
                    doc = self.due(latest)
                    ok = doc is None or await self.publish(latest, doc)
                except Exception as e:  # whatever it was, publishing must outlive it
                    log.warning("publishing to the fleet failed unexpectedly; retrying", exc_info=True)
                    self._failed(e)
                    ok = False
                if not ok:
                    await asyncio.sleep(self._backoff)
                    self._backoff = min(self._backoff * 2, max(BACKOFF_S, min(self.period_s, MAX_BACKOFF_S)))
                    continue
                wait = max(0.0, self._last_ok_tick + self.period_s - self.ticks())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(fresh.wait(), wait)
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def close(self) -> None:
        """Say this agent stopped (best effort: Redis may be down), and close the connection."""
        if self._registered is not None:
            series, total = self._registered
            with contextlib.suppress(RedisError, OSError):
                async with self._client.pipeline(transaction=False) as pipe:
                    pipe.delete(self.key)
                    now = self.clock()
                    pipe.hset(record.AGENTS_KEY, self.instance, self._registration(series, total, now, stopped_at=now))
                    pipe.publish(
                        record.CHANGED, json.dumps({"node": self.node, "instance": self.instance, "seq": self._seq + 1})
                    )
                    await pipe.execute()
        if self._own_client:
            await self._client.aclose()


def _read_yet(reading: Reading) -> bool:
    """Whether the node has been read (well or not): before that there is nothing to publish."""
    return reading.snapshot is not None or reading.error is not None
