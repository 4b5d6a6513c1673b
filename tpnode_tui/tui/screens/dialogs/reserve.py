"""The reserve form: how many cards, for how long, for whom, under which run id."""

from __future__ import annotations

from typing import Optional

from tpnode_tui.config.values import typed_duration
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.tui.screens.dialogs.form import Field, FormScreen


class ReserveScreen(FormScreen[ReserveRequest]):
    title_text = "Reserve cards for a person"
    submit_label = "Reserve"

    def __init__(
        self, *, total: int, owner: str, operator: bool, run_id: str, context: str = "", slices: str = ""
    ) -> None:
        """``owner``: who is asking; only an ``operator`` may reserve for someone else.
        ``slices``: the MIG profiles free now, on a node that has slices (else empty)."""
        super().__init__()
        self.context = context
        self.slices = slices
        self.total = total
        self.owner = owner
        self.operator = operator
        self.default_run_id = run_id

    def fields(self) -> list[Field]:
        return [
            ("cards", "Cards", "1", f"1 to {self.total}" if self.total else "how many"),
            *self.slice_field(self.slices),
            ("duration", "For", "2h", "e.g. 30m, 2h, 1h30m, 1d"),
            ("owner", "Owner", self.owner, "who the cards are for"),
            ("run-id", "Run id", self.default_run_id, "letters, digits, . _ -"),
        ]

    def collect(self) -> Optional[ReserveRequest]:
        cards, profile = self.slice_and_cards(self.total, bool(self.slices))
        duration: Optional[float] = None
        try:
            duration = typed_duration(self.value("duration"))
        except BadRequest as e:
            self.refuse("duration", f"{e}; a reservation always ends")
        owner = self.value("owner")
        if not owner:
            self.refuse("owner", "say who the cards are for")
        elif owner != self.owner and not self.operator:
            self.refuse("owner", f"only an operator may reserve for someone else; these are for {self.owner}, who asks")
            owner = ""
        run_id = self.run_id("run-id")
        if cards is None or duration is None or not owner or run_id is None:
            return None
        return ReserveRequest(cards=cards, duration_s=duration, run_id=run_id, owner=owner, slice=profile)
