"""A card's recent past as text: bars on a scale that never moves, and how long a window is.

The bars are the Sparkline's own (so a tile's line and the detail pane's
sparklines look alike), but always against a fixed top: utilisation against
0-100 %, memory against the card's total. A scale that moved with the data
would make an idle card look busy.
"""

from __future__ import annotations

from typing import Optional, Sequence

from rich.text import Text
from textual.renderables.sparkline import Sparkline as SparklineRenderable

from tpnode_tui.text.render import format_duration

BARS = SparklineRenderable.BARS


def window_words(span_s: float) -> str:
    """ "last 12m", "last 1h"."""
    minutes = round(span_s / 60)
    if minutes >= 60:
        return "last 1h"
    return f"last {minutes}m" if minutes >= 1 else f"last {format_duration(span_s)}"


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


def spark_text(values: Sequence[Optional[float]], top: float, style: str = "#4fc3f7") -> Text:
    """The bars as plain text, for a line in a tile: blank where nothing was read."""
    out = Text()
    for value in values:
        if value is None or top <= 0:
            out.append(" ")
        else:
            ratio = min(1.0, max(0.0, value / top))
            out.append(BARS[int(ratio * (len(BARS) - 1))], style=style)
    return out
