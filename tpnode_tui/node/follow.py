"""Following a node's readings, and how fresh what is shown is: the dashboard's and the web page's.

The node's service polls, once for every reader; a client only follows what
it publishes. A node served by its agent can go away (restarted, stopped, or
gone mid-stream): the last picture then stays, marked stale, and the node is
followed again after a short wait, longer each time up to a few seconds, for
as long as it takes. Every string that arrives is escaped here, once: from
here on other people's words (process names, labels, owners, the driver's
text) are safe to show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Optional

from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.node import Node
from tpnode_tui.port.types.readings import NodeView, You
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.text.printable import printable_view

log = logging.getLogger(__name__)

#: how long to wait before following a node that went away again: the first
#: try soon (an agent restarting is back in a second), then no more often than this
RECONNECT_FIRST_S, RECONNECT_MOST_S = 1.0, 5.0

Sleep = Callable[[float], Awaitable[None]]


class Backoff:
    """The wait before following the node again: ``first``, then twice as long
    each time, never longer than ``most``, until a follow brings something."""

    def __init__(self, first: float, most: float) -> None:
        self.first, self.most = first, most
        self.next = first

    def reset(self) -> None:
        self.next = self.first

    async def wait(self, sleep: Sleep) -> None:
        await sleep(self.next)
        self.next = min(self.next * 2, self.most)


class Follower:
    """The node's readings as they come, and how fresh what is shown is.

    ``on_reading`` is called after each reading taken (True when it is the
    first to bring a snapshot: now there are cards), ``on_lost`` when the
    readings stop coming."""

    def __init__(
        self,
        node: Node,
        *,
        clock: Callable[[], float] = time.time,
        reconnect_s: tuple[float, float] = (RECONNECT_FIRST_S, RECONNECT_MOST_S),
        on_reading: Callable[[bool], None] = lambda first: None,
        on_lost: Callable[[], None] = lambda: None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.node = node
        self.clock = clock
        self.reconnect_s = reconnect_s
        self.on_reading = on_reading
        self.on_lost = on_lost
        self._sleep = sleep
        #: the last reading's snapshot, escaped (None until one was made)
        self.snapshot: Optional[NodeSnapshot] = None
        #: who the node says is asking
        self.you: Optional[You] = None
        #: readings received (each poll the node makes, and each change to its queue)
        self.readings = 0
        #: since when, and why, the node's polls fail (the reading says so)
        self._stale_since: Optional[float] = None
        self._stale_error = ""
        #: since when, and why, the node's readings stopped coming (an agent gone)
        self.gone_since: Optional[float] = None
        self.gone_why = ""
        self.gone_agent = False
        #: held by the one follow under way: the next begins when the last has ended
        self._following = asyncio.Lock()

    async def follow(self) -> None:
        """Every reading the node makes, until cancelled. A node whose readings
        stop (an agent stopped or restarting) is followed again after a short
        wait, longer each time up to a few seconds, for as long as it takes. One
        follow at a time: one begun while the last is still ending (resumed just
        after a pause) waits for it, so the node's readings are never followed
        twice over, and never out of order."""
        async with self._following:
            backoff = Backoff(*self.reconnect_s)
            while True:
                try:
                    async for view in self.node.views():
                        if self._take(view):
                            backoff.reset()
                except Exception as e:  # a lost agent must never take the client down
                    if not isinstance(e, TpnodeError):
                        log.warning("the node's readings failed", exc_info=True)
                    self._lost(e)
                else:
                    self._lost(AgentUnavailable("the node's readings ended"))
                await backoff.wait(self._sleep)

    def _take(self, view: NodeView) -> bool:
        """One reading; False when it brings nothing (a node that has not read yet)."""
        reading = view.reading
        self.you = view.you
        if reading.snapshot is None and reading.error is None:
            return False  # an agent just (re)started: keep what was shown until it has read
        self.gone_since = None
        self.gone_why = ""
        first = False
        # The one place readings cross to the screen: every string in them
        # (process names, labels, owners, driver text) is escaped from here on.
        if reading.snapshot is not None:
            first = self.snapshot is None
            self.snapshot = printable_view(reading.snapshot)
        self._stale_since = reading.stale_since if reading.error is not None else None
        self._stale_error = reading.error or ""
        self.readings += 1
        self.on_reading(first)
        return True

    def _lost(self, error: BaseException) -> None:
        if self.gone_since is None:
            self.gone_since = self.clock()
        self.gone_why = str(error) or type(error).__name__
        self.gone_agent = isinstance(error, AgentUnavailable)
        self.on_lost()

    @property
    def stale_since(self) -> Optional[float]:
        """Unix time since when what is shown may be out of date (polls failing, or
        the node's agent gone); None while readings come and succeed."""
        return self.gone_since if self.gone_since is not None else self._stale_since

    @property
    def stale_error(self) -> str:
        return self.gone_why if self.gone_since is not None else self._stale_error

    @property
    def why_stale(self) -> Optional[str]:
        """Why a card's details may be out of date, for a card's detail; None while they are not."""
        if self.gone_since is not None:
            return self.gone_why
        if self._stale_since is not None:
            return f"the last poll failed: {self._stale_error}"
        return None
