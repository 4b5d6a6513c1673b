"""The request to check a card."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpnode_tui.port.fields import known_fields
from tpnode_tui.port.types.parsing import Limits, read_card
from tpnode_tui.port.wire.reader import Reader


@dataclass(frozen=True)
class CheckRequest:
    """Check a card before it goes back into service (operators)."""

    card: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> CheckRequest:
        known_fields(r, "card")
        return cls(read_card(r))

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card}
