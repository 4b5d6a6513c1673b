"""The usage view: who used which cards over the last 24 hours and the last 7 days, a bar per account.

Opened from the main screen (a); it asks the node through the port, in a
worker, so the picture behind it goes on being read while the agent reads
its ledger. What the node refuses (a node served in-process keeps no ledger)
or what fails (the agent not answering) is said in the view, in one line.
"""

from __future__ import annotations

from typing import Callable, Optional

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tpnode_tui.port.node import Node
from tpnode_tui.tui.follow.usage import SPANS, UsageRead, read_usage
from tpnode_tui.tui.widgets.usage import UsageChart
from tpnode_tui.tui.wording.usage import legend, problem_text, read_words, whose_words


class UsageScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,a", "close", "Close", id="usage-close", tooltip="Close the usage view"),
        Binding("r", "read", "Read again", id="usage-read", tooltip="Ask the node for its usage again"),
    ]

    def __init__(self, node: Node, clock: Callable[[], float]) -> None:
        super().__init__()
        self.node = node
        self.clock = clock
        #: what the node last said, once it has
        self.read: Optional[UsageRead] = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog usage"):
            yield Static("Who used which cards", classes="dialog-title")
            yield Static(id="usage-whose", classes="dialog-context")
            yield Static(read_words(self.clock(), True), id="usage-status")
            for n, _ in enumerate(SPANS):
                yield UsageChart(id=f"usage-span-{n}")
            yield Static(legend(), id="usage-legend")
        yield Footer()

    def on_mount(self) -> None:
        self.action_read()

    def action_read(self) -> None:
        self.query_one("#usage-status", Static).update(read_words(self.clock(), True))
        self.run_worker(self._read(), group="usage", exclusive=True, exit_on_error=False)

    async def _read(self) -> None:
        self.show(await read_usage(self.node, self.clock()))

    def show(self, read: UsageRead) -> None:
        self.read = read
        status = self.query_one("#usage-status", Static)
        status.update(problem_text(read.problem) if read.problem else read_words(read.at, False))
        reports = dict(read.reports)
        whose = self.query_one("#usage-whose", Static)
        whose.display = bool(reports)  # whose rows they are: once there are rows to show
        if reports:
            whose.update(whose_words(all(r.everyone for r in reports.values())))
        for n, (title, _) in enumerate(SPANS):
            chart = self.query_one(f"#usage-span-{n}", UsageChart)
            chart.show(title, reports.get(title))
            chart.display = title in reports
        self.query_one("#usage-legend", Static).display = bool(reports)

    def action_close(self) -> None:
        self.dismiss(None)
