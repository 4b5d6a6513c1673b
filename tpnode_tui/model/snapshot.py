"""Everything one poll learned, for display (NodeSnapshot), and a card's history (Sample).

Built afresh on every read and never updated in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.jobs import DeviceFence, JobState, QueuedLaunch
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.views import CardView


@dataclass(frozen=True)
class NodeSnapshot:
    """Everything one poll learned, for display. Built afresh each time."""

    taken_at: float
    host: str
    occupancy: GpuOccupancy
    cards: tuple[CardView, ...]
    jobs: tuple[JobState, ...]
    probe: ProbeReading
    series: str = ""
    runtime: str = ""
    #: the runtime's kind, "docker" or "process": a docker launch names an image
    runtime_kind: str = ""
    #: TUNEPLANE_ALLOW_UNVERIFIED: cards are handed out even while use from outside cannot be probed
    allow_unverified: bool = False
    #: TUNEPLANE_MEM_BUSY_MIB: memory in use from which a card counts as held
    mem_busy_mib: int = 512
    lock: str = ""
    #: who holds the allocation lock or why it cannot be had (Redis down); None when free
    lock_state: Optional[str] = None
    explain: str = ""
    #: launches waiting their turn, in order
    queue: tuple[QueuedLaunch, ...] = ()
    #: live reservations whose owner has used none of their cards for
    #: TUNEPLANE_IDLE_RESERVATION_MIN or longer: run id -> unix seconds since when
    idle: dict[str, float] = field(default_factory=dict)
    #: live reservations warned for being unused (TUNEPLANE_RECLAIM_IDLE_AFTER): run id ->
    #: unix seconds at which the node releases it unless its owner uses or extends it first
    releases: dict[str, float] = field(default_factory=dict)
    #: live jobs whose cards have sat at 0 % utilisation with memory held for
    #: TUNEPLANE_FLAG_IDLE_JOB_AFTER or longer (idle-held): run id -> unix seconds since when
    idle_held: dict[str, float] = field(default_factory=dict)
    #: where XID events are read from ("nvml", "kmsg", "simulated"); "" when they are not
    xid_watch: str = ""
    #: why XID events are not watched, in plain words; None while they are
    xid_problem: Optional[str] = None
    #: whether the node's runtime fences the jobs it starts, and how, as it found at start
    node_fence: DeviceFence = DeviceFence()
    #: what an operator must know of the launch queue: records that could not be
    #: read back and were set aside (and where), or a queue file that cannot be
    #: read at all; None while the queue is whole
    queue_problem: Optional[str] = None
    #: TUNEPLANE_RETURN_AFTER_CHECK: a check that passes returns a card the node
    #: drained itself; None: the node did not say (an older agent)
    return_after_check: Optional[bool] = None
    #: this boot's id, against which a drain until a reboot is judged; None: not
    #: read (no card is drained until a reboot) or not readable
    boot: Optional[str] = None

    @property
    def intruder_cards(self) -> tuple[int, ...]:
        """Cards on which someone other than their holder has a process."""
        return tuple(c.index for c in self.cards if c.intruders)


@dataclass(frozen=True)
class Sample:
    """A moment of a card's history: one poll (``seconds`` 0), or the average of
    the polls of ``seconds`` seconds from ``at``."""

    at: float
    seconds: float
    utilization_pct: Optional[float]
    memory_used_mib: Optional[float]
    power_w: Optional[float]
    temperature_c: Optional[float]
