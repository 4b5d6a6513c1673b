"""What every probe promises.

A probe answers "what does the driver say about each card right now". It is
asked afresh on every poll and caches nothing about occupancy. When it cannot
answer it says so in its reading (``external_probe_ok=False`` with a
``problem`` in plain words) instead of returning an empty list: an empty list
would read as "nobody holds a card", the failure this product exists to prevent.
"""

from __future__ import annotations

from typing import Optional, Protocol

from tpnode_tui.model.facts import ProbeReading


class Probe(Protocol):
    @property
    def source(self) -> str:
        """Short name shown in the header and in ``status --json``: nvml, nvidia-smi, simulated, none."""
        ...

    async def read(self) -> ProbeReading:
        """Read every card now. Never raises for a driver problem: a reading
        that could not be taken is a blind reading with the reason."""
        ...

    async def close(self) -> None: ...


def blind_reading(source: str, problem: str, count: Optional[int] = None) -> ProbeReading:
    """A reading that could not see use from outside the platform."""
    return ProbeReading(source=source, cards=(), count=count, external_probe_ok=False, problem=problem)
