"""One span's usage as bars, drawn to the width the view gives it.

The bars are worded by tpnode_tui/tui/wording/usage.py; this widget only
keeps the report it was given and draws it again when its width changes, so
a bar always fills the room there is.
"""

from __future__ import annotations

from typing import Optional

from rich.console import Group, RenderableType
from textual.widget import Widget

from tpnode_tui.model.usage import UsageReport
from tpnode_tui.tui.wording.usage import span_lines


class UsageChart(Widget):
    """A span's heading, a bar per account and the node's total (nothing until shown)."""

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.title = ""
        self.report: Optional[UsageReport] = None

    def show(self, title: str, report: Optional[UsageReport]) -> None:
        self.title, self.report = title, report
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        if self.report is None:
            return ""
        return Group(*span_lines(self.title, self.report, self.content_region.width))
