"""Idle cards given back and the usage ledger, on a shared node: a real agent, real accounts, time moved on.

The agent runs in the test's loop (so its clock is the test's, moved on by
hours and days at once: tests/helpers/clocks.py) as root, in a directory every
account can reach; the accounts (made with useradd, tests/helpers/accounts.py)
reserve, use, extend and read the node with the CLI as real processes of
their own, so the agent knows each one from the kernel. The CLI runs in a
thread, since the agent answers from this very loop.

With TUNEPLANE_RECLAIM_IDLE_AFTER=2h and TUNEPLANE_RECLAIM_GRACE=15m: three
reservations left unused for two hours are warned; bob uses his (a process of
his on its card) and alice extends one of hers in the grace, so both are kept,
and her other is released by the node, as the node, named in her audit and her
events. The usage ledger the agent wrote says how long each was held, to the
minute, and forgets all of it once TUNEPLANE_USAGE_DAYS (90) have passed.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from subprocess import PIPE

import pytest

from helpers.accounts import Account, cli_as, runnable, shared_dir
from helpers.agents import Agent, running
from helpers.clocks import MovedClock
from helpers.services import write_scene
from helpers.waiting import until_async
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import make_lock
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.runtimes.jobprocs import process_stat
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.state.ledger import LEDGER_FILE, UsageLedger
from tpnode_tui.state.usage import usage_report

HOUR = 3600.0
DAY = 86400.0
CARDS = 4
ROOT = Caller(uid=0, gid=0, user="root", operator=True)


class ReclaimingAgent(Agent):
    """The tests' agent, in a directory the accounts reach, giving idle reservations back."""

    def __init__(self, root: Path, operators: str, clock: MovedClock) -> None:
        super().__init__(root, clock)
        write_scene(self.scene, CARDS)
        s = self.settings
        self.settings = replace(
            s,
            policy=replace(s.policy, operators_group=operators),
            usage=replace(s.usage, days=90, reclaim_idle_after_s=2 * HOUR, reclaim_grace_s=15 * 60),
        )

    async def cli(self, who: Account, *args: str) -> str:
        env = who.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(self.socket))
        done = await asyncio.to_thread(cli_as, who, env, *args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    async def reading(self):
        node = AgentNode(self.socket)
        try:
            return (await node.status()).snapshot
        finally:
            await node.close()

    def ledger(self, sql: str) -> list[tuple]:
        conn = sqlite3.connect(f"file:{self.state / LEDGER_FILE}?mode=ro", uri=True)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()


@pytest.fixture
async def agent(accounts):
    root = shared_dir("tpn-idle-")
    try:
        async with running(ReclaimingAgent(root, accounts.operators_group, MovedClock())) as started:
            yield started
    finally:
        shutil.rmtree(root, ignore_errors=True)


def live(snap) -> dict:
    return {j.key: j for j in snap.jobs if j.live}


def card_of(snap, run_id: str) -> int:
    [card] = live(snap)[run_id].gpus
    return card


def reclaims(entries: list[dict]) -> list[tuple[str, str, str, str]]:
    return [(e["target"], e["state"], e["user"], e["owner"]) for e in entries if e.get("action") == "reclaim-idle"]


async def test_idle_reservations_are_warned_then_given_back_unless_used_or_extended(agent, accounts, spawned):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    clock = agent.clock
    asked = clock()
    for who, run_id in ((alice, "a-idle"), (bob, "b-used"), (alice, "a-ext")):
        await agent.cli(who, "reserve", "--cards", "1", "--for", "10h", "--run-id", run_id)
    held_from = clock()
    snap = await until_async(
        lambda: _when(agent.reading(), lambda s: {"a-idle", "b-used", "a-ext"} <= set(live(s))),
        "the three reservations",
    )

    # Two hours with nobody on them: each is warned, its owner named, its release shown.
    clock.advance(2 * HOUR)
    snap = await until_async(lambda: _when(agent.reading(), lambda s: len(s.releases) == 3), "the three warnings")
    releases_at = snap.releases["a-idle"]
    assert releases_at == pytest.approx(clock() + 15 * 60, abs=5)
    status = await agent.cli(alice, "status")
    row = status.splitlines().index(next(line for line in status.splitlines() if line.startswith("a-idle ")))
    assert re.fullmatch(r"  ! releases at \d\d:\d\d unless used", status.splitlines()[row + 1]), status
    assert set(json.loads(await agent.cli(alice, "status", "--json"))["releases"]) == {"a-idle", "b-used", "a-ext"}

    # In the grace: bob uses his (a process of his own on its card), alice extends one of hers.
    bobs_process = bob.spawn(["sleep", "600"], env=bob.env())
    spawned.append(bobs_process)
    cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(CARDS)]
    cards[card_of(snap, "b-used")].update(
        memory_used_mib=2048, processes=[{"pid": bobs_process.pid, "used_memory_mib": 2048}]
    )
    write_scene(agent.scene, cards)
    await agent.cli(alice, "extend", "a-ext", "--for", "1h")
    snap = await until_async(lambda: _when(agent.reading(), lambda s: set(s.releases) == {"a-idle"}), "two kept")

    # The grace out: the one nobody used nor extended is released by the node.
    clock.advance(15 * 60)
    snap = await until_async(lambda: _when(agent.reading(), lambda s: "a-idle" not in live(s)), "the release")
    released_at = clock()
    assert {"b-used", "a-ext"} <= set(live(snap)) and snap.releases == {}

    # alice's audit names what the node did to her reservations, as the node; bob's, his own only.
    alices = json.loads(await agent.cli(alice, "audit", "--json"))["entries"]
    assert reclaims(alices) == [
        ("a-idle", "warned", "node", alice.name),
        ("a-ext", "warned", "node", alice.name),
        ("a-ext", "kept", "node", alice.name),
        ("a-idle", "released", "node", alice.name),
    ]
    released = next(e for e in alices if e.get("state") == "released")
    assert released["owner_uid"] == alice.uid and released["message"].startswith(
        f"the node released {alice.name}'s reservation a-idle (card "
    )
    bobs = json.loads(await agent.cli(bob, "audit", "--json"))["entries"]
    assert reclaims(bobs) == [("b-used", "warned", "node", bob.name), ("b-used", "kept", "node", bob.name)]
    events = await agent.cli(alice, "events", "--json")
    said = [json.loads(line) for line in events.splitlines() if line.strip()]
    assert [e["state"] for e in said if e.get("target") == "a-idle" and e.get("action") == "reclaim-idle"] == [
        "warned",
        "released",
    ]
    everyone = json.loads(await agent.cli(carol, "audit", "--json"))["entries"]
    assert len(reclaims(everyone)) == 6  # an operator sees all

    # The ledger the agent wrote agrees with the holds, to the minute.
    holds = {
        run.decode(): (user.decode(), uid, started, ended)
        for run, user, uid, started, ended in agent.ledger("SELECT run_id, user, uid, started, ended FROM holds")
    }
    assert set(holds) == {"a-idle", "b-used", "a-ext"}
    user_of, uid_of, started, ended = holds["a-idle"]
    assert (user_of, uid_of) == (alice.name, alice.uid)
    assert asked - 1 <= started <= held_from + 1 and ended is not None
    assert abs((ended - started) - (2 * HOUR + 15 * 60)) <= 60  # to the minute
    assert holds["b-used"][3] is None and holds["a-ext"][3] is None  # still held
    report = usage_report(UsageLedger(agent.state, days=90, clock=clock), asked - 60, clock(), "job", ROOT)
    by_job = {r.run_id: r.figures for r in report.rows}
    assert abs(by_job["a-idle"].held_card_hours * HOUR - (released_at - held_from)) <= 60
    assert by_job["a-idle"].held_card_hours >= by_job["a-idle"].idle_card_hours > 0
    assert by_job["b-used"].used_card_hours == 0 and by_job["b-used"].held_card_hours > 2  # held, at 0 %

    # 90 days on, what ended before them is forgotten; 89 days on, it is still there.
    await agent.cli(bob, "stop", "b-used")
    await agent.cli(alice, "stop", "a-ext")
    await until_async(
        lambda: agent.ledger("SELECT COUNT(*) FROM holds WHERE ended IS NULL") == [(0,)], "every hold ended"
    )
    ended_by = clock()
    clock.advance(89 * DAY)
    await until_async(lambda: _written_after(agent, ended_by + 89 * DAY), "a write 89 days on")
    assert agent.ledger("SELECT COUNT(*) FROM holds") == [(3,)]
    clock.advance(2 * DAY)
    await until_async(lambda: agent.ledger("SELECT COUNT(*) FROM holds") == [(0,)], "the holds pruned at 90 days")
    assert agent.ledger("SELECT COUNT(*) FROM samples") == [(0,)]


