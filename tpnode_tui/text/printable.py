"""Untrusted text made safe to put on a terminal, at the one place it crosses over.

Almost every string this product shows was written by somebody else, and a
control sequence in one, printed raw, is obeyed by the operator's terminal;
a lone surrogate cannot even be encoded. So such text is escaped where it
crosses to a person, never where it enters: every character Python does not
call printable is shown as its escape. Escaping is idempotent. See
docs/architecture.md, section 'Other people's words on the operator's
screen'.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

#: how much of someone else's text an error or a log line quotes
SHOWN_CHARS = 60


def printable(text: str) -> str:
    """``text`` on one line with every non-printable character escaped (a newline too)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def shown(text: str, most: int = SHOWN_CHARS) -> str:
    """``text`` as an error or a log line quotes it: cut to ``most`` characters
    and made printable, in quotes."""
    cut = text if len(text) <= most else text[: most - 3] + "..."
    return f"'{printable(cut)}'"


def printable_lines(text: str) -> str:
    """``text`` escaped as :func:`printable`, except that its line breaks stay
    line breaks: for output this program laid out itself in several lines."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape(ch: str) -> str:
    code = ord(ch)
    if code == 0x0A:
        return "\\n"
    if code == 0x09:
        return "\\t"
    if code == 0x0D:
        return "\\r"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable_view(value: T) -> T:
    """A copy of ``value`` with every string in it made :func:`printable`.

    Walks frozen dataclasses (snapshots, cards, jobs, holders), tuples, lists,
    sets and dicts (keys too), so a reading is made safe as a whole when it
    reaches the screen, and no field added later can be forgotten. Anything
    else (numbers, None) is returned as it is.
    """
    return _view(value)  # type: ignore[no-any-return]


def _view(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _view(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, tuple):
        items = tuple(_view(v) for v in value)
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, list):
        return [_view(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return type(value)(_view(v) for v in value)
    if isinstance(value, dict):
        return {_view(k): _view(v) for k, v in value.items()}
    return value


class PrintableStream(io.TextIOBase):
    """A text stream that writes :func:`printable_lines` of whatever it is given.

    The CLI prints through it, so no message, table or log line can carry a
    raw control sequence to the terminal, whichever code path wrote it; the
    line breaks the program wrote itself stay line breaks.
    """

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self._raw = raw

    def write(self, text: str) -> int:
        self._raw.write(printable_lines(text))
        return len(text)

    def flush(self) -> None:
        self._raw.flush()

    def isatty(self) -> bool:
        return self._raw.isatty()

    def fileno(self) -> int:
        return self._raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._raw, "encoding", "utf-8")
