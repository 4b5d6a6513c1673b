"""A node whose jobs and card readings a test sets by hand, read as snapshots at the times it names.

The usage ledger is a function of readings, so its tests hand it readings:
which jobs hold which cards, and what each card reads (utilisation, memory,
whether the holder's process, an intruder's, or nobody's is on it), each at a
time the test chooses. 90 days are then a loop, not a wait.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.model.jobs import JobState, SliceRef
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import HOLDER, INTRUDER, UNKNOWN, CardView, HolderInfo, SliceView
from tpnode_tui.state.ledger import LEDGER_FILE, UsageLedger

#: a moment well inside a day, so whole hours and minutes fall on whole numbers
T0 = 1_780_000_200.0
HOUR = 3600.0


@dataclass
class Use:
    """What a card or slice reads: utilisation, memory, and whose process is on it
    (``who``: "holder", "intruder", "unseen" (a pid this machine cannot look
    at), "none", or None when the process list cannot be read)."""

    util: Optional[int] = None
    mem: Optional[int] = None
    who: Optional[str] = "none"
    #: an intruder's process beside ``who``'s, using this much of ``mem``
    intruder_mem: Optional[int] = None


class Scene:
    def __init__(self, cards: int = 8) -> None:
        self.count = cards
        self.use: dict[int, Use] = {i: Use(util=0, mem=0) for i in range(cards)}
        #: card -> its MIG slices (uuid, profile)
        self.mig: dict[int, list[tuple[str, str]]] = {}
        self.slice_use: dict[str, Use] = {}
        self.jobs: dict[str, JobState] = {}

    def hold(
        self,
        run_id: str,
        owner: Caller,
        cards: Iterable[int] = (),
        *,
        kind: str = "job",
        started_at: Optional[float] = None,
        slices: Iterable[SliceRef] = (),
    ) -> JobState:
        job = JobState(
            name=f"tpn-{run_id}",
            run_id=run_id,
            gpus=tuple(cards),
            status="running",
            kind=kind,
            owner=owner.user,
            uid=owner.uid,
            started_at=started_at,
            slices=tuple(slices),
        )
        self.jobs[run_id] = job
        return job

    def exit(self, run_id: str) -> None:
        """The job ended; the runtime still lists it until it is reclaimed."""
        self.jobs[run_id] = replace(self.jobs[run_id], status="exited", exit_code=0)

    def remove(self, run_id: str) -> None:
        del self.jobs[run_id]

    def set(
        self,
        card: int,
        util: Optional[int] = None,
        mem: Optional[int] = None,
        who: Optional[str] = "holder",
        intruder_mem: Optional[int] = None,
    ) -> None:
        self.use[card] = Use(util, mem, who, intruder_mem)

    def split(self, card: int, *slices: tuple[str, str]) -> None:
        """The card in MIG mode with these slices (uuid, profile), each unused."""
        self.mig[card] = list(slices)
        for uuid, _ in slices:
            self.slice_use.setdefault(uuid, Use(None, 0, "none"))

    def set_slice(self, uuid: str, mem: Optional[int] = None, who: Optional[str] = "holder") -> None:
        self.slice_use[uuid] = Use(None, mem, who)

    # ── the snapshot ───────────────────────────────────────────────────────

    def snap(self, at: float) -> NodeSnapshot:
        live = [j for j in self.jobs.values() if j.live]
        cards = tuple(self._card(i, live) for i in range(self.count))
        return NodeSnapshot(
            taken_at=at,
            host="test-node",
            occupancy=GpuOccupancy(total=self.count),
            cards=cards,
            jobs=tuple(self.jobs.values()),
            probe=ProbeReading("test", tuple(c.facts for c in cards if c.facts is not None), count=self.count),
        )

    def _card(self, index: int, live: list[JobState]) -> CardView:
        job = next((j for j in live if index in j.gpus), None)
        use = self.use[index]
        holders = _holders(use, 1000 + index)
        facts = CardFacts(
            index=index,
            memory_total_mib=143771,
            memory_used_mib=use.mem,
            utilization_pct=None if index in self.mig else use.util,
            processes=None if use.who is None else tuple(ProcessFacts(h.pid, h.used_memory_mib) for h in holders),
            mig_mode=index in self.mig,
            slices=tuple(self._slice_facts(index)),
        )
        views = tuple(self._slice_view(index, s, live) for s in facts.slices or ())
        state = job.kind if job is not None else ("mig" if index in self.mig else "free")
        return CardView(
            index=index,
            state=state,
            facts=facts,
            run_id=job.run_id if job else None,
            job=job,
            holders=holders + tuple(h for v in views for h in v.holders),
            slices=views,
        )

    def _slice_facts(self, card: int) -> Iterable[SliceFacts]:
        for n, (uuid, profile) in enumerate(self.mig.get(card, ())):
            use = self.slice_use[uuid]
            pids = tuple(ProcessFacts(h.pid) for h in _holders(use, 3000 + 10 * card + n))
            yield SliceFacts(
                index=n,
                uuid=uuid,
                profile=profile,
                memory_total_mib=18000,
                memory_used_mib=use.mem,
                processes=None if use.who is None else pids,
            )

    def _slice_view(self, card: int, facts: SliceFacts, live: list[JobState]) -> SliceView:
        job = next((j for j in live if any(s.uuid == facts.uuid for s in j.slices)), None)
        use = self.slice_use[facts.uuid or ""]
        return SliceView(
            card=card,
            facts=facts,
            state=job.kind if job is not None else "free",
            run_id=job.run_id if job else None,
            job=job,
            holders=_holders(use, 3000 + 10 * card + facts.index),
        )


def _holders(use: Use, pid: int) -> tuple[HolderInfo, ...]:
    """The processes on it: ``who``'s, using what of ``mem`` the intruder beside it does not."""
    belongs = {"holder": HOLDER, "intruder": INTRUDER, "unseen": UNKNOWN}.get(use.who or "")
    beside = (
        ()
        if use.intruder_mem is None
        else (HolderInfo(pid=pid + 500, used_memory_mib=use.intruder_mem, belongs=INTRUDER),)
    )
    if belongs is None:
        return beside
    mem = None if use.mem is None else use.mem - (use.intruder_mem or 0)
    return (HolderInfo(pid=pid, used_memory_mib=mem, visible=belongs != UNKNOWN, belongs=belongs), *beside)


def run(
    ledger: UsageLedger,
    scene: Scene,
    start: float,
    end: float,
    step: float = 5.0,
    events: Optional[dict[float, Callable[[], object]]] = None,
) -> float:
    """Poll from ``start`` up to and with ``end``, every ``step`` seconds; the last time polled.

    ``events[at]`` is done to the scene before the first poll at or after ``at``.
    """
    pending = sorted((events or {}).items())
    t = start
    while t <= end:
        while pending and pending[0][0] <= t:
            pending.pop(0)[1]()
        ledger.update(scene.snap(t))
        t += step
    return t - step


def rows(state: Path, sql: str, *args: object) -> list[tuple]:
    """What the ledger's file holds, read as a separate reader would."""
    conn = sqlite3.connect(f"file:{state / LEDGER_FILE}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()