async def test_a_reservation_with_a_shell_running_is_in_use_and_never_given_back(agent, accounts, spawned):
    """A shell on a reservation (tpnode-tui shell) uses it, whether or not anything
    of it is on the card yet, as Slurm keeps an allocation while its salloc shell
    runs: two hours and the grace pass, its neighbour is warned and released, it is
    neither."""
    alice, clock = accounts.alice, agent.clock
    for run_id in ("s-shell", "s-idle"):
        await agent.cli(alice, "reserve", "--cards", "1", "--for", "10h", "--run-id", run_id)
    env = alice.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(agent.socket))
    spawned.append(alice.spawn(runnable().argv("shell", "s-shell", "--", "sleep", "300"), env=env))
    await until_async(
        lambda: _when(agent.reading(), lambda s: live(s).get("s-shell") and live(s)["s-shell"].shell_processes == 1),
        "the shell to run in the reservation",
    )
    clock.advance(2 * HOUR)
    snap = await until_async(lambda: _when(agent.reading(), lambda s: "s-idle" in s.releases), "the idle one's warning")
    assert "s-shell" not in snap.releases
    clock.advance(16 * 60)
    released = "the idle one's release"
    snap = await until_async(lambda: _when(agent.reading(), lambda s: "s-idle" not in live(s)), released)
    assert "s-shell" in live(snap) and "s-shell" not in snap.releases
    await agent.cli(alice, "stop", "s-shell")


