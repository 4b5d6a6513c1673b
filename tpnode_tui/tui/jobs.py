"""The jobs table: platform jobs, reservations, exited jobs awaiting reclaim, queued launches."""
from __future__ import annotations

from typing import Iterable, Optional

from rich.text import Text
from textual.widgets import DataTable

from ..model import JobState
from ..render import card_ranges, format_duration
from .detail import workload
from .queue import Queued
from .tiles import fit

COLUMNS = (
    ("run_id", "RUN ID"),
    ("kind", "KIND"),
    ("status", "STATUS"),
    ("cards", "CARDS"),
    ("age", "AGE"),
    ("owner", "OWNER"),
    ("left", "TIME LEFT"),
    ("workload", "RUNS"),
)

QUEUED_PREFIX = "queued:"
JOB_PREFIX = "job:"


def _status(job: JobState) -> Text:
    if job.live:
        return Text(job.status, style="#66bb6a")
    code = "" if job.exit_code is None else f" ({job.exit_code})"
    return Text(f"{job.status}{code}", style="#ffb300")


def _as_text(cells: tuple) -> tuple:
    """Every cell as Text: the table reads a plain string as markup, and these
    quote other people's words (an owner of "[/]" would fail to render)."""
    return tuple(Text(cell) if isinstance(cell, str) else cell for cell in cells)


def job_row(job: JobState, now: float) -> tuple:
    left = "-"
    if job.kind == "reservation" and job.expires_at:
        remaining = job.expires_at - now
        left = format_duration(remaining) if remaining > 0 else "expired"
    return (
        Text(job.run_id or job.name, style="bold"),
        job.kind,
        _status(job),
        card_ranges(job.gpus) or "-",
        format_duration(now - job.started_at) if job.started_at else "-",
        job.owner or "-",
        left,
        workload(job),
    )


def queued_row(item: Queued, position: int, now: float) -> tuple:
    spec = item.spec
    return (
        Text(spec.run_id, style="bold"),
        spec.kind,
        Text(f"queued #{position}", style="#4fc3f7"),
        f"{spec.cards} wanted",
        format_duration(now - item.queued_at),
        spec.owner or "-",
        "-",
        workload(JobState(name=spec.run_id, run_id=spec.run_id, gpus=(), status="queued",
                          kind=spec.kind, image=spec.image, command=spec.command)),
    )


class JobsTable(DataTable):
    """Rows are keyed by job name or queued run id, so the cursor stays on its row."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._keys: list[str] = []
        self._room = 0
        self._shown: Optional[tuple] = None

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def _runs_room(self, rows: Iterable[tuple]) -> int:
        """How wide the last column may be so that no row runs off the right edge.

        The table would scroll sideways instead, and a sideways-scrolled table
        hides the run ids; the command is in the detail pane in full anyway.
        """
        widths = [len(label) for _key, label in COLUMNS[:-1]]
        for cells in rows:
            for n, cell in enumerate(cells[:-1]):
                widths[n] = max(widths[n], Text(cell).cell_len if isinstance(cell, str) else cell.cell_len)
        used = sum(w + 2 * self.cell_padding for w in widths) + 2 * self.cell_padding + 2
        return max(12, self.size.width - used)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, jobs: Iterable[JobState], queued: Iterable[Queued], now: float) -> None:
        jobs, queued = tuple(jobs), tuple(queued)
        self._shown = (jobs, queued, now)
        rows: dict[str, tuple] = {}
        for job in jobs:
            rows[JOB_PREFIX + job.name] = job_row(job, now)
        for position, item in enumerate(queued, start=1):
            rows[QUEUED_PREFIX + item.spec.run_id] = queued_row(item, position, now)
        room = self._runs_room(rows.values())
        rows = {key: _as_text(cells[:-1] + (fit(cells[-1], room),)) for key, cells in rows.items()}
        keys = list(rows)
        if keys == self._keys and room == self._room:
            for key, cells in rows.items():
                for (column, _label), value in zip(COLUMNS, cells):
                    self.update_cell(key, column, value, update_width=True)
            return
        current = self.selected_key()
        # Rebuilt with its columns, since a column never narrows by itself.
        self.clear(columns=True)
        self._add_columns()
        for key, cells in rows.items():
            self.add_row(*cells, key=key)
        self._keys, self._room = keys, room
        if current in rows:
            self.move_cursor(row=keys.index(current), animate=False)

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    def selected_key(self) -> Optional[str]:
        if not self._keys or not 0 <= self.cursor_row < len(self._keys):
            return None
        return self._keys[self.cursor_row]
