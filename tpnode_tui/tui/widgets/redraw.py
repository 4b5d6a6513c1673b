"""Redraw only what changed.

Every poll sets the header, the summary, the detail pane and every tile,
mostly to what they already show. Textual repaints a widget whenever it is
told to, and ``Static.update`` also lays the whole screen out again, so an
idle dashboard spent several per cent of a core once a second repainting the
same picture (bench/run.py measures it). Comparing first costs far less.
"""

from __future__ import annotations

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Static


def same(old: object, new: object) -> bool:
    """Whether two contents draw the same. Rich's ``Text ==`` compares the
    characters and their spans but not the base style, so that is compared too."""
    if isinstance(old, Text) and isinstance(new, Text):
        return old == new and old.style == new.style
    return type(old) is type(new) and old == new


def update(widget: Static, content: VisualType) -> None:
    """``widget.update(content)``, unless it already shows exactly that."""
    if not same(widget.content, content):
        widget.update(content)
