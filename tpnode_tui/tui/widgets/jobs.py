"""The jobs table: platform jobs, reservations, exited jobs awaiting reclaim, launches not started yet.

What each row says is worded in tpnode_tui/tui/wording/jobs.py; the table
lays the rows out so that none runs off its right edge, and keeps the cursor
on its row while rows come and go.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from rich.text import Text
from textual.reactive import var
from textual.widgets import DataTable

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.tui.wording.jobs import COLUMNS, TextCells, columns_shown, fitted, table_rows


class JobsTable(DataTable[Text]):
    """Rows are keyed by job name or launch run id, so the cursor stays on its row."""

    #: what is shown may be out of date: the rows are dimmed (dashboard.tcss)
    stale: var[bool] = var(False, toggle_class="-stale")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        #: (row key, height) of each row, in order, as last laid out
        self._layout: list[tuple[str, int]] = []
        self._room = 0
        #: the keys of the columns shown (those the table's width has room for, whole)
        self._columns: tuple[str, ...] = tuple(key for key, _label in COLUMNS)
        self._shown: Optional[
            tuple[
                tuple[JobState, ...],
                tuple[QueuedLaunch, ...],
                float,
                Mapping[str, float],
                Mapping[str, float],
                Mapping[str, float],
            ]
        ] = None

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label in COLUMNS:
            if key in self._columns:
                self.add_column(label, key=key)

    def _runs_room(self, rows: Iterable[TextCells]) -> int:
        """How wide the last column may be so that no row runs off the right edge.

        The table would scroll sideways instead, and a sideways-scrolled table
        hides the run ids; the command is in the detail pane in full anyway.
        """
        widths = [len(label) for key, label in COLUMNS[:-1] if key in self._columns]
        for cells in rows:
            for n, cell in enumerate(self._shown_cells(cells)[:-1]):
                widths[n] = max(widths[n], cell.cell_len)
        used = sum(w + 2 * self.cell_padding for w in widths) + 2 * self.cell_padding + 2
        return max(12, self.size.width - used)

    def _shown_cells(self, cells: TextCells) -> TextCells:
        return tuple(cell for (key, _label), cell in zip(COLUMNS, cells) if key in self._columns)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(
        self,
        jobs: Iterable[JobState],
        pending: Iterable[QueuedLaunch],
        now: float,
        idle: Mapping[str, float] = {},
        releases: Mapping[str, float] = {},
        idle_held: Mapping[str, float] = {},
    ) -> None:
        """``idle``: reservations' run ids -> since when their owner has not used them;
        ``releases``: -> when the node releases them unless used; ``idle_held``: jobs'
        run ids -> since when they have held their cards idle."""
        jobs, pending = tuple(jobs), tuple(pending)
        self._shown = (jobs, pending, now, idle, releases, idle_held)
        made, waits = table_rows(jobs, pending, now, idle, releases, idle_held)
        # as _runs_room counts: the last column's room is what the others leave, less a margin
        columns = columns_shown(made.values(), self.size.width - 2 * self.cell_padding - 2, self.cell_padding)
        changed, self._columns = columns != self._columns, columns
        room = self._runs_room(made.values())
        rows: dict[str, TextCells] = {}
        layout: list[tuple[str, int]] = []
        for key, cells in made.items():
            # what a launch waits for, told in full in RUNS; without RUNS the header's lock line says it
            rows[key], height = fitted(cells, key in waits and "workload" in columns, room)
            layout.append((key, height))
        if layout == self._layout and room == self._room and not changed:
            self._update(rows)
        else:
            self._rebuild(rows, layout, room)

    def _update(self, rows: Mapping[str, TextCells]) -> None:
        """The same rows, of the same heights: only their cells are set (unchanged ones repaint nothing)."""
        for key, cells in rows.items():
            for (column, _label), value in zip(COLUMNS, cells):
                if column in self._columns:
                    self.update_cell(key, column, value, update_width=True)

    def _rebuild(self, rows: Mapping[str, TextCells], layout: list[tuple[str, int]], room: int) -> None:
        """Rows came, went or changed height: the table is rebuilt, with its columns
        (a column never narrows by itself), and the cursor kept on its row."""
        current = self.selected_key()
        self.clear(columns=True)
        self._add_columns()
        for key, height in layout:
            self.add_row(*self._shown_cells(rows[key]), key=key, height=height)
        self._layout, self._room = layout, room
        keys = [key for key, _height in layout]
        if current is not None and current in rows:
            self.move_cursor(row=keys.index(current), animate=False)

    @property
    def row_keys(self) -> list[str]:
        return [key for key, _height in self._layout]

    def selected_key(self) -> Optional[str]:
        keys = self.row_keys
        if not 0 <= self.cursor_row < len(keys):
            return None
        return keys[self.cursor_row]
