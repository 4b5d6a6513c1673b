"""Text cut to the terminal cells it has."""

from __future__ import annotations

from typing import Mapping, Sequence

from rich.cells import cell_len, set_cell_size


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells, with "…" where it was cut.

    Cells, not characters: a wide character (a CJK user or process name, an
    emoji in a command line) takes two, and a line one cell too long wraps in
    a tile, pushing its last line out, or makes the jobs table scroll sideways.
    """
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + "…"


def columns_that_fit(
    widths: Mapping[str, int], columns: Sequence[str], left_out_first: Sequence[str], width: int, padding: int
) -> tuple[str, ...]:
    """The ``columns`` a table ``width`` cells wide shows, each ``widths`` wide
    with ``padding`` each side: all of them, else without those of
    ``left_out_first``, in that order, until the rest fit. A column is left out
    whole rather than cut to "FEN" or "TIME LEF" (or the table scrolled
    sideways, hiding the first)."""
    shown = list(columns)
    for key in left_out_first:
        if sum(widths[k] + 2 * padding for k in shown) <= width:
            break
        shown.remove(key)
    return tuple(shown)
