"""What the jobs table says: platform jobs, reservations, exited jobs awaiting reclaim, launches not started yet.

The launches not started yet are the node's, as its snapshot lists them
(``NodeSnapshot.queue``): queued for cards, waiting for the allocation lock,
or being placed, whoever asked for them and from where. Every cell is
``Text``: the table reads a plain string as markup, and these quote other
people's words.
"""

from __future__ import annotations

import textwrap
from typing import Iterable, Mapping, Optional, Union

from rich.text import Text

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.text.render import card_ranges, format_duration
from tpnode_tui.tui.wording.card import workload
from tpnode_tui.tui.wording.cells import columns_that_fit, fit
from tpnode_tui.tui.wording.marks import ERROR, WARNING
from tpnode_tui.tui.wording.times import short_duration

COLUMNS = (
    ("run_id", "RUN ID"),
    ("kind", "KIND"),
    ("status", "STATUS"),
    ("cards", "CARDS"),
    ("age", "AGE"),
    ("owner", "OWNER"),
    ("left", "TIME LEFT"),
    ("fenced", "FENCED"),
    ("workload", "RUNS"),
)

#: the columns left out, in this order, while the table is too narrow for all of
#: them whole (80 columns): a column is never cut ("FEN", "TIME LEF"), and what
#: these say, the detail pane says of the selected card
LEFT_OUT_FIRST = ("age", "fenced", "workload", "kind")
#: the narrowest RUNS is drawn: narrower, it is left out
RUNS_MIN = 12

#: a row's cells as made (a string is made Text before the table gets it), and as given to the table
Cells = tuple[Union[Text, str], ...]
TextCells = tuple[Text, ...]

#: row keys: a platform job, or a launch not started yet (queued, or under way)
JOB_PREFIX = "job:"
LAUNCH_PREFIX = "launch:"

#: lines the reason a launch waits for the allocation lock may take
WAIT_LINES = 4

#: the states of a launch not started yet (QueuedLaunch.state)
QUEUED, WAITING, PLACING = "queued", "waiting", "placing"

#: how a launch not started yet shows in the STATUS column
PENDING_STYLE = {QUEUED: "#4fc3f7", WAITING: "bold #ffb300", PLACING: "#66bb6a"}


def _status(
    job: JobState,
    idle_for: Optional[float] = None,
    releases_in: Optional[float] = None,
    held_for: Optional[float] = None,
) -> Text:
    """``idle_for``: seconds a reservation's owner has not used its cards;
    ``releases_in``: seconds until the node releases it unless used;
    ``held_for``: seconds a job has held its cards idle (idle-held)."""
    if job.live and releases_in is not None:
        out = Text(job.status, style="#66bb6a")
        said = f"releases in {short_duration(releases_in)}" if releases_in > 0 else "releasing"
        out.append(f", {said}", style=f"bold {ERROR}")
        return out
    if job.live and idle_for is not None:
        out = Text(job.status, style="#66bb6a")
        out.append(f", idle {short_duration(idle_for)}", style=f"bold {WARNING}")
        return out
    if job.live and held_for is not None:
        out = Text(job.status, style="#66bb6a")
        out.append(f", idle-held {short_duration(held_for)}", style=f"bold {WARNING}")
        return out
    if job.live:
        return Text(job.status, style="#66bb6a")
    code = "" if job.exit_code is None else f" ({job.exit_code})"
    return Text(f"{job.status}{code}", style="#ffb300")


def _as_text(cells: Cells) -> TextCells:
    """Every cell as Text: the table reads a plain string as markup, and these
    quote other people's words (an owner of "[/]" would fail to render)."""
    return tuple(Text(cell) if isinstance(cell, str) else cell for cell in cells)


def fenced_cell(job: JobState) -> Text:
    """The jobs table's FENCED: "yes" when its processes can open only its own
    cards' device files, "no" (marked, while it runs) when they could open
    others'; the detail pane says by what, or why not."""
    if job.device_fence.fenced:
        return Text("yes", style="#66bb6a")
    return Text("no", style=f"bold {WARNING}" if job.live else "")


