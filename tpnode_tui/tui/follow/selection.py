"""What the keys act on now, and the state they are offered in, decided without a screen.

The main screen makes one from its widgets (the grid's selected card, the
jobs table's highlighted row and whether it has the focus) and what the
dashboard knows (the last reading, who asks, whether it is stale); the table
of keys (tui/wording/keys.py) decides from it which keys are offered, and
each action's flow what it acts on. A frozen value, so both read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.model.owners import is_owner
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView
from tpnode_tui.port.types.readings import You
from tpnode_tui.tui.wording.jobs import JOB_PREFIX, LAUNCH_PREFIX


@dataclass(frozen=True)
class Selection:
    #: the last reading's snapshot, escaped (None until one was made), and who the node says asks
    snapshot: Optional[NodeSnapshot]
    you: Optional[You]
    #: what is shown may be out of date (polls failing, or the node's agent gone)
    stale: bool
    #: the card selected in the grid
    card_index: int
    #: the jobs table's highlighted row's key ("" for none), and whether the table has the focus
    row: str = ""
    jobs_focused: bool = False
    readonly: bool = False
    paused: bool = False
    has_demo: bool = False
    #: the node's log in place of the jobs table, and the card it is kept to (None: every card)
    log_shown: bool = False
    log_card: Optional[int] = None
    #: an eviction's dry run is on its way (its question would come twice)
    evict_asking: bool = False
    #: a shell can be opened from here (a node on this machine, not the demo's)
    shells: bool = False

    @property
    def operator(self) -> bool:
        """Whether the node says the person at the dashboard operates it."""
        return self.you is not None and self.you.operator

    def selected_card(self) -> Optional[CardView]:
        snap = self.snapshot
        if snap is None:
            return None
        return next((c for c in snap.cards if c.index == self.card_index), None)

    def job_for_row(self) -> Optional[JobState]:
        """The job of the jobs table's highlighted row (None for a launch's row, or none)."""
        snap = self.snapshot
        if snap is None or not self.row.startswith(JOB_PREFIX):
            return None
        name = self.row[len(JOB_PREFIX) :]
        return next((j for j in snap.jobs if j.name == name), None)

    def selected_launch(self) -> Optional[QueuedLaunch]:
        """The launch not started yet (queued or under way) highlighted in the jobs table."""
        snap = self.snapshot
        if snap is None or not self.jobs_focused or not self.row.startswith(LAUNCH_PREFIX):
            return None
        run_id = self.row[len(LAUNCH_PREFIX) :]
        return next((q for q in snap.queue if q.run_id == run_id), None)

    def stop_target(self) -> Optional[JobState]:
        """The live job the stop and extend keys act on: the highlighted row while
        the jobs table has the focus, else the selected card's job."""
        if self.stale:
            return None
        if self.jobs_focused:
            job = self.job_for_row()
            return job if job is not None and job.live else None
        card = self.selected_card()
        if card is None or card.job is None or not card.job.live:
            return None
        return card.job

    def extend_target(self) -> Optional[JobState]:
        job = self.stop_target()
        return job if job is not None and job.kind == "reservation" and job.expires_at else None

    def shell_target(self) -> Optional[JobState]:
        """The running reservation the shell key opens a shell on, chosen as stop's
        is, where the node's runtime runs shells (a docker node's reservation is a container)."""
        if not self.shells or self.snapshot is None or self.snapshot.runtime_kind != "process":
            return None
        job = self.stop_target()
        return job if job is not None and job.kind == "reservation" else None

    def triage_card(self) -> Optional[CardView]:
        """The card drain, undrain and evict act on: the selected one, while the
        node answers and is read (an operator acts on what is there now)."""
        return None if self.stale else self.selected_card()

    def mine(self, owner_uid: Optional[int], owner: str) -> bool:
        """Whether the node would let the caller end or change what ``owner``
        holds: theirs (by uid where recorded, else by name), or anyone's for an
        operator. Only to offer keys; the node decides, and says why not."""
        you = self.you
        return you is not None and (you.operator or is_owner(owner_uid, owner, you.uid, you.user))

    def exited_jobs(self) -> list[JobState]:
        """The exited jobs the caller may reclaim: their own, or all for an operator."""
        if self.snapshot is None:
            return []
        return [j for j in self.snapshot.jobs if not j.live and self.mine(j.uid, j.owner)]
