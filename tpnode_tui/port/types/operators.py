"""An operator's requests about a card: drain, undrain, evict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.port.fields import known_fields, over, text, whole
from tpnode_tui.port.types.parsing import PID_MAX, Limits, read_card
from tpnode_tui.port.wire.reader import Reader


@dataclass(frozen=True)
class DrainRequest:
    """Take a card out of service, saying why (operators)."""

    card: int
    reason: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> DrainRequest:
        known_fields(r, "card", "reason")
        card = read_card(r)
        reason = (text(r, "reason", required=True) or "").strip()
        if not reason:
            raise BadRequest("say why the card is drained (a reason), so the next operator knows")
        if limits is not None and len(reason) > limits.reason_chars:
            raise over(
                f"the reason is {len(reason)} characters",
                f"{limits.reason_chars}",
                "TUNEPLANE_MAX_REASON_CHARS",
                limits.reason_chars,
            )
        return cls(card, reason)

    def to_json(self) -> dict[str, Any]:
        return {"card": self.card, "reason": self.reason}


@dataclass(frozen=True)
class UndrainRequest:
    """Put a drained card back in service (operators); ``force``: even a card
    drained until the node reboots that has not rebooted, or passed no check since."""

    card: int
    force: bool = False

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> UndrainRequest:
        known_fields(r, "card", "force")
        return cls(read_card(r), r.flag("force", False))

    def to_json(self) -> dict[str, Any]:
        # "force" only when asked: an agent from before it refuses a field it does not know
        return {"card": self.card} | ({"force": True} if self.force else {})


@dataclass(frozen=True)
class EvictRequest:
    """SIGTERM a card's external or intruding processes, or the one ``pid``
    (operators); SIGKILL after the grace with ``kill``; ``dry_run`` only lists.
    ``started_at`` (from a dry run) names the very process ``pid`` must still be."""

    card: int
    pid: Optional[int] = None
    kill: bool = False
    dry_run: bool = False
    started_at: Optional[float] = None

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> EvictRequest:
        known_fields(r, "card", "pid", "kill", "dry_run", "started_at")
        pid = None if r.doc.get("pid") is None else whole(r, "pid", 1, PID_MAX, "a process id")
        started_at = r.opt_number("started_at")
        if started_at is not None and pid is None:
            raise BadRequest(f"{r.where}.started_at names the start of one process: give its pid too")
        return cls(read_card(r), pid, r.flag("kill", False), r.flag("dry_run", False), started_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "card": self.card,
            "pid": self.pid,
            "kill": self.kill,
            "dry_run": self.dry_run,
            "started_at": self.started_at,
        }
