"""A dialog of labelled inputs, each with its own error line: what the launch, reserve, extend and drain forms share."""

from __future__ import annotations

from typing import Generic, Optional, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.validation import check_run_id
from tpnode_tui.text.printable import printable

#: what a form answers once every field is accepted
Result = TypeVar("Result")

#: (field id, label, value, placeholder)
Field = tuple[str, str, str, str]


class FormScreen(ModalScreen[Optional[Result]], Generic[Result]):
    """A dialog of labelled inputs, each with its own error line. It answers
    what :meth:`collect` makes of the fields, or None when closed without it."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="form-cancel", tooltip="Close without doing anything")]

    title_text = ""
    submit_label = "OK"
    #: a line under the title: what the node has free now, as the last poll saw it
    context = ""

    def fields(self) -> list[Field]:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            # Text, not markup: a context may quote an owner, who chose their own name.
            yield Static(Text(self.title_text), classes="dialog-title")
            if self.context:
                yield Static(Text(self.context), classes="dialog-context")
            for field_id, label, value, placeholder in self.fields():
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    with Vertical(classes="field-input"):
                        yield Input(value=value, placeholder=placeholder, id=field_id)
                        yield Static("", id=f"{field_id}-error", classes="field-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self.submit_label, id="submit", variant="primary")
        yield Footer()

    def value(self, field_id: str) -> str:
        return self.query_one(f"#{field_id}", Input).value.strip()

    def refuse(self, field_id: str, message: str) -> None:
        """Say what is wrong under the field; the first refused field gets the cursor."""
        self.query_one(f"#{field_id}-error", Static).update(Text(printable(message)))
        field = self.query_one(f"#{field_id}", Input)
        if not self.query(".-invalid-field"):
            field.focus()
        field.add_class("-invalid-field")

    def clear_errors(self) -> None:
        for error in self.query(".field-error").results(Static):
            error.update("")
        for field in self.query(Input):
            field.remove_class("-invalid-field")

    def on_input_submitted(self) -> None:
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        self.clear_errors()
        result = self.collect()
        if result is not None:
            self.dismiss(result)

    def collect(self) -> Optional[Result]:
        """The dialog's result, or None after refusing at least one field."""
        raise NotImplementedError

    def card_count(self, field_id: str, total: int) -> Optional[int]:
        raw = self.value(field_id)
        try:
            cards = int(raw)
        except ValueError:
            self.refuse(field_id, f"{raw!r} is not a whole number of cards" if raw else "how many cards?")
            return None
        if cards < 1:
            self.refuse(field_id, f"{cards} cards: at least 1 is needed")
            return None
        if total and cards > total:
            self.refuse(field_id, f"this node has {total} cards; {cards} can never fit")
            return None
        return cards

    def slice_field(self, profiles: str) -> list[Field]:
        """On a node with MIG slices, a field for one slice's profile instead of
        cards; ``profiles`` says which are free now ("1g.18gb x2, 2g.35gb")."""
        if not profiles:
            return []
        return [("slice", "MIG slice", "", f"instead of cards: {profiles}")]

    def slice_and_cards(self, total: int, has_slices: bool) -> tuple[Optional[int], Optional[str]]:
        """(cards, profile): one MIG slice of the profile typed (1, it), or whole
        cards (their count, None); no count after refusing a field."""
        profile = self.value("slice") if has_slices else ""
        if profile:
            if self.value("cards") not in ("", "1"):
                self.refuse("cards", f"a MIG slice ({profile}) is one device: leave cards at 1")
                return None, None
            return 1, profile
        return self.card_count("cards", total), None

    def run_id(self, field_id: str) -> Optional[str]:
        try:
            return check_run_id(self.value(field_id))
        except BadRequest as e:
            self.refuse(field_id, str(e))
            return None