async def test_a_shell_and_the_idle_release_cannot_cross(agent, accounts, spawned):
    """The release re-reads the reservation under the allocation lock, and a shell
    is moved under it too: a shell that got in first keeps its reservation (the
    release skips it, the next poll keeps it); one asked for while the release
    waits comes after it and is refused in words, never moved and then killed."""
    alice, clock = accounts.alice, agent.clock
    for run_id in ("x-first", "x-late"):
        await agent.cli(alice, "reserve", "--cards", "1", "--for", "10h", "--run-id", run_id)
    clock.advance(2 * HOUR)
    await until_async(lambda: _when(agent.reading(), lambda s: len(s.releases) == 2), "the two warnings")
    env = alice.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(agent.socket))
    sleeper = alice.spawn(["sleep", "300"], env=alice.env())
    spawned.append(sleeper)
    lock = make_lock(agent.settings)
    async with lock.hold():
        clock.advance(16 * 60)
        await until_async(
            lambda: _when(agent.reading(), lambda s: (s.lock_state or "").startswith("waiting for the allocation")),
            "the releases to wait for the allocation lock",
        )
        # a shell that had the lock before the release: alice's process moved in, as the agent would
        runtime = ProcessRuntime(agent.state)
        await runtime.shell("x-first", sleeper.pid, alice.uid, _started(sleeper.pid), lambda job: None)
        late = alice.spawn(
            runnable().argv("shell", "x-late", "--", "echo", "ran"), env=env, stdout=PIPE, stderr=PIPE, text=True
        )
        spawned.append(late)
    out, err = await asyncio.to_thread(late.communicate)
    assert late.returncode != 0 and out == "", (late.returncode, out, err)
    assert re.search(r"reservation 'x-late' has ended|no running job or reservation has run id x-late", err), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    await until_async(
        lambda: _kept(agent, alice, "x-first"), "the reservation in a shell's use to be kept by the next poll"
    )
    entries = json.loads(await agent.cli(alice, "audit", "--json"))["entries"]
    assert ("x-late", "released", "node", alice.name) in reclaims(entries)
    assert sleeper.poll() is None
    snap = await agent.reading()
    assert live(snap)["x-first"].shell_processes == 1 and "x-late" not in live(snap)
    await agent.cli(alice, "stop", "x-first")


def _started(pid: int) -> int:
    stat = process_stat(pid)
    assert stat is not None
    return stat.ticks


async def _kept(agent: ReclaimingAgent, who: Account, run_id: str) -> bool:
    entries = json.loads(await agent.cli(who, "audit", "--json"))["entries"]
    return (run_id, "kept", "node", who.name) in reclaims(entries)


async def _when(reading, ready):
    """The snapshot, once ``ready`` says it shows what the test waits for."""
    snap = await reading
    return snap if snap is not None and ready(snap) else None


def _written_after(agent: ReclaimingAgent, at: float) -> bool:
    found = agent.ledger("SELECT value FROM meta WHERE key = 'last_write'")
    return bool(found) and found[0][0] >= at
