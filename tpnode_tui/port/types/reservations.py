"""The requests about a reservation: reserve cards, extend it, open a shell on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from tpnode_tui.port.fields import duration, known_fields, text, whole
from tpnode_tui.port.types.parsing import Limits, asked_fields, longest, read_job_key, read_run_id, read_what
from tpnode_tui.port.wire.reader import Reader


@dataclass(frozen=True)
class ReserveRequest:
    cards: int
    duration_s: float
    run_id: Optional[str] = None
    owner: str = ""
    placement: Optional[str] = None
    #: a MIG profile: reserve one MIG slice of it (``cards`` is then 1)
    slice: Optional[str] = None

    FIELDS: ClassVar[tuple[str, ...]] = ("cards", "duration_s", "run_id", "owner", "slice", "placement")

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ReserveRequest:
        known_fields(r, *cls.FIELDS)
        cards, slice_, placement = read_what(r)
        return cls(
            cards=cards,
            duration_s=duration(
                r, "duration_s", "a reservation lasts at least 1 second", longest(limits), "a reservation"
            ),
            run_id=read_run_id(r),
            owner=text(r, "owner", "") or "",
            placement=placement,
            slice=slice_,
        )

    def to_json(self) -> dict[str, Any]:
        doc = {"cards": self.cards, "duration_s": self.duration_s, "run_id": self.run_id, "owner": self.owner}
        return doc | asked_fields(slice=self.slice, placement=self.placement)


@dataclass(frozen=True)
class ExtendRequest:
    """Hold a live reservation ``duration_s`` longer."""

    run_id: str
    duration_s: float

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ExtendRequest:
        known_fields(r, "run_id", "duration_s")
        return cls(
            run_id=read_job_key(r),
            duration_s=duration(r, "duration_s", "extend by at least 1 second", longest(limits), "an extension"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "duration_s": self.duration_s}


@dataclass(frozen=True)
class ShellRequest:
    """Move the asking process into a live reservation's fence (``tpnode-tui shell``).

    Which process is moved is never said here: it is the one at the other end of
    the socket, as the kernel names it (``SO_PEERCRED``). ``seen_pid`` and
    ``seen_start_ticks`` are what the asking CLI sees of itself (``os.getpid()``
    and its start in /proc): never trusted, only compared with the kernel's peer
    and its start, so that a forwarder in between (``ssh -L``, ``socat``), whose
    process the kernel names instead, is refused rather than moved."""

    run_id: str
    seen_pid: int
    seen_start_ticks: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ShellRequest:
        known_fields(r, "run_id", "seen_pid", "seen_start_ticks")
        return cls(
            read_job_key(r),
            whole(r, "seen_pid", 1, 2**31 - 1, "a process id"),
            whole(r, "seen_start_ticks", 0, 2**63 - 1, "a start time in clock ticks since boot"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seen_pid": self.seen_pid, "seen_start_ticks": self.seen_start_ticks}
