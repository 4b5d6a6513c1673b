"""A card's recent past as sparklines, on a scale that never moves.

Textual's ``Sparkline`` draws its bars between the smallest and the largest
value it is given. A card idling between 1 % and 3 % would then show the
same towering bars as one working between 10 % and 100 %, and an operator
reading "busy" off it would be misled. So utilisation is always drawn
against 0-100 % and memory against the card's total: the data handed to
the Sparkline are padded with the two ends of the scale, as values of their
own type that the bars' summary leaves out (:class:`_Bound`). The columns
are equal slices of time (:class:`~tpnode_tui.tui.follow.history.Recent`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from textual.widgets import Sparkline

from tpnode_tui.tui.wording.sparks import squeeze


class _Bound(float):
    """One end of the scale, padded into a Sparkline's data: never a reading."""


#: what the summary gives a column with no reading: far below the scale, so
#: the Sparkline draws it blank
_GAP = -1e12


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
