"""``tpnode-tui usage`` on a shared node: a real agent, real accounts, holds the test made, hours moved on.

The agent runs in the test's loop as root, its clock the test's (moved on by
hours at once: tests/helpers/clocks.py), in a directory every account can
reach; alice, bob and carol (an operator) hold cards and read the report
with the CLI as real processes of their own (tests/helpers/accounts.py), so
the agent knows each of them from the kernel (SO_PEERCRED) and nothing they
send says who they are. The CLI runs in a thread, since the agent answers
from this very loop.

alice reserves two cards and launches a job on a third, bob reserves a
fourth; two hours on bob stops his, and an hour later everyone asks. The
report agrees with those holds to the minute: alice sees her own row and
the node's total, bob his, the operator everyone's; by card and by job the
rows are the cards and the holds the test made.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.accounts import Account, cli_as, shared_dir
from helpers.agents import Agent, running
from helpers.clocks import MovedClock
from helpers.services import write_scene
from helpers.waiting import until_async
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.state.ledger import LEDGER_FILE

HOUR = 3600.0
CARDS = 4
#: the most a hold's held time may differ from the holds the test made: a minute each card
MINUTE = 60.0
#: what ``--json`` prints in every report (each row also says what it counts by)
REPORT_KEYS = {"since", "until", "rows", "total"}
REPORT_FIGURES = {"held_card_hours", "used_card_hours", "idle_card_hours", "jobs", "reservations"}


class SharedAgent(Agent):
    """The tests' agent, in a directory the accounts reach, with their operators' group."""

    def __init__(self, root: Path, operators: str, clock: MovedClock) -> None:
        super().__init__(root, clock)
        write_scene(self.scene, CARDS)
        s = self.settings
        self.settings = replace(s, policy=replace(s.policy, operators_group=operators))

    async def cli(self, who: Account, *args: str, code: int = 0):
        env = who.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(self.socket))
        done = await asyncio.to_thread(cli_as, who, env, *args)
        assert done.returncode == code, (args, done.returncode, done.stderr)
        return done

    async def usage(self, who: Account, since: float, until: float, *args: str) -> dict:
        """``usage --json`` as ``who``, for the span from ``since`` to ``until`` given as
        local times to the second (the agent's clock is hours ahead of the CLI's)."""
        span = ("--since", _local(since), "--until", _local(until))
        return json.loads((await self.cli(who, "usage", *span, *args, "--json")).stdout)

    async def jobs(self) -> dict:
        node = AgentNode(self.socket)
        try:
            snap = (await node.status()).snapshot
        finally:
            await node.close()
        return {j.key: j for j in snap.jobs if j.live}

    def written_after(self, at: float) -> bool:
        conn = sqlite3.connect(f"file:{self.state / LEDGER_FILE}?mode=ro", uri=True)
        try:
            found = conn.execute("SELECT value FROM meta WHERE key = 'last_write'").fetchall()
        except sqlite3.Error:
            return False
        finally:
            conn.close()
        return bool(found) and found[0][0] >= at


def _local(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


@pytest.fixture
async def agent(accounts):
    root = shared_dir("tpn-usage-")
    try:
        async with running(SharedAgent(root, accounts.operators_group, MovedClock())) as started:
            yield started
    finally:
        shutil.rmtree(root, ignore_errors=True)


def by(doc: dict, key: str) -> dict:
    return {row[key]: row for row in doc["rows"]}


def held_s(row: dict) -> float:
    return row["held_card_hours"] * HOUR


def same(one: dict, other: dict) -> bool:
    """Two reports' figures of the same row, asked a moment apart: a hold still open
    is counted up to the node's now, so its hours have grown by those moments."""
    hours = {k for k in one if k.endswith("_hours")}
    grown = all(abs(one[k] - other[k]) * HOUR <= MINUTE for k in hours)
    return (
        set(one) == set(other)
        and grown
        and {k: one[k] for k in set(one) - hours} == {k: other[k] for k in set(other) - hours}
    )


