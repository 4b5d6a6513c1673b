"""The cards' last hour of readings as JSON, and back."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tpnode_tui.model.snapshot import Sample
from tpnode_tui.port.wire.reader import Reader, WireError


def history_to_json(history: dict[int, list[Sample]]) -> dict[str, Any]:
    """{"cards": {"3": [{"at", "seconds", "utilization_pct", ...}, ...]}}."""
    return {"cards": {str(card): [asdict(s) for s in samples] for card, samples in history.items()}}


def _sample(r: Reader) -> Sample:
    return Sample(
        at=r.number("at"),
        seconds=r.number("seconds"),
        utilization_pct=r.opt_number("utilization_pct"),
        memory_used_mib=r.opt_number("memory_used_mib"),
        power_w=r.opt_number("power_w"),
        temperature_c=r.opt_number("temperature_c"),
    )


def history_from_json(doc: Any, where: str = "history") -> dict[int, list[Sample]]:
    r = Reader(doc, where)
    out: dict[int, list[Sample]] = {}
    for key, samples in r.obj("cards").items():
        if not key.isdigit() or len(key) > 6:
            raise WireError(f"{where}.cards has {key!r}, not a card index")
        out[int(key)] = Reader({"s": samples}, f"{where}.cards.{key}").each("s", _sample)
    return out
