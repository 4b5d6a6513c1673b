"""A clock a test moves on: the node's time for an agent whose hours must pass at once.

It is the wall clock plus an offset the test adds to, never a fixed time:
what the runtime says (a job's start, a reservation's expiry) is on the wall
clock, and the agent must see those as the moments they are, with the test's
hours added after them.
"""

from __future__ import annotations

import time


class MovedClock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> float:
        """Move the clock on by ``seconds``; the time it says now."""
        self.offset += seconds
        return self()
