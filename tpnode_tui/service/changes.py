"""What every action tells the readings: that it changed the node, and to poll soon.

An action answered before a poll began may not show in that poll's reading.
Each action that changed the node counts itself here, and each reading notes
the count its poll began with, so :meth:`Readings.current
<tpnode_tui.service.readings.Readings.current>` knows whether the latest
reading shows every action answered so far. The same object carries the wake
that cuts the wait between polls short, shared by everyone who acts.
"""

from __future__ import annotations

import asyncio


class Changes:
    def __init__(self) -> None:
        #: bumped by every action; a reading taken before it may not show its effect
        self.count = 0
        #: set to poll before the interval is out
        self.wake = asyncio.Event()

    def poll_soon(self) -> None:
        self.wake.set()

    def acted(self) -> None:
        """An action changed the node: the readings from before do not show it, so poll soon."""
        self.count += 1
        self.wake.set()
