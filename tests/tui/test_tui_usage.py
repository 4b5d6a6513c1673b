"""The usage view (a) over real nodes: the agent's ledger drawn as bars, an in-process node's refusal, a failure.

Through a test agent in this loop (its ledger written from its readings, as
on a node), the dashboard's view shows the account's bar and the node's
total for the last 24 hours and 7 days; served in-process, it says in the
node's words that the agent records usage; an agent that stops answering is
said in one line, and r reads again. The picture itself, with a fixed
report, is pinned in tests/tui/test_tui_snapshots.py (TestUsage).
"""

from __future__ import annotations

import asyncio

from helpers.dashboard import SIZE, Dashboard, polled
from helpers.waiting import until_async, until_pilot
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.state.ledger import LEDGER_FILE
from tpnode_tui.tui.screens.dialogs.usage import UsageScreen
from tpnode_tui.tui.widgets.usage import UsageChart

WAIT_S = 15.0


async def opened(pilot, app: Dashboard) -> UsageScreen:
    """The usage view, once the node has answered it."""
    await pilot.press("a")
    assert isinstance(app.screen, UsageScreen)
    screen = app.screen
    await until_pilot(pilot, lambda: screen.read is not None, "the node's usage")
    await pilot.pause()
    return screen


def said(screen: UsageScreen, id_: str) -> str:
    return str(screen.query_one(f"#{id_}").render())


def chart_lines(screen: UsageScreen, n: int) -> list[str]:
    chart = screen.query_one(f"#usage-span-{n}", UsageChart)
    return [line.plain.rstrip() for line in chart.render().renderables]


async def test_through_the_agent_the_view_draws_the_ledger_s_holds_as_bars(agent, client):
    await client.reserve(ReserveRequest(cards=2, duration_s=3600, run_id="rsv-bars"))
    ledger = agent.state / LEDGER_FILE
    await until_async(lambda: ledger.exists(), "the ledger")
    await asyncio.sleep(1.0)  # a second of it held
    app = Dashboard(client)
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        screen = await opened(pilot, app)
        assert screen.read.problem is None and [t for t, _ in screen.read.reports] == ["Last 24 hours", "Last 7 days"]
        for _, report in screen.read.reports:
            [row] = report.rows
            assert (row.user, row.uid, row.figures.reservations) == ("root", 0, 1) and report.everyone
            assert row.figures.held_card_hours > 0 and report.total == row.figures
        assert said(screen, "usage-whose").startswith("Every account's, as the node's agent recorded them")
        for n, title in enumerate(("Last 24 hours", "Last 7 days")):
            heading, head, root, total = chart_lines(screen, n)
            assert heading.startswith(title) and head.split() == ["held", "used", "idle", "jobs", "resv."]
            assert root.split()[0] == "root" and total.split()[0] == "total"
            assert "▒" in root or "█" in root or "░" in root, root  # drawn, not only numbers
            assert root.split()[-2:] == ["0", "1"] and total.split()[-2:] == ["0", "1"]
        assert said(screen, "usage-status").startswith("As of ")
        await pilot.press("escape")
        assert not isinstance(app.screen, UsageScreen)


async def test_served_in_process_the_view_says_the_node_s_agent_records_usage(make_node):
    node = make_node(dashboard=True)
    app = node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        screen = await opened(pilot, app)
        text = said(screen, "usage-status")
        assert text.startswith("Usage could not be read: usage is recorded by the node's agent: this node is served")
        assert not screen.query_one("#usage-span-0").display and not screen.query_one("#usage-legend").display
        await pilot.press("r")  # asked again, the same answer, and nothing else happens
        await until_pilot(pilot, lambda: said(screen, "usage-status").startswith("Usage could not be read"), "again")
        assert app.is_running and isinstance(app.screen, UsageScreen)


async def test_when_the_agent_stops_answering_the_view_says_so_in_one_line(agent, client):
    app = Dashboard(client)
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        agent.stop.set()
        await asyncio.wait_for(agent.task, WAIT_S)
        screen = await opened(pilot, app)
        text = said(screen, "usage-status")
        assert text.startswith("Usage could not be read: ") and f"no agent answers at {agent.socket}" in text
        assert "Traceback" not in text and "\n" not in screen.read.problem


async def test_on_80_columns_each_bar_is_cut_to_the_view_never_wrapped(agent, client):
    await client.reserve(ReserveRequest(cards=1, duration_s=3600, run_id="rsv-narrow"))
    await until_async(lambda: (agent.state / LEDGER_FILE).exists(), "the ledger")
    app = Dashboard(client)
    async with app.run_test(size=(80, 24)) as pilot:
        await polled(pilot, app)
        screen = await opened(pilot, app)
        chart = screen.query_one("#usage-span-0", UsageChart)
        lines = chart_lines(screen, 0)
        assert len(lines) == 4 and chart.size.height == 4
        assert all(len(line) <= chart.content_region.width for line in lines)
        assert lines[2].split()[0] == "root" and lines[2].split()[-1] == "1"  # the figures are on its line
