"""The events pane: the node's log as it is written, newest first, in place of the jobs table while open (e).

The log is followed by tpnode_tui/tui/follow/log.py and worded by
tpnode_tui/tui/wording/events.py; the pane only lays out what they hold.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tpnode_tui.tui.wording.events import events_table
from tpnode_tui.tui.wording.marks import ERROR


class EventsPane(VerticalScroll, can_focus=True):
    """Shown in place of the jobs table while open (e)."""

    def compose(self) -> ComposeResult:
        yield Static(id="events-text")

    def show(self, entries: Iterable[Mapping[str, Any]], problem: Optional[str] = None) -> None:
        """``problem``: why the log is not being followed now."""
        parts: list[Any] = []
        if problem:
            parts.append(
                Text(f"Not following the node's log: {problem}; trying again by itself.", style=f"bold {ERROR}")
            )
        entries = list(entries)
        if entries:
            parts.append(events_table(entries))
        elif not problem:
            parts.append(Text("Nothing in the last hour.", style="grey62"))
        self.query_one("#events-text", Static).update(Group(*parts))
