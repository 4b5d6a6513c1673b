"""The jobs table: platform jobs, reservations, exited jobs awaiting reclaim, launches not started yet.

The launches not started yet are the node's, as its snapshot lists them
(``NodeSnapshot.queue``): queued for cards, waiting for the allocation lock,
or being placed, whoever asked for them and from where.
"""

from __future__ import annotations

import textwrap
from typing import Any, Iterable, Mapping, Optional, Union

from rich.text import Text
from textual.widgets import DataTable

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.text.render import card_ranges, format_duration
from tpnode_tui.tui.detail import workload
from tpnode_tui.tui.tiles import WARNING, fit, short_duration

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

#: a row's cells as made (a string is made Text before the table gets it), and as given to the table
Cells = tuple[Union[Text, str], ...]
TextCells = tuple[Text, ...]

#: row keys: a platform job, or a launch not started yet (queued, or under way)
JOB_PREFIX = "job:"
LAUNCH_PREFIX = "launch:"


def _status(job: JobState, idle_for: Optional[float] = None) -> Text:
    """``idle_for``: seconds a reservation's owner has not used its cards."""
    if job.live and idle_for is not None:
        out = Text(job.status, style="#66bb6a")
        out.append(f", idle {short_duration(idle_for)}", style=f"bold {WARNING}")
        return out
    if job.live:
        return Text(job.status, style="#66bb6a")
    code = "" if job.exit_code is None else f" ({job.exit_code})"
    return Text(f"{job.status}{code}", style="#ffb300")


def _as_text(cells: Cells) -> TextCells:
    """Every cell as Text: the table reads a plain string as markup, and these
    quote other people's words (an owner of "[/]" would fail to render)."""
    return tuple(Text(cell) if isinstance(cell, str) else cell for cell in cells)


def held_cards(job: JobState) -> str:
    """The jobs table's CARDS: "0-3", or a MIG slice by its card and profile ("1:1g.18gb")."""
    parts = [card_ranges(job.gpus)] if job.gpus else []
    parts += [ref.short for ref in job.slices]
    return ",".join(parts) or "-"


def job_row(job: JobState, now: float, idle_since: Optional[float] = None) -> Cells:
    left = "-"
    if job.kind == "reservation" and job.expires_at:
        remaining = job.expires_at - now
        left = format_duration(remaining) if remaining > 0 else "expired"
    return (
        Text(job.run_id or job.name, style="bold"),
        job.kind,
        _status(job, None if idle_since is None else now - idle_since),
        held_cards(job),
        format_duration(now - job.started_at) if job.started_at else "-",
        job.owner or "-",
        left,
        workload(job),
    )


#: lines the reason a launch waits for the allocation lock may take
WAIT_LINES = 4

#: the states of a launch not started yet (QueuedLaunch.state)
QUEUED, WAITING, PLACING = "queued", "waiting", "placing"

#: how a launch not started yet shows in the STATUS column
PENDING_STYLE = {QUEUED: "#4fc3f7", WAITING: "bold #ffb300", PLACING: "#66bb6a"}


def pending_row(launch: QueuedLaunch, position: Optional[int], now: float) -> Cells:
    """A launch not started yet (its strings already escaped, as the whole
    snapshot is). One waiting for the allocation lock says for what in place
    of its command: that is what the operator needs to know."""
    status = f"queued #{position}" if launch.state == QUEUED and position else launch.state
    if launch.state == WAITING:
        runs = launch.waiting_for or "waiting for the allocation lock"
    else:
        runs = workload(
            JobState(
                name=launch.run_id,
                run_id=launch.run_id,
                gpus=(),
                status=launch.state,
                kind=launch.kind,
                image=launch.image,
                command=launch.command,
            )
        )
    return (
        Text(launch.run_id, style="bold"),
        launch.kind,
        Text(status, style=PENDING_STYLE.get(launch.state, "")),
        launch.slice or f"{launch.cards} wanted",
        format_duration(now - launch.queued_at),
        launch.owner or "-",
        "-",
        runs,
    )


def wrap(text: str, width: int, most: int) -> list[str]:
    """``text`` on at most ``most`` lines of ``width`` cells, the last one cut if need be."""
    lines = textwrap.wrap(text, max(1, width), break_on_hyphens=False) or [""]
    if len(lines) > most:
        lines = lines[: most - 1] + [" ".join(lines[most - 1 :])]
    return [fit(line, width) for line in lines]


class JobsTable(DataTable[Text]):
    """Rows are keyed by job name or launch run id, so the cursor stays on its row."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        #: (row key, height) of each row, in order, as last laid out
        self._layout: list[tuple[str, int]] = []
        self._room = 0
        self._shown: Optional[tuple[tuple[JobState, ...], tuple[QueuedLaunch, ...], float, Mapping[str, float]]] = None

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def _runs_room(self, rows: Iterable[TextCells]) -> int:
        """How wide the last column may be so that no row runs off the right edge.

        The table would scroll sideways instead, and a sideways-scrolled table
        hides the run ids; the command is in the detail pane in full anyway.
        """
        widths = [len(label) for _key, label in COLUMNS[:-1]]
        for cells in rows:
            for n, cell in enumerate(cells[:-1]):
                widths[n] = max(widths[n], cell.cell_len)
        used = sum(w + 2 * self.cell_padding for w in widths) + 2 * self.cell_padding + 2
        return max(12, self.size.width - used)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(
        self, jobs: Iterable[JobState], pending: Iterable[QueuedLaunch], now: float, idle: Mapping[str, float] = {}
    ) -> None:
        """``idle``: reservations' run ids -> since when their owner has not used them."""
        jobs, pending = tuple(jobs), tuple(pending)
        self._shown = (jobs, pending, now, idle)
        made: dict[str, Cells] = {}
        for job in jobs:
            since = idle.get(job.key) if job.kind == "reservation" else None
            made[JOB_PREFIX + job.name] = job_row(job, now, since)
        waits: set[str] = set()
        position = 0
        for launch in pending:
            key = LAUNCH_PREFIX + launch.run_id
            if launch.state == QUEUED:
                position += 1
            made[key] = pending_row(launch, position if launch.state == QUEUED else None, now)
            if launch.state == WAITING:
                waits.add(key)
        rows = {key: _as_text(cells) for key, cells in made.items()}
        room = self._runs_room(rows.values())
        layout: list[tuple[str, int]] = []
        for key, cells in rows.items():
            # What a launch waits for is told in full (it names who holds the
            # lock); a command is cut to one line, since the detail pane has it.
            runs = cells[-1].plain
            lines = wrap(runs, room, WAIT_LINES) if key in waits else [fit(runs, room)]
            rows[key] = cells[:-1] + (Text("\n".join(lines), style=cells[-1].style),)
            layout.append((key, len(lines)))
        if layout == self._layout and room == self._room:
            for key, cells in rows.items():
                for (column, _label), value in zip(COLUMNS, cells):
                    self.update_cell(key, column, value, update_width=True)
            return
        current = self.selected_key()
        # Rebuilt with its columns, since a column never narrows by itself.
        self.clear(columns=True)
        self._add_columns()
        for key, height in layout:
            self.add_row(*rows[key], key=key, height=height)
        self._layout, self._room = layout, room
        keys = [key for key, _height in layout]
        if current in rows:
            self.move_cursor(row=keys.index(current), animate=False)

    @property
    def row_keys(self) -> list[str]:
        return [key for key, _height in self._layout]

    def selected_key(self) -> Optional[str]:
        keys = self.row_keys
        if not 0 <= self.cursor_row < len(keys):
            return None
        return keys[self.cursor_row]