def held_cards(job: JobState) -> str:
    """The jobs table's CARDS: "0-3", or a MIG slice by its card and profile ("1:1g.18gb")."""
    parts = [card_ranges(job.gpus)] if job.gpus else []
    parts += [ref.short for ref in job.slices]
    return ",".join(parts) or "-"


def job_row(
    job: JobState,
    now: float,
    idle_since: Optional[float] = None,
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
) -> Cells:
    left = "-"
    if job.kind == "reservation" and job.expires_at:
        remaining = job.expires_at - now
        left = format_duration(remaining) if remaining > 0 else "expired"
    return (
        Text(job.run_id or job.name, style="bold"),
        job.kind,
        _status(
            job,
            None if idle_since is None else now - idle_since,
            None if releases_at is None else releases_at - now,
            None if held_since is None else now - held_since,
        ),
        held_cards(job),
        format_duration(now - job.started_at) if job.started_at else "-",
        job.owner or "-",
        left,
        fenced_cell(job),
        workload(job),
    )


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
        "-",
        runs,
    )


def table_rows(
    jobs: Iterable[JobState],
    pending: Iterable[QueuedLaunch],
    now: float,
    idle: Mapping[str, float],
    releases: Mapping[str, float] = {},
    idle_held: Mapping[str, float] = {},
) -> tuple[dict[str, TextCells], set[str]]:
    """Every row by its key, in order: the jobs, then the launches not started
    yet, the queued ones numbered by their place in the queue; and the keys of
    the launches waiting for the allocation lock. ``idle``: reservations' run
    ids -> since when their owner has not used them; ``releases``: -> when the
    node releases them unless used; ``idle_held``: jobs' run ids -> idle-held since."""
    made: dict[str, Cells] = {}
    for job in jobs:
        reserved = job.kind == "reservation"
        since = idle.get(job.key) if reserved else None
        releases_at = releases.get(job.key) if reserved else None
        held = idle_held.get(job.key) if job.kind == "job" else None
        made[JOB_PREFIX + job.name] = job_row(job, now, since, releases_at, held)
    waits: set[str] = set()
    position = 0
    for launch in pending:
        key = LAUNCH_PREFIX + launch.run_id
        if launch.state == QUEUED:
            position += 1
        made[key] = pending_row(launch, position if launch.state == QUEUED else None, now)
        if launch.state == WAITING:
            waits.add(key)
    return {key: _as_text(cells) for key, cells in made.items()}, waits


def columns_shown(rows: Iterable[TextCells], width: int, padding: int) -> tuple[str, ...]:
    """The keys of the columns shown in a table ``width`` cells wide, each as
    wide as its widest cell, RUNS at least RUNS_MIN (it takes what is left)."""
    widths = {key: len(label) for key, label in COLUMNS}
    for cells in rows:
        for (key, _label), cell in zip(COLUMNS[:-1], cells):
            widths[key] = max(widths[key], cell.cell_len)
    widths["workload"] = RUNS_MIN
    return columns_that_fit(widths, [key for key, _label in COLUMNS], LEFT_OUT_FIRST, width, padding)


def wrap(text: str, width: int, most: int) -> list[str]:
    """``text`` on at most ``most`` lines of ``width`` cells, the last one cut if need be."""
    lines = textwrap.wrap(text, max(1, width), break_on_hyphens=False) or [""]
    if len(lines) > most:
        lines = lines[: most - 1] + [" ".join(lines[most - 1 :])]
    return [fit(line, width) for line in lines]


def fitted(cells: TextCells, waits: bool, room: int) -> tuple[TextCells, int]:
    """The row with its last column (what it runs) fitted to ``room`` cells, and
    its height. What a launch waits for is told in full (``waits``: it names who
    holds the lock); a command is cut to one line, since the detail pane has it."""
    runs = cells[-1].plain
    lines = wrap(runs, room, WAIT_LINES) if waits else [fit(runs, room)]
    return cells[:-1] + (Text("\n".join(lines), style=cells[-1].style),), len(lines)
