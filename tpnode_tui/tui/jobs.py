"""The jobs table: platform jobs, reservations, exited jobs awaiting reclaim, queued launches."""
from __future__ import annotations

from typing import Iterable, Optional

from rich.text import Text
from textual.widgets import DataTable

from ..model import JobState
from ..render import format_duration
from .detail import workload
from .queue import Queued

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


def job_row(job: JobState, now: float) -> tuple:
    left = "-"
    if job.kind == "reservation" and job.expires_at:
        remaining = job.expires_at - now
        left = format_duration(remaining) if remaining > 0 else "expired"
    return (
        Text(job.run_id or job.name, style="bold"),
        job.kind,
        _status(job),
        ",".join(map(str, job.gpus)) or "-",
        format_duration(now - job.started_at) if job.started_at else "-",
        job.owner or "-",
        left,
        workload(job)[:60],
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
                          kind=spec.kind, image=spec.image, command=spec.command))[:60],
    )


class JobsTable(DataTable):
    """Rows are keyed by job name or queued run id, so the cursor stays on its row."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._keys: list[str] = []

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, jobs: Iterable[JobState], queued: Iterable[Queued], now: float) -> None:
        rows: dict[str, tuple] = {}
        for job in jobs:
            rows[JOB_PREFIX + job.name] = job_row(job, now)
        for position, item in enumerate(queued, start=1):
            rows[QUEUED_PREFIX + item.spec.run_id] = queued_row(item, position, now)
        keys = list(rows)
        if keys == self._keys:
            for key, cells in rows.items():
                for (column, _label), value in zip(COLUMNS, cells):
                    self.update_cell(key, column, value, update_width=True)
            return
        current = self.selected_key()
        self.clear()
        for key, cells in rows.items():
            self.add_row(*cells, key=key)
        self._keys = keys
        if current in rows:
            self.move_cursor(row=keys.index(current), animate=False)

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    def selected_key(self) -> Optional[str]:
        if not self._keys or not 0 <= self.cursor_row < len(self._keys):
            return None
        return self._keys[self.cursor_row]
