"""The extend form: how much longer a reservation holds its cards."""

from __future__ import annotations

from typing import Optional

from tpnode_tui.config.values import typed_duration
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JobState
from tpnode_tui.text.render import cards_words
from tpnode_tui.tui.screens.dialogs.form import Field, FormScreen


class ExtendScreen(FormScreen[float]):
    """How much longer a reservation holds its cards."""

    title_text = "Extend a reservation"
    submit_label = "Extend"

    def __init__(self, job: JobState, context: str = "") -> None:
        super().__init__()
        self.job = job
        self.title_text = f"Extend {job.key}"
        self.context = context or (
            f"{job.key} holds {cards_words(job.gpus)} for {job.owner or 'nobody'}; "
            "it is held this much longer than it would have been."
        )

    def fields(self) -> list[Field]:
        return [("duration", "Longer by", "1h", "e.g. 30m, 2h, 1h30m, 1d")]

    def collect(self) -> Optional[float]:
        try:
            return typed_duration(self.value("duration"))
        except BadRequest as e:
            self.refuse("duration", str(e))
            return None
