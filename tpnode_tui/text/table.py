"""Rows laid out as a plain-text table, every column as wide as its widest cell.

The CLI's tables (tpnode_tui/cli/output.py), here rather than in the CLI so
that a report worded below it, such as the usage report's, is laid out the
same way without reaching up to it.
"""

from __future__ import annotations

from typing import Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """Rows as lines: a 63-character run id or an 8-card list must not run into
    the next column. Columns in ``right`` (numbers) are right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    return [line(header)] + [line(row) for row in rows]
