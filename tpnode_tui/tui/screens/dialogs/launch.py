"""The launch form: how many cards, the command (and, on a docker node, the image), the run id."""

from __future__ import annotations

import shlex
from typing import Optional

from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.text.render import show_command
from tpnode_tui.tui.screens.dialogs.form import Field, FormScreen


class LaunchScreen(FormScreen[LaunchRequest]):
    title_text = "Launch a job"
    submit_label = "Launch"

    def __init__(
        self,
        *,
        total: int,
        docker: bool,
        default_command: tuple[str, ...],
        run_id: str,
        context: str = "",
        slices: str = "",
    ) -> None:
        """``slices``: the MIG profiles free now, on a node that has slices (else empty)."""
        super().__init__()
        self.context = context
        self.slices = slices
        self.total = total
        self.docker = docker
        self.default_command = default_command
        self.default_run_id = run_id

    def fields(self) -> list[Field]:
        if self.default_command:
            shown = show_command(self.default_command)
            hint = "empty runs " + (shown if len(shown) < 56 else shown[:53] + "...")
        else:
            hint = "e.g. python train.py --epochs 3"
        rows = [
            ("cards", "Cards", "1", f"1 to {self.total}" if self.total else "how many"),
            *self.slice_field(self.slices),
            ("command", "Command", "", hint),
        ]
        if self.docker:
            rows.append(("image", "Image", "", "container image, e.g. pytorch/pytorch:latest"))
        rows.append(("run-id", "Run id", self.default_run_id, "letters, digits, . _ -"))
        return rows

    def collect(self) -> Optional[LaunchRequest]:
        cards, profile = self.slice_and_cards(self.total, bool(self.slices))
        command: Optional[tuple[str, ...]] = None
        try:
            command = tuple(shlex.split(self.value("command")))
        except ValueError as e:
            self.refuse("command", f"the command cannot be read: {e} (quote it as in a shell)")
        image = self.value("image") if self.docker else ""
        if command is not None and not command and not image:
            if self.default_command:
                command = self.default_command
            else:
                self.refuse(
                    "command",
                    "give the command to run, e.g. python train.py" + (", or an image" if self.docker else ""),
                )
                command = None
        run_id = self.run_id("run-id")
        if cards is None or command is None or run_id is None:
            return None
        # The job is the asker's: the node names its owner, from who asks.
        return LaunchRequest(cards=cards, command=command, image=image or None, run_id=run_id, slice=profile)
