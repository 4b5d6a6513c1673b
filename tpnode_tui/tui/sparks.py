"""A card's recent past as sparklines, on a scale that never moves.

Textual's ``Sparkline`` draws its bars between the smallest and the largest
value it is given. A card idling between 1 % and 3 % would then show the
same towering bars as one working between 10 % and 100 %, and an operator
reading "busy" off it would be misled. So utilisation is always drawn
against 0-100 % and memory against the card's total: the data handed to
the Sparkline are padded with the two ends of the scale, as values of their
own type that the bars' summary leaves out (:class:`_Bound`).

The horizontal axis is time, not samples: each column is an equal slice of
the window (the last hour, or as much of it as the node has kept), so a
stretch the node did not read is a gap, not squeezed out. The node's
history is every poll of the last five minutes and 10-second averages
before (``tpnode_tui/history.py``); a sample stands for the time until the
next one, up to :data:`GAP_S`. A fetched history is kept only as
:data:`SLICES` means per field (:class:`Recent`), so what the dashboard holds
of every card's hour is a few kilobytes, however fast the node polls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from rich.text import Text
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.widgets import Sparkline

from tpnode_tui.model.snapshot import Sample
from tpnode_tui.text.render import format_duration

#: the longest window drawn, and the shortest (a node read for a few seconds still gets a line)
SPAN_S = 3600.0
MIN_SPAN_S = 10.0
#: a sample stands for the time until the next one, but no longer: a longer
#: silence (the node was not read) is drawn as a gap
GAP_S = 30.0
#: the slices of time a fetched history is kept as (10 s each, for an hour)
SLICES = 360

BARS = SparklineRenderable.BARS


class _Bound(float):
    """One end of the scale, padded into a Sparkline's data: never a reading."""


#: what the summary gives a column with no reading: far below the scale, so
#: the Sparkline draws it blank
_GAP = -1e12


def window(samples: Sequence[Sample], now: float) -> float:
    """Seconds the lines cover: since the first sample, at most an hour."""
    if not samples:
        return SPAN_S
    return min(SPAN_S, max(MIN_SPAN_S, now - samples[0].at))


def window_words(span_s: float) -> str:
    """ "last 12m", "last 1h"."""
    minutes = round(span_s / 60)
    if minutes >= 60:
        return "last 1h"
    return f"last {minutes}m" if minutes >= 1 else f"last {format_duration(span_s)}"


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


def squeeze(values: Sequence[Optional[float]], width: int) -> list[Optional[float]]:
    """``values`` (equal slices of time) in ``width`` columns: each the mean of
    the known values in its share, None where none is known."""
    if width <= 0 or not values:
        return []
    n = len(values)
    out: list[Optional[float]] = []
    for c in range(width):
        lo = c * n // width
        share = [v for v in values[lo : max((c + 1) * n // width, lo + 1)] if v is not None]
        out.append(sum(share) / len(share) if share else None)
    return out


def padded(values: Sequence[Optional[float]], top: float) -> list[float]:
    """Data for a Sparkline as wide as ``values``: two items a column, the
    column's value (a gap where None) and a bound; the first two bounds are
    0 and ``top``, so the bars are scaled to exactly that range. Under two
    columns there is no room for both bounds, and nothing to plot: empty."""
    if len(values) < 2:
        return []
    out: list[float] = []
    for n, value in enumerate(values):
        out.append(_Bound(0.0) if value is None else min(top, max(0.0, value)))
        out.append(_Bound(top if n == 1 else 0.0))
    return out


def summary(part: Sequence[float]) -> float:
    """A column's value, leaving out the bounds padded in."""
    readings = [v for v in part if not isinstance(v, _Bound)]
    return max(readings) if readings else _GAP


class FixedSparkline(Sparkline):
    """A Sparkline whose scale is 0 to ``top``, whatever the data, over time."""

    def __init__(self, *, top: float = 100.0, **kwargs: Any) -> None:
        super().__init__(summary_function=summary, **kwargs)
        self.top = top
        #: what is drawn, a value a column
        self.values: list[Optional[float]] = []
        self._slices: Sequence[Optional[float]] = ()

    def plot(self, slices: Sequence[Optional[float]], top: float) -> None:
        """``slices``: equal slices of time, oldest first (a :class:`Recent` field)."""
        self._slices, self.top = slices, top
        self._replot()

    def _replot(self) -> None:
        width = self.size.width
        values: list[Optional[float]] = squeeze(self._slices, width) if self._slices else [None] * width
        if values != self.values or len(self.data or ()) != 2 * width:
            self.values = values
            self.data = padded(values, self.top)

    def on_resize(self) -> None:
        self._replot()


def spark_text(values: Sequence[Optional[float]], top: float, style: str = "#4fc3f7") -> Text:
    """The same bars as plain text, for a line in a tile: blank where nothing was read."""
    out = Text()
    for value in values:
        if value is None or top <= 0:
            out.append(" ")
        else:
            ratio = min(1.0, max(0.0, value / top))
            out.append(BARS[int(ratio * (len(BARS) - 1))], style=style)
    return out
