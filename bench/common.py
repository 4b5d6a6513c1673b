"""What every benchmark section shares: where things are, timing, and the result rows.

The figures are for people comparing two ways of doing one thing, so every
comparison is a ratio of two medians measured in the same run, interleaved
round by round: on a shared machine the load drifts, and measuring one side
first and the other a minute later would measure the drift.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TESTS = ROOT / "tests"
DEFAULT_SEED = ROOT.parent / "shared" / "seed" / "allocator.py"

# The product from this checkout and the test helpers (fake NVML, the
# nvidia-smi stub, the service starters), imported rather than copied.
for _path in (str(ROOT), str(TESTS)):
    if _path not in sys.path:
        sys.path.insert(1, _path)


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile: with few samples p99 is simply the slowest one."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Row:
    """One measured figure, as the table and the JSON show it."""

    key: str
    label: str
    #: seconds when ``unit`` is "ms" (shown as milliseconds); else in ``unit``
    samples: list[float] = field(default_factory=list)
    unit: str = "ms"

    @property
    def median(self) -> Optional[float]:
        return self._scaled(statistics.median(self.samples)) if self.samples else None

    @property
    def p99(self) -> Optional[float]:
        """For times only: the 99th percentile of a rate would be its best case."""
        if self.unit != "ms" or not self.samples:
            return None
        return self._scaled(percentile(self.samples, 99))

    def _scaled(self, value: float) -> float:
        return value * 1000 if self.unit == "ms" else value


@dataclass
class Ratio:
    """``slow / fast`` of two rows' medians, and the target it is held to, if any."""

    key: str
    label: str
    slow: Row
    fast: Row
    #: the ratio must be at least this; None for a ratio that is only reported
    target: Optional[float] = None

    @property
    def value(self) -> Optional[float]:
        slow, fast = self.slow.median, self.fast.median
        if slow is None or not fast:
            return None
        return slow / fast

    @property
    def met(self) -> Optional[bool]:
        if self.target is None or self.value is None:
            return None
        return self.value >= self.target


@dataclass
class Limit:
    """A figure held to an upper bound (a target like "under 2 ms")."""

    label: str
    row: Row
    bound: float
    #: "at most" rather than "under"
    inclusive: bool = False

    @property
    def value(self) -> Optional[float]:
        return self.row.median

    @property
    def met(self) -> Optional[bool]:
        if self.value is None:
            return None
        return self.value <= self.bound if self.inclusive else self.value < self.bound


@dataclass
class Section:
    """What one section measured."""

    title: str
    rows: list[Row] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: why the section could not run (a service would not start), if it could not
    skipped: Optional[str] = None


Call = Callable[[], Awaitable[object]]


async def interleave(calls: dict[str, tuple[Call, int]], rounds: int, warmup: int = 2) -> dict[str, list[float]]:
    """Time each call, round by round: ``calls[name] = (call, times per round)``.

    Every call is made ``warmup`` times first and those are thrown away (the
    first NVML read starts its worker thread, the first docker call opens the
    connection).
    """
    for call, _ in calls.values():
        for _ in range(warmup):
            await call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (call, per_round) in calls.items():
            for _ in range(per_round):
                start = time.perf_counter()
                await call()
                times[name].append(time.perf_counter() - start)
    return times


async def _keeping_cancel(coro):
    """``coro``, then a cancellation it swallowed raised again.

    Ctrl-C cancels the running task. In Python 3.11 ``asyncio.wait_for`` can
    lose that cancellation when its inner call finishes at the same moment,
    and asyncio.run then returns as if nothing happened: the run would go on
    after the user asked it to stop.
    """
    result = await coro
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError
    return result


def run_async(coro):
    """asyncio.run, so every section gets a fresh loop and nothing leaks between them."""
    return asyncio.run(_keeping_cancel(coro))
