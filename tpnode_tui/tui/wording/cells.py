"""Text cut to the terminal cells it has."""

from __future__ import annotations

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
