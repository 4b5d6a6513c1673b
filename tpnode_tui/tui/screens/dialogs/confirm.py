"""Yes or no, with the consequence spelled out: what every question before an action is."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static

from tpnode_tui.text.printable import printable, printable_lines


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no, with the consequence spelled out. Cancel has the focus: a stray
    enter must not stop somebody's training."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes", tooltip="Do it"),
        Binding("n,escape", "answer(False)", "No", id="confirm-no", tooltip="Do nothing"),
    ]

    def __init__(self, title: str, body: str, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog-title", markup=False)
            yield Static(printable_lines(self.body), classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel (n)", id="no")
                yield Button(f"{self.yes} (y)", id="yes", variant="warning")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
