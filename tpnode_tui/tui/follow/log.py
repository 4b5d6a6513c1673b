"""Following the node's log, as the events pane shows it.

What happened to the cards in the last hour (XIDs, drains, intruders coming
and going, health problems, jobs ending, evictions) and the actions the
viewer may see, followed live from the node (``node.follow_events``). Only
the newest :data:`EVENTS_KEPT` entries are kept, so a node whose log never
stops stays a fixed cost to watch. Entries are escaped as they arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable, Optional

from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.node.follow import RECONNECT_FIRST_S, RECONNECT_MOST_S, Backoff, Sleep
from tpnode_tui.port.node import Node
from tpnode_tui.text.printable import printable, printable_view

log = logging.getLogger(__name__)

#: entries kept in memory, newest first
EVENTS_KEPT = 200
#: how far back the pane starts when it opens
EVENTS_SINCE_S = 3600.0


class LogFollower:
    """The node's log as the events pane shows it, newest first: open or not,
    the card it is kept to (None: every card), the newest EVENTS_KEPT entries,
    and why the log is not followed now.

    ``changed`` is called after each change, with True while entries arrive
    (a burst, such as the hour read when the pane opens, is drawn once)."""

    def __init__(
        self,
        node: Node,
        *,
        reconnect_s: tuple[float, float] = (RECONNECT_FIRST_S, RECONNECT_MOST_S),
        changed: Callable[[bool], None] = lambda burst: None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.node = node
        self.reconnect_s = reconnect_s
        self.changed = changed
        self._sleep = sleep
        self.shown = False
        self.card: Optional[int] = None
        self.entries: deque[dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self.problem: Optional[str] = None
        #: moves with every change to the entries, so a redraw is never skipped for one
        self.version = 0

    def open(self, card: Optional[int]) -> None:
        """The pane shows the log about ``card`` (None: every card), from an hour back."""
        self.shown = True
        self.card = card
        self._clear()

    def close(self) -> None:
        self.shown = False
        self.card = None
        self._clear()  # nothing kept while the pane is closed

    def _clear(self) -> None:
        self.entries.clear()
        self.problem = None
        self.version += 1

    async def follow(self, card: Optional[int]) -> None:
        """Each entry as the node writes it; a node that goes away (its agent
        restarting) is followed again after a short wait, as the readings are."""

        def following() -> None:  # again: the hour is read afresh, so nothing is doubled
            self._clear()
            self.changed(True)

        backoff = Backoff(*self.reconnect_s)
        while True:
            try:
                async for entry in self.node.follow_events(card=card, since_s=EVENTS_SINCE_S, opened=following):
                    # other people's words (process names, reasons, the driver's text): escaped here
                    self.entries.appendleft(printable_view(entry))
                    self.version += 1
                    backoff.reset()
                    self.changed(True)
            except Exception as e:  # the log failing must never take the dashboard down
                if not isinstance(e, TpnodeError):
                    log.warning("the node's log could not be followed", exc_info=True)
                self.problem = printable(str(e) or type(e).__name__)
            else:
                self.problem = "the node stopped sending it"
            self.changed(False)
            await backoff.wait(self._sleep)
