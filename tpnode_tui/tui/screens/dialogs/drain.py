"""The drain form: why the card is taken out of service."""

from __future__ import annotations

from typing import Optional

from tpnode_tui.config.sections import DEFAULT_MAX_REASON_CHARS
from tpnode_tui.tui.screens.dialogs.form import Field, FormScreen


class DrainScreen(FormScreen[str]):
    """Why the card is taken out of service: the next operator reads it on the card."""

    submit_label = "Drain"

    def __init__(self, card: int, context: str = "") -> None:
        super().__init__()
        self.title_text = f"Drain card {card}"
        self.context = context

    def fields(self) -> list[Field]:
        return [("reason", "Reason", "", "e.g. fan failing, RMA 4411; XID 48 after the reset")]

    def collect(self) -> Optional[str]:
        reason = self.value("reason")
        if not reason:
            self.refuse("reason", "say why the card is drained, so the next operator knows")
            return None
        # the node's own limit decides (TUNEPLANE_MAX_REASON_CHARS); its default is asked here first
        if len(reason) > DEFAULT_MAX_REASON_CHARS:
            self.refuse("reason", f"{len(reason)} characters: a reason is at most {DEFAULT_MAX_REASON_CHARS}")
            return None
        return reason
