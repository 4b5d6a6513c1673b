"""Each card's last hour, as last fetched from the node, in slices of time.

The node keeps the history (every poll of the last five minutes, 10-second
averages before: tpnode_tui/triage/history.py); the dashboard only fetches
it, when the selection changes and every few seconds, never per poll, so the
rate does not grow with the poll rate. The horizontal axis is time, not
samples: each slice is an equal part of the window (the last hour, or as
much of it as the node has kept), so a stretch the node did not read is a
gap, not squeezed out; a sample stands for the time until the next one, up
to :data:`GAP_S`. A fetched history is kept only as :data:`SLICES` means
per field (:class:`Recent`), so what the dashboard holds of every card's
hour is a few kilobytes, however fast the node polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Protocol, Sequence

from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.port.node import Node

log = logging.getLogger(__name__)

#: how often the selected card's history is fetched again, and every cards' (for
#: the tiles' lines): the node keeps it, and fetching it each poll would cost
#: the agent an hour of samples per card per dashboard per second
HISTORY_S, TILES_HISTORY_S = 5.0, 15.0

#: the longest window drawn, and the shortest (a node read for a few seconds still gets a line)
SPAN_S = 3600.0
MIN_SPAN_S = 10.0
#: a sample stands for the time until the next one, but no longer: a longer
#: silence (the node was not read) is drawn as a gap
GAP_S = 30.0
#: the slices of time a fetched history is kept as (10 s each, for an hour)
SLICES = 360


def window(samples: Sequence[Sample], now: float) -> float:
    """Seconds the lines cover: since the first sample, at most an hour."""
    if not samples:
        return SPAN_S
    return min(SPAN_S, max(MIN_SPAN_S, now - samples[0].at))


def columns(samples: Sequence[Sample], field: str, width: int, now: float, span_s: float) -> list[Optional[float]]:
    """``field`` of ``samples`` in ``width`` equal slices of time ending ``now``:
    each slice the mean of the samples that stand for part of it, None where
    none does (never read, or the value was unknown)."""
    if width <= 0:
        return []
    start = now - span_s
    step = span_s / width
    sums = [0.0] * width
    counts = [0] * width
    for n, sample in enumerate(samples):
        value = getattr(sample, field)
        if value is None:
            continue
        reach = max(sample.seconds, GAP_S)
        until = samples[n + 1].at if n + 1 < len(samples) else now
        lo, hi = max(sample.at, start), min(until, sample.at + reach, now)
        if hi < lo or hi < start:
            continue
        first = int((lo - start) / step)
        last = max(first, int((hi - start) / step - 1e-9))
        for c in range(max(0, first), min(width - 1, last) + 1):
            sums[c] += value
            counts[c] += 1
    return [sums[c] / counts[c] if counts[c] else None for c in range(width)]


@dataclass(frozen=True)
class Recent:
    """A card's history as fetched: its utilisation and memory used over the
    last ``span`` seconds, in SLICES equal slices of time (None: not read)."""

    span: float
    utilization_pct: tuple[Optional[float], ...]
    memory_used_mib: tuple[Optional[float], ...]

    @classmethod
    def of(cls, samples: Sequence[Sample], at: float) -> Recent:
        span = window(samples, at)
        return cls(
            span,
            tuple(columns(samples, "utilization_pct", SLICES, at, span)),
            tuple(columns(samples, "memory_used_mib", SLICES, at, span)),
        )

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.utilization_pct) and all(v is None for v in self.memory_used_mib)


class HistoryShown(Protocol):
    """Where the cards' history is drawn, as far as fetching it is concerned."""

    def selected_index(self) -> int:
        """The card whose lines the detail pane shows."""
        ...

    def history_wanted(self) -> bool:
        """Whether there are cards, a line on screen to show their history, and
        a picture that moves (not paused): while not, none is fetched."""
        ...

    def tiles_have_room(self) -> bool:
        """Whether the tiles show their utilisation lines (every card's history is wanted)."""
        ...

    def show_history(self, fetched: Mapping[int, Recent]) -> None: ...


class HistoryFollower:
    """Each card's last hour, as last fetched from the node (a few kilobytes a
    card, whatever the node keeps). The node keeps the history; this only
    fetches it, at a rate that does not grow with the poll rate."""

    def __init__(self, node: Node, *, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.clock = clock
        #: each card's history as last fetched
        self.recent: dict[int, Recent] = {}
        #: fetches of the node's history that succeeded
        self.fetches = 0
        self._tiles_at: Optional[float] = None
        #: set when the history should be fetched at once (a new selection, the first reading)
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Fetch at once: the selection changed, or there are cards (or room for their lines) now."""
        self._wake.set()

    async def follow(self, shown: HistoryShown) -> None:
        """The selected card's history when the selection changes and every
        HISTORY_S; every card's, for the tiles, every TILES_HISTORY_S while
        the tiles have room for it."""
        while True:
            self._wake.clear()
            if shown.history_wanted():
                try:
                    await self._fetch(shown)
                except Exception:  # a drawing bug must not end the history for good
                    log.warning("the history could not be shown", exc_info=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), HISTORY_S)

    async def _fetch(self, shown: HistoryShown) -> None:
        card = shown.selected_index()
        now = self.clock()
        tiles = shown.tiles_have_room() and (self._tiles_at is None or now - self._tiles_at >= TILES_HISTORY_S)
        try:
            history = await self.node.history(None if tiles else card)
        except Exception as e:  # the readings say why the node cannot be reached; keep the last
            if not isinstance(e, TpnodeError):
                log.warning("the node's history could not be read", exc_info=True)
            return
        if tiles:
            self._tiles_at = now
        fetched = {index: Recent.of(samples, now) for index, samples in history.items()}
        self.recent.update(fetched)
        shown.show_history(fetched)
        self.fetches += 1