async def test_each_account_sees_its_own_rows_and_the_total_and_an_operator_everyone_s(agent, accounts):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    clock = agent.clock
    since = clock() - MINUTE
    await agent.cli(alice, "reserve", "--cards", "2", "--for", "10h", "--run-id", "a-rsv")
    await agent.cli(alice, "launch", "--cards", "1", "--run-id", "a-job", "--", "sleep", "600")
    await agent.cli(bob, "reserve", "--cards", "1", "--for", "10h", "--run-id", "b-rsv")
    jobs = await until_async(
        lambda: _when(agent.jobs(), lambda j: {"a-rsv", "a-job", "b-rsv"} <= set(j)), "the three holds"
    )
    cards = {run_id: set(jobs[run_id].gpus) for run_id in ("a-rsv", "a-job", "b-rsv")}
    assert len(cards["a-rsv"] | cards["a-job"] | cards["b-rsv"]) == CARDS
    held_from = clock()

    # Two hours on, bob lets his go; an hour after that, everyone asks.
    stop_at = clock.advance(2 * HOUR)
    await until_async(lambda: agent.written_after(stop_at), "a write two hours on")
    await agent.cli(bob, "stop", "b-rsv")
    bob_ended = clock()
    await until_async(lambda: _when(agent.jobs(), lambda j: "b-rsv" not in j), "bob's reservation gone")
    asked = clock.advance(HOUR)
    await until_async(lambda: agent.written_after(asked), "a write an hour later")
    until = clock() + MINUTE
    alice_s, bob_s = 3 * (asked - held_from), bob_ended - held_from  # alice: three cards, the whole time

    # alice: her own row, and the node's total, in the report's shape
    mine = await agent.usage(alice, since, until)
    assert REPORT_KEYS <= set(mine) and mine["everyone"] is False and mine["by"] == "user"
    [row] = mine["rows"]
    assert {"user", "uid", *REPORT_FIGURES} <= set(row) and REPORT_FIGURES <= set(mine["total"])
    assert (row["user"], row["uid"], row["jobs"], row["reservations"]) == (alice.name, alice.uid, 1, 1)
    assert abs(held_s(row) - alice_s) <= 3 * MINUTE
    assert abs(held_s(mine["total"]) - (alice_s + bob_s)) <= 4 * MINUTE
    assert (mine["total"]["jobs"], mine["total"]["reservations"]) == (1, 2)
    assert 0 <= row["used_card_hours"] <= row["held_card_hours"] and row["idle_card_hours"] <= row["held_card_hours"]
    assert abs(mine["since"] - since) < 1 and abs(mine["until"] - until) < 1

    # bob: his own, the same total
    his = await agent.usage(bob, since, until)
    [row] = his["rows"]
    assert (row["user"], row["uid"], row["reservations"], row["jobs"]) == (bob.name, bob.uid, 1, 0)
    assert abs(held_s(row) - bob_s) <= MINUTE and same(his["total"], mine["total"])

    # carol, an operator: everyone's
    everyone = await agent.usage(carol, since, until)
    assert everyone["everyone"] is True and set(by(everyone, "user")) == {alice.name, bob.name}
    assert same(by(everyone, "user")[alice.name], mine["rows"][0]) and same(everyone["total"], mine["total"])

    # by card: alice's three cards, each held the whole time; the operator's, all four
    per_card = by(await agent.usage(alice, since, until, "--by", "card"), "card")
    assert set(per_card) == cards["a-rsv"] | cards["a-job"]
    assert all(abs(held_s(r) - (asked - held_from)) <= MINUTE for r in per_card.values())
    every_card = by(await agent.usage(carol, since, until, "--by", "card"), "card")
    assert set(every_card) == set(range(CARDS))
    [bobs_card] = cards["b-rsv"]
    assert abs(held_s(every_card[bobs_card]) - bob_s) <= MINUTE

    # by job: the holds the test made, with their owners, cards, start and end
    per_job = by(await agent.usage(carol, since, until, "--by", "job"), "run_id")
    assert set(per_job) == {"a-rsv", "a-job", "b-rsv"}
    made = (("a-rsv", alice, "reservation"), ("a-job", alice, "job"), ("b-rsv", bob, "reservation"))
    for run_id, owner, kind in made:
        r = per_job[run_id]
        assert (r["user"], r["uid"], r["kind"], set(r["cards"])) == (owner.name, owner.uid, kind, cards[run_id])
        assert abs(r["start"] - held_from) <= MINUTE
    assert per_job["a-rsv"]["end"] is None and per_job["a-job"]["end"] is None
    assert abs(per_job["b-rsv"]["end"] - bob_ended) <= MINUTE
    assert abs(held_s(per_job["a-rsv"]) - 2 * (asked - held_from)) <= 2 * MINUTE
    assert abs(held_s(per_job["b-rsv"]) - bob_s) <= MINUTE
    assert set(by(await agent.usage(bob, since, until, "--by", "job"), "run_id")) == {"b-rsv"}

    # the text says whose rows these are, and the total
    text = (await agent.cli(bob, "usage", "--since", _local(since), "--until", _local(until))).stdout
    lines = text.splitlines()
    assert lines[1] == "your own rows, and the whole node's total (an operator sees every account's)"
    assert [line.split()[0] for line in lines[3:5]] == [bob.name, "total"] and alice.name not in text


async def test_a_bad_since_through_the_agent_is_one_line_and_exit_2(agent, accounts):
    done = await agent.cli(accounts.alice, "usage", "--since", "last tuesday", code=2)
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "'last tuesday' is neither a date such as 2026-12-01" in done.stderr


async def _when(reading, ready):
    found = await reading
    return found if ready(found) else None
