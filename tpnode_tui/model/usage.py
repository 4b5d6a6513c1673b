"""Who used which cards over a span of time: the usage report, as every client shows it.

Made by the node from its usage ledger (:mod:`tpnode_tui.state.ledger`), which
records history only: nothing here is ever read to decide who gets a card.

Whole cards and MIG slices are counted apart. A slice is a part of a card of
a size its profile says, and drivers report no utilisation for it, so an
hour on a 1g.18gb slice counted as a card-hour would bill its holder for a
whole card, and its "used" hours could only be made up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.jobs import SliceRef

#: what a report's rows are: one per account, per card, or per job or reservation
USAGE_BY = ("user", "card", "job")

#: utilisation under which a held card counts as idle, in %: a card that is
#: only polled by a monitoring loop or kept warm reads 1-3 %, never 0
IDLE_UTIL_PCT = 5.0


@dataclass(frozen=True)
class UsageFigures:
    """One row's (or the node's) use of its cards in the report's span."""

    #: whole cards held, in card-hours: every hour a card was held, used or not
    held_card_hours: float = 0.0
    #: held time weighted by utilisation (a card held one hour at 50 %: 0.5);
    #: only time whose utilisation was read counts, and none while the holder
    #: had no process on the card (an intruder's use is not the holder's)
    used_card_hours: float = 0.0
    #: held time with no process of the holder on the card, or under
    #: IDLE_UTIL_PCT utilisation
    idle_card_hours: float = 0.0
    #: MIG slices held, in slice-hours, whatever their size
    held_slice_hours: float = 0.0
    #: held slice time with no process of the holder on the slice
    idle_slice_hours: float = 0.0
    #: the most memory the holder's own processes used on a held card or slice in
    #: one minute, MiB (memory no one else's process accounts for counts as the
    #: holder's; an intruder's never does); None when it was never read
    peak_memory_mib: Optional[int] = None
    #: jobs and reservations whose holding overlaps the span
    jobs: int = 0
    reservations: int = 0
    #: held card time during which someone else's process was on the card
    intruded_card_hours: float = 0.0
    #: the most memory someone else's processes used on a held card or slice in
    #: one minute, MiB; None when none was there, or it was not read
    intruder_peak_memory_mib: Optional[int] = None


@dataclass(frozen=True)
class UsageRow:
    """One row of a report: which fields name it depends on the report's ``by``.

    By user: ``user`` and ``uid``. By card: ``card``. By job: ``run_id``, its
    ``kind``, owner (``user``, ``uid``), what it held (``cards``, ``slices``)
    and when (``start``, ``end``; ``end`` None while it still holds them), as
    sacct lists a job; a run id given again later is a row of its own.
    """

    figures: UsageFigures
    user: Optional[str] = None
    uid: Optional[int] = None
    card: Optional[int] = None
    run_id: Optional[str] = None
    kind: Optional[str] = None
    cards: tuple[int, ...] = ()
    slices: tuple[SliceRef, ...] = ()
    start: Optional[float] = None
    end: Optional[float] = None


@dataclass(frozen=True)
class UsageReport:
    """A span's use of the node's cards: the rows its reader may see, and the node's total."""

    #: the span, unix seconds; ``since`` is never earlier than what the ledger keeps
    since: float
    until: float
    #: one of USAGE_BY
    by: str
    rows: tuple[UsageRow, ...]
    #: the whole node's, every account's rows together, whoever reads it
    total: UsageFigures
    #: True when the rows are every account's (an operator's report), False
    #: when they are the reader's own only
    everyone: bool
    #: how many days the ledger keeps
    kept_days: int
    #: rows of the span not in this answer, which holds at most the node's page
    #: (TUNEPLANE_MAX_PAGE): the earliest jobs, or the smallest accounts. The
    #: total still counts them
    left_out: int = 0
