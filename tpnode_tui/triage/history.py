"""The last hour of each card: utilisation, memory used, power and temperature, in fixed rings.

An operator asking "was card 3 busy before this job started?" or "did it
heat up before the XID?" needs the recent past, not a database. So the
service keeps, per card, two rings of fixed size, allocated once:

* **fine**: every poll of the last five minutes (at 0.2 s polls, 1500 slots);
* **coarse**: 10-second averages over the whole hour (360 slots), filled as
  polls arrive, so nothing is ever recomputed or moved between the rings.

Nothing is written to a file and nothing grows: however long the service
runs, a card's history is the same number of bytes (:meth:`History.nbytes`).
A value the driver could not read is kept as unknown (NaN), never as zero,
and comes back as None.
"""

from __future__ import annotations

import math
from array import array
from typing import Iterable, Optional

from tpnode_tui.model.facts import CardFacts
from tpnode_tui.model.snapshot import Sample

#: seconds of full resolution, and of history altogether
FINE_S = 300.0
HOUR_S = 3600.0
#: seconds one coarse slot averages
COARSE_STEP_S = 10.0
#: the fastest poll the fine ring is sized for; faster polls shorten its reach, never its size
MIN_INTERVAL_S = 0.05

#: fields of a sample, in ring order
FIELDS = ("utilization_pct", "memory_used_mib", "power_w", "temperature_c")
_NAN = float("nan")


def _values(facts: Optional[CardFacts]) -> tuple[float, ...]:
    if facts is None:
        return (_NAN,) * len(FIELDS)
    return tuple(_NAN if (v := getattr(facts, f)) is None else float(v) for f in FIELDS)


def _known(value: float) -> Optional[float]:
    return None if math.isnan(value) else value


class _Ring:
    """``size`` slots of a time and the four fields, in flat preallocated arrays."""

    def __init__(self, size: int) -> None:
        width = 1 + len(FIELDS)
        self.size = size
        self.data = array("d", [_NAN]) * (size * width)
        self.width = width
        self.next = 0
        self.count = 0

    def put(self, at: float, values: Iterable[float]) -> None:
        base = self.next * self.width
        self.data[base] = at
        for n, v in enumerate(values, 1):
            self.data[base + n] = v
        self.next = (self.next + 1) % self.size
        self.count = min(self.count + 1, self.size)

    def rows(self) -> Iterable[tuple[float, ...]]:
        """Oldest first."""
        start = (self.next - self.count) % self.size
        for i in range(self.count):
            base = ((start + i) % self.size) * self.width
            yield tuple(self.data[base : base + self.width])

    @property
    def nbytes(self) -> int:
        return self.data.itemsize * len(self.data)


class CardHistory:
    """One card's hour."""

    def __init__(self, interval_s: float) -> None:
        fine = math.ceil(FINE_S / max(interval_s, MIN_INTERVAL_S)) + 1
        self.fine = _Ring(fine)
        self.coarse = _Ring(math.ceil(HOUR_S / COARSE_STEP_S))
        #: the coarse slot being filled: its start, and per field the sum and count of known values
        self._slot: Optional[float] = None
        self._sums = [0.0] * len(FIELDS)
        self._counts = [0] * len(FIELDS)

    def record(self, at: float, facts: Optional[CardFacts]) -> None:
        values = _values(facts)
        self.fine.put(at, values)
        slot = math.floor(at / COARSE_STEP_S) * COARSE_STEP_S
        if self._slot is not None and slot != self._slot:
            self._close_slot()
        self._slot = slot
        for n, v in enumerate(values):
            if not math.isnan(v):
                self._sums[n] += v
                self._counts[n] += 1

    def _close_slot(self) -> None:
        assert self._slot is not None
        self.coarse.put(self._slot, (s / c if c else _NAN for s, c in zip(self._sums, self._counts)))
        self._sums = [0.0] * len(FIELDS)
        self._counts = [0] * len(FIELDS)

    def samples(self, now: float) -> list[Sample]:
        """The hour before ``now``, oldest first: 10-second averages up to where
        the fine ring begins, then every poll."""
        fine = [r for r in self.fine.rows() if r[0] > now - HOUR_S]
        fine_from = fine[0][0] if fine else math.inf
        out = [
            Sample(r[0], COARSE_STEP_S, *map(_known, r[1:]))
            for r in self.coarse.rows()
            if r[0] > now - HOUR_S and r[0] + COARSE_STEP_S <= fine_from
        ]
        out += [Sample(r[0], 0.0, *map(_known, r[1:])) for r in fine]
        return out

    @property
    def nbytes(self) -> int:
        return self.fine.nbytes + self.coarse.nbytes


class History:
    """Every card's hour, recorded from each snapshot the service takes."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.cards: dict[int, CardHistory] = {}

    def record(self, at: float, cards: Iterable[tuple[int, Optional[CardFacts]]]) -> None:
        for index, facts in cards:
            ring = self.cards.get(index)
            if ring is None:
                ring = self.cards[index] = CardHistory(self.interval_s)
            ring.record(at, facts)

    def samples(self, card: int, now: float) -> list[Sample]:
        ring = self.cards.get(card)
        return [] if ring is None else ring.samples(now)

    def nbytes(self) -> int:
        """The bytes the rings hold: fixed once every card has been seen."""
        return sum(r.nbytes for r in self.cards.values())
