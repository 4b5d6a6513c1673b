"""The usage ledger as the agent keeps it: written from its readings, the minute under way written as it stops.

The agent runs in the test's own event loop (helpers/agents.py) over a
simulated node and the process runtime; the ledger's file is read with
SQLite directly, as the report reads it, and through the door (``usage``).
A node served in-process keeps none, and says so when asked.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace

import pytest

from helpers.agents import Agent, running
from helpers.clocks import MovedClock
from helpers.waiting import until_async
from tpnode_tui.model.errors import RuntimeUnavailable, exit_code
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.state.ledger import LEDGER_FILE


def rows(path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_the_agent_writes_each_reading_and_the_minute_under_way_when_it_stops(tmp_path):
    clock = MovedClock()
    clock.advance(61 - time.time() % 60)  # the agent's time: a second into a minute, which will not turn
    agent = Agent(tmp_path, clock)
    ledger = agent.state / LEDGER_FILE
    async with running(agent):
        node = AgentNode(agent.socket)
        try:
            await node.reserve(ReserveRequest(cards=2, duration_s=3600, run_id="rsv-1"))
        finally:
            await node.close()
        # a hold is written as soon as a reading shows it; its minutes when each is over
        await until_async(lambda: ledger.exists() and rows(ledger, "SELECT COUNT(*) FROM holds") == [(1,)], "the hold")
        await asyncio.sleep(1.5)  # readings of its cards, inside the minute
        assert rows(ledger, "SELECT COUNT(*) FROM samples") == [(0,)]
        assert clock() % 60 < 30, "the minute has not turned"
    [(run_id, user, cards, started, last_seen, ended)] = rows(
        ledger, "SELECT run_id, user, cards, started, last_seen, ended FROM holds"
    )
    assert (run_id, user, cards, ended) == (b"rsv-1", b"root", "0,1", None)  # the reservation outlives the agent
    # stopped, the agent wrote the minute under way: what a kill -9 would have lost
    seconds = dict(rows(ledger, "SELECT card, SUM(seconds) FROM samples GROUP BY card"))
    assert set(seconds) == {0, 1}
    assert all(1.0 <= held <= last_seen - started for held in seconds.values()), (seconds, last_seen - started)
    assert ledger.stat().st_mode & 0o777 == 0o600


async def test_a_node_served_in_process_keeps_no_ledger(make_node):
    node = make_node(assembled=True)
    assert node.service.ledger is None
    await node.local.reserve(ReserveRequest(cards=1, duration_s=600, run_id="mine"))
    for _ in range(3):
        await node.service.read_now()
    assert not (node.state / LEDGER_FILE).exists()


async def test_the_agent_answers_usage_from_its_ledger_a_page_of_rows_at_most(tmp_path):
    """Through the door, as every client asks: the latest jobs within the node's
    page (TUNEPLANE_MAX_PAGE, 2 here), the total counting the one left out."""
    clock = MovedClock()
    agent = Agent(tmp_path, clock)
    agent.settings = replace(agent.settings, limits=replace(agent.settings.limits, page=2))
    async with running(agent):
        node = AgentNode(agent.socket)
        try:
            asked = clock()
            for n in range(3):
                await node.reserve(ReserveRequest(cards=1, duration_s=3600, run_id=f"rsv-{n}"))
                await until_async(
                    lambda n=n: (
                        rows(agent.state / LEDGER_FILE, "SELECT COUNT(*) FROM holds") == [(n + 1,)]
                        if (agent.state / LEDGER_FILE).exists()
                        else False
                    ),
                    f"hold {n}",
                )
            later = clock.advance(1800)  # half an hour held, each
            await until_async(lambda: _written_after(agent, later), "a write half an hour on")
            report = await node.usage(asked - 60, clock() + 60, "job")
            accounts = await node.usage(asked - 60, clock() + 60)
        finally:
            await node.close()
    assert [r.run_id for r in report.rows] == ["rsv-1", "rsv-2"] and report.left_out == 1
    assert report.everyone and report.total.reservations == 3
    assert report.total.held_card_hours == pytest.approx(3 * 0.5, abs=3 * 60 / 3600)
    [root] = accounts.rows
    assert (root.user, root.uid, accounts.by, accounts.left_out) == ("root", 0, "user", 0)
    assert root.figures == accounts.total


async def test_a_node_served_in_process_refuses_usage_saying_who_records_it(make_node):
    node = make_node(assembled=True)
    with pytest.raises(RuntimeUnavailable) as refused:
        await node.local.usage(time.time() - 3600, time.time())
    assert str(refused.value).startswith("usage is recorded by the node's agent: this node is served in this process")
    assert exit_code(refused.value) == 1


def _written_after(agent: Agent, at: float) -> bool:
    found = rows(agent.state / LEDGER_FILE, "SELECT value FROM meta WHERE key = 'last_write'")
    return bool(found) and found[0][0] >= at
