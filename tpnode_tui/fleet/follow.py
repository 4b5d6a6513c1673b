"""Following the fleet: what its Redis says, read on a timer and at each node's notice.

A plain object, the fleet view's and the web page's: the fleet as last read,
since when and why it cannot be read, and each node's last snapshot (a down
node's grid is drawn from it). A read that fails for any reason makes the view
stale (no card counts as free), never frozen on the last picture.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import AsyncIterator, Callable, Optional, Protocol

from tpnode_tui.fleet.record import FleetPicture, NodeRow
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.text.printable import printable_view

log = logging.getLogger("tpnode_tui.fleet")


class FleetSource(Protocol):
    """Where the fleet comes from: the Redis reader, or a test's stand-in."""

    safe_url: str

    async def read(self) -> FleetPicture: ...

    def notices(self) -> AsyncIterator[None]: ...

    async def close(self) -> None: ...


class FleetFollower:
    """The fleet as last read. ``on_read`` is called after each read, whether it
    succeeded or not."""

    def __init__(
        self,
        source: FleetSource,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        on_read: Callable[[], None] = lambda: None,
    ) -> None:
        self.source = source
        self.interval = max(0.2, interval)
        self.clock = clock
        self.on_read = on_read
        #: the last picture read (None until one was)
        self.fleet: Optional[FleetPicture] = None
        #: why the fleet cannot be read now, and since when (None while it can)
        self.error: Optional[str] = None
        self.stale_since: Optional[float] = None
        #: node name -> the last snapshot it published, for its grid once it goes down
        self.snapshots: dict[str, NodeSnapshot] = {}
        self._printable: Optional[tuple[NodeSnapshot, NodeSnapshot]] = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Read again now, not at the end of the interval."""
        self._wake.set()

    async def follow(self) -> None:
        """Read every interval, and at once when woken; until cancelled."""
        while True:
            self._wake.clear()
            await self.read_now()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            await asyncio.sleep(0.2)  # a burst of notices is answered by one read

    async def notices(self) -> None:
        """Read again as soon as a node publishes; the timer still reads every
        interval, because a node that dies sends no notice."""
        while True:
            try:
                async for _ in self.source.notices():
                    self.wake()
            except Exception as e:  # the timer reads on; notices are only a shortcut
                if not isinstance(e, TpnodeError):
                    log.warning("the fleet's notices could not be followed", exc_info=True)
            await asyncio.sleep(self.interval)

    async def read_now(self) -> None:
        try:
            fleet = await self.source.read()
        except Exception as e:  # whatever it was, the view goes stale (no card free), never frozen as it was
            if not isinstance(e, TpnodeError):
                log.warning("the fleet could not be read", exc_info=True)
            self.error = str(e) or type(e).__name__
            if self.stale_since is None:
                self.stale_since = self.clock()
        else:
            self._took(fleet)
        self.on_read()

    def _took(self, fleet: FleetPicture) -> None:
        self.fleet = fleet
        self.error = None
        self.stale_since = None
        # Kept for the nodes there are: names come and go (anyone can write to Redis)
        names = {node.name for node in fleet.nodes}
        self.snapshots = {n: s for n, s in self.snapshots.items() if n in names}
        for node in fleet.nodes:
            if node.snapshot is not None:
                self.snapshots[node.name] = node.snapshot

    @property
    def stale(self) -> bool:
        return self.error is not None

    def node(self, name: str) -> Optional[NodeRow]:
        """The node's row as read now; None while nothing can be read, or for a node gone from the fleet."""
        if self.fleet is None or self.error is not None:
            return None
        return next((n for n in self.fleet.nodes if n.name == name), None)

    def shown_snapshot(self, name: str) -> Optional[NodeSnapshot]:
        """The node's last snapshot as a screen may show it: every string in it,
        from whoever wrote to the fleet's Redis, escaped (as the dashboard does it)."""
        snap = self.snapshots.get(name)
        if snap is None:
            return None
        if self._printable is None or self._printable[0] is not snap:
            self._printable = (snap, printable_view(snap))
        return self._printable[1]

    def nodes_matching(self, words: str) -> list[NodeRow]:
        """The nodes whose name or series has ``words`` in it, in the fleet's order (all for none)."""
        if self.fleet is None:
            return []
        words = words.lower()
        return [n for n in self.fleet.nodes if not words or words in n.name.lower() or words in n.series.lower()]
