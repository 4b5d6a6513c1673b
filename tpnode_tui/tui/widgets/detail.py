"""The detail pane: the selected card in full sentences, and its last hour under them.

Focusable (enter from the grid) so a long holder list can be scrolled; what it
says is worded in tpnode_tui/tui/wording/card.py.
"""

from __future__ import annotations

from typing import Any, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from tpnode_tui.text.render import format_mib
from tpnode_tui.tui.follow.history import Recent
from tpnode_tui.tui.widgets.sparks import FixedSparkline
from tpnode_tui.tui.wording.sparks import window_words


class DetailPane(VerticalScroll, can_focus=True):
    """Focusable (enter from the grid) so a long holder list can be scrolled.
    With ``history``, the card's utilisation and memory over the last hour
    stay in view under the text, however far it is scrolled."""

    def __init__(self, *, history: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history = history

    def compose(self) -> ComposeResult:
        yield Static(id="detail-text")
        if self.history:
            with Vertical(id="detail-history"):
                for field, label in (("utilization_pct", "util"), ("memory_used_mib", "memory")):
                    with Horizontal(classes="spark-row"):
                        yield Static(Text(f"  {label}"), classes="spark-label")
                        yield FixedSparkline(id=f"spark-{field}")
                        yield Static("", id=f"spark-{field}-caption", classes="spark-caption")

    def show(self, text: Text) -> None:
        self.query_one("#detail-text", Static).update(text)

    def show_history(self, recent: Optional[Recent], memory_total_mib: Optional[int]) -> None:
        """Utilisation against 0-100 %, memory against the card's total: a
        scale that moved with the data would make an idle card look busy."""
        if not self.history:
            return
        known = recent is not None and not recent.empty
        when = window_words(recent.span) if recent is not None and known else "no readings yet"
        util = self.query_one("#spark-utilization_pct", FixedSparkline)
        util.plot(recent.utilization_pct if recent is not None else (), 100.0)
        self.query_one("#spark-utilization_pct-caption", Static).update(Text(f"0-100 % · {when}"))
        memory = self.query_one("#spark-memory_used_mib", FixedSparkline)
        if memory_total_mib:
            memory.plot(recent.memory_used_mib if recent is not None else (), float(memory_total_mib))
            caption = f"of {format_mib(memory_total_mib)} · {when}"
        else:  # no total to scale to: drawing against the data's own range would mislead
            memory.plot((), 1.0)
            caption = "total not known"
        self.query_one("#spark-memory_used_mib-caption", Static).update(Text(caption))
