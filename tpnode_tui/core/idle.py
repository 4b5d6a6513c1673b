"""Cards held and not used: a job flagged idle-held, a reservation given back.

Two pure rules for what the service follows from reading to reading: a job
whose cards all sit at 0 % with memory held is marked (never stopped), and a
reservation unused long enough is warned, then released unless used or
extended. A reading that cannot say flags nothing and counts as a moment of
use, so no card is taken on a guess. See docs/architecture.md, section 'The
usage ledger and idle cards'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import CardView

#: what to do about one reservation at one reading (None: nothing)
WARN, KEEP, RELEASE = "warn", "keep", "release"


def job_idle_held(job: JobState, cards: Mapping[int, CardView], mem_busy_mib: int) -> Optional[bool]:
    """Whether ``job`` holds its cards idle now: every card at 0 % and memory in use
    (from ``mem_busy_mib``, as a card counts as in use) on at least one of them.

    False while any card computes, or none holds memory; None when that cannot
    be told: a card unread, its utilisation or memory not reported, or MIG
    slices, for which drivers report no utilisation.
    """
    if not job.gpus or job.slices:
        return None
    facts = [cards[i].facts if i in cards else None for i in job.gpus]
    computing = _any_known([None if f is None else f.utilization_pct for f in facts], lambda pct: pct > 0)
    if computing is not False:
        return None if computing is None else False
    return _any_known([None if f is None else f.memory_used_mib for f in facts], lambda mib: mib >= mem_busy_mib)


def _any_known(values: list[Optional[int]], test: Callable[[int], bool]) -> Optional[bool]:
    """True when a known value passes ``test``; else None while some are unknown, or False."""
    if any(v is not None and test(v) for v in values):
        return True
    return None if None in values else False


@dataclass(frozen=True)
class IdleWarning:
    """A reservation warned that it will be released for being unused."""

    #: when it was warned (unix seconds)
    at: float
    #: when it is released unless used or extended first
    releases_at: float
    #: since when its owner had not used it, as it was warned
    unused_since: float
    #: its expiry as it was warned: an extension moves it
    expires_at: Optional[float]


def reclaim_step(
    unused_since: float, warning: Optional[IdleWarning], now: float, after_s: float, grace_s: float
) -> Optional[str]:
    """What to do about one live reservation, unused since ``unused_since`` (a use, a
    reading that could not tell, or an extension each move it on): WARN once it has
    been unused ``after_s``; KEEP a warned one used or extended since its warning;
    RELEASE a warned one still unused when its grace is out; else None."""
    if warning is None:
        return WARN if now - unused_since >= after_s else None
    if unused_since > warning.at:
        return KEEP
    if now >= warning.releases_at:
        return RELEASE
    return None
