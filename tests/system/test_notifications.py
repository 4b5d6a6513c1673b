"""Notices, on a shared node: a real root agent, real accounts, real receivers and terminals.

The agent runs in the test's loop as root (its clock is the test's, moved on
by hours at once: tests/helpers/clocks.py), in a directory every account can
reach; the accounts (useradd, tests/helpers/accounts.py) reserve, launch,
drain and add their URLs with the CLI as real processes of their own, so the
agent knows each from the kernel. Each URL is Apprise's ``json://`` to an
aiohttp receiver in this test, which keeps what it is posted; a terminal is a
real pseudo-terminal (os.openpty) given to the account as a login gives it,
and read back from its other end. The CLI runs in a thread, since the agent
answers from this very loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

from helpers.accounts import Account, cli_as, runnable, shared_dir
from helpers.agents import Agent, running
from helpers.clocks import MovedClock
from helpers.receivers import Receiver
from helpers.services import write_scene
from helpers.waiting import until_async

HOUR = 3600.0
CARDS = 4
#: a generous bound on a CLI's answer while a URL hangs: far below the hang itself
PROMPT_S = 60.0


class NotifyingAgent(Agent):
    """The tests' agent, in a directory the accounts reach, telling each account what concerns it."""

    def __init__(self, root: Path, operators: str, clock: MovedClock, **notify) -> None:
        super().__init__(root, clock)
        write_scene(self.scene, CARDS)
        s = self.settings
        self.settings = replace(
            s,
            policy=replace(s.policy, operators_group=operators),
            usage=replace(s.usage, reclaim_idle_after_s=2 * HOUR, reclaim_grace_s=15 * 60),
            notify=replace(s.notify, **notify),
        )

    async def cli(self, who: Account, *args: str, ok: bool = True):
        env = who.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(self.socket))
        done = await asyncio.to_thread(cli_as, who, env, *args)
        if ok:
            assert done.returncode == 0, (args, done.stderr)
        return done

    def put(self, card: int, *pids: int) -> None:
        """The driver says these processes are on ``card`` (nothing anywhere else)."""
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(CARDS)]
        if pids:
            cards[card].update(memory_used_mib=2048, processes=[{"pid": p, "used_memory_mib": 2048} for p in pids])
        write_scene(self.scene, cards)


@contextlib.asynccontextmanager
async def agent_in(accounts, **notify):
    """The agent, with ``notify``'s settings, in a fresh directory every account reaches."""
    root = shared_dir("tpn-notify-")
    try:
        async with running(NotifyingAgent(root, accounts.operators_group, MovedClock(), **notify)) as agent:
            yield agent
    finally:
        shutil.rmtree(root, ignore_errors=True)


def titles(notices: list[dict]) -> list[str]:
    return [n["title"] for n in notices]


async def notice(receiver: Receiver, who: str, title: str) -> dict:
    """The first notice ``who`` got whose title starts with ``title``, once it came."""
    return await until_async(
        lambda: next((n for n in receiver.to(who) if n["title"].startswith(title)), None),
        f"{who}'s notice {title!r}",
        show=lambda: titles(receiver.to(who)),
    )


async def live(agent: NotifyingAgent, who: Account) -> dict:
    jobs = json.loads((await agent.cli(who, "status", "--json")).stdout)["jobs"]
    return {j["run_id"]: j for j in jobs if j["status"] in ("running", "created")}


async def test_a_reservation_ending_and_an_idle_one_warned_and_released_are_told_to_its_owner(accounts, receiver):
    alice = accounts.alice
    async with agent_in(accounts) as agent:
        await agent.cli(alice, "notify", "add", receiver.url(alice.name))
        await agent.cli(alice, "reserve", "--cards", "1", "--for", "2h", "--run-id", "r-end")
        await agent.cli(alice, "reserve", "--cards", "1", "--for", "10h", "--run-id", "r-idle")
        await until_async(lambda: _has(agent, alice, {"r-end", "r-idle"}), "both reservations")

        agent.clock.advance(2 * HOUR - 5 * 60)  # r-end ends in 5 minutes, its owner's warning is 10
        ending = await notice(receiver, alice.name, "reservation r-end ends soon")
        assert ending["type"] == "warning"
        assert "tpnode-tui extend r-end --for 1h" in ending["message"] and "ends at" in ending["message"]

        agent.clock.advance(5 * 60 + 1)  # two hours unused: warned, then released a grace later
        warned = await notice(receiver, alice.name, "idle reservation r-idle is to be released")
        assert "tpnode-tui extend r-idle" in warned["message"]
        agent.clock.advance(15 * 60)
        released = await notice(receiver, alice.name, "idle reservation r-idle was released")
        assert "the node released" in released["message"] and alice.name in released["message"]
        assert len([t for t in titles(receiver.to(alice.name)) if t.startswith("reservation r-end ends")]) == 1


async def _has(agent: NotifyingAgent, who: Account, run_ids: set[str]) -> bool:
    return run_ids <= set(await live(agent, who))


async def test_a_queued_launch_placed_and_a_job_ended_are_told_to_whoever_they_are_for(accounts, receiver):
    alice, bob = accounts.alice, accounts.bob
    async with agent_in(accounts) as agent:
        await agent.cli(alice, "notify", "add", receiver.url(alice.name))
        await agent.cli(bob, "notify", "add", receiver.url(bob.name))
        await agent.cli(bob, "reserve", "--cards", str(CARDS), "--for", "1h", "--run-id", "b-all")
        queued = await agent.cli(alice, "launch", "--cards", "1", "--queue", "--run-id", "a-q", "--", "sleep", "600")
        assert "queued a-q" in queued.stdout
        await agent.cli(bob, "stop", "b-all")
        placed = await notice(receiver, alice.name, "queued launch a-q placed on card")
        [card] = (await live(agent, alice))["a-q"]["gpus"]
        assert placed["title"] == f"queued launch a-q placed on card {card}"
        assert f"a-q of {alice.name} got card {card}" in placed["message"]

        await agent.cli(alice, "launch", "--cards", "1", "--run-id", "a-exit", "--", "sh", "-c", "sleep 2; exit 3")
        ended = await notice(receiver, alice.name, "job a-exit ended")
        words = ended["message"]
        assert "(exit 3)" in words and " after " in words, words
        assert f"its output: {agent.state / 'logs' / 'a-exit.log'}" in words
        # bob ended his own reservation: it is his, and he is told of it, not of alice's jobs
        await notice(receiver, bob.name, "reservation b-all ended")
        assert titles(receiver.to(bob.name)) == ["reservation b-all ended"]


async def test_a_card_drained_and_returned_and_an_intruder_are_told_to_the_holder_the_intruder_and_operators(
    accounts, receiver, spawned
):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    async with agent_in(accounts) as agent:
        await agent.cli(alice, "notify", "add", receiver.url(alice.name))
        await agent.cli(bob, "notify", "add", receiver.url(bob.name))
        await agent.cli(carol, "notify", "add", "--node", receiver.url(carol.name))
        await agent.cli(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "a-rsv")
        [card] = (await until_async(lambda: _live_once(agent, alice, "a-rsv"), "alice's reservation"))["gpus"]

        await agent.cli(carol, "drain", str(card), "--reason", "fan failing")
        drained = await notice(receiver, alice.name, f"card {card} drained")
        assert "fan failing" in drained["message"] and drained["type"] == "failure"
        assert (await notice(receiver, carol.name, f"card {card} drained"))["message"] == drained["message"]
        await agent.cli(carol, "undrain", str(card))
        back = await notice(receiver, alice.name, f"card {card} back in service")
        assert back["type"] == "success"
        await notice(receiver, carol.name, f"card {card} back in service")

        squatter = bob.spawn(["sleep", "600"], env=bob.env())
        spawned.append(squatter)
        agent.put(card, squatter.pid)
        to_bob = await notice(receiver, bob.name, f"an intruder on card {card}")
        assert f"pid {squatter.pid}" in to_bob["message"] and "That card is not yours" in to_bob["message"]
        to_alice = await notice(receiver, alice.name, f"an intruder on card {card}")
        assert "That card is not yours" not in to_alice["message"]
        assert f"tpnode-tui evict {card} --pid {squatter.pid}" in to_alice["message"]
        await notice(receiver, carol.name, f"an intruder on card {card}")
        # bob holds nothing, so no drain was his to hear of
        assert not any("drained" in t for t in titles(receiver.to(bob.name)))


async def test_an_xid_a_health_problem_and_a_failed_check_reach_an_operators_node_url_and_no_one_else(
    accounts, receiver, spawned
):
    """The node's events, as the agent watches and checks real cards: an operator's URL for the
    node's events hears each, with its card, its title and what to do; an account that is no
    operator hears none of them at its own URL, and may not add one for the node's events."""
    bob, carol = accounts.bob, accounts.carol
    async with agent_in(accounts) as agent:
        await agent.cli(carol, "notify", "add", "--node", receiver.url(carol.name))
        await agent.cli(bob, "notify", "add", receiver.url(bob.name))
        refused = await agent.cli(bob, "notify", "add", "--node", receiver.url("bob-node"), ok=False)
        assert refused.returncode != 0 and "may not add a URL for the node's events" in refused.stderr

        squatter = bob.spawn(["sleep", "600"], env=bob.env())
        spawned.append(squatter)
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(CARDS)]
        cards[1]["xid_events"] = [{"id": "dbe", "xid": 48}]
        cards[2]["health"] = {"row_remap_pending": True}
        cards[3].update(memory_used_mib=2048, processes=[{"pid": squatter.pid, "used_memory_mib": 2048}])
        write_scene(agent.scene, cards)

        # an XID that drains its card is one change, one entry: told as the drain, which names the XID
        drained = await notice(receiver, carol.name, "card 1 drained")
        assert drained["message"].startswith("card 1 drained: XID 48") and drained["type"] == "failure", drained
        health = await notice(receiver, carol.name, "card 2 reports a problem")
        assert "row remapping pending" in health["message"] and health["type"] == "failure", health

        checked = await agent.cli(carol, "check", "3", ok=False)
        assert checked.returncode == 1, checked.stderr
        failed = await notice(receiver, carol.name, "card 3 failed its check")
        assert failed["type"] == "failure" and f"processes on it: pid {squatter.pid}" in failed["message"], failed
        await notice(receiver, carol.name, "card 3 drained")
        # each told once, and an ordinary account's own URL none of them, nor its would-be node URL
        for title in ("card 1 drained", "card 2 reports a problem", "card 3 failed its check"):
            assert titles(receiver.to(carol.name)).count(title) == 1, titles(receiver.to(carol.name))
        assert receiver.to(bob.name) == [] and receiver.to("bob-node") == []


async def _live_once(agent: NotifyingAgent, who: Account, run_id: str):
    return (await live(agent, who)).get(run_id)


def a_terminal(account: Account, messages: bool) -> tuple[int, int, str]:
    """A pseudo-terminal given to ``account`` as a login gives one (its owner, mode 0620
    with messages allowed, 0600 after ``mesg n``), kept open as a login keeps it: its
    other end, to read, the terminal itself, and its path."""
    controller, terminal = os.openpty()
    path = os.ttyname(terminal)
    os.chown(path, account.uid, -1)
    os.chmod(path, 0o620 if messages else 0o600)
    os.set_blocking(controller, False)
    return controller, terminal, path


def read_all(controller: int) -> bytes:
    try:
        return os.read(controller, 65536)
    except BlockingIOError:
        return b""


async def test_the_accounts_own_terminals_are_told_where_it_allows_messages(accounts, receiver):
    alice, bob = accounts.alice, accounts.bob
    alices, alices_own, _path = a_terminal(alice, messages=True)
    bobs, bobs_own, bobs_path = a_terminal(bob, messages=False)  # mesg n
    try:
        assert stat.S_IMODE(os.stat(bobs_path).st_mode) & stat.S_IWGRP == 0
        async with agent_in(accounts) as agent:
            await agent.cli(bob, "notify", "add", receiver.url(bob.name))
            for who in (alice, bob):
                await agent.cli(who, "launch", "--cards", "1", "--run-id", f"{who.name}-j", "--", "sleep", "2")
            said = await until_async(lambda: read_all(alices), "alice's terminal to be told")
            while b"ended" not in said:
                said += await until_async(lambda: read_all(alices), "the rest of the line")
            text = said.decode()
            assert "Message from tpnode-tui" in text and f"job {alice.name}-j ended" in text, text
            assert "\x1b" not in text
            # bob's notice was sent (his URL got it, after his terminals were tried), and his terminal was not written
            await notice(receiver, bob.name, f"job {bob.name}-j ended")
            assert read_all(bobs) == b""
    finally:
        for fd in (alices, alices_own, bobs, bobs_own):
            os.close(fd)


async def test_a_url_that_never_answers_holds_up_no_other_account_nor_the_node(accounts, receiver, caplog):
    alice, bob = accounts.alice, accounts.bob
    hanging = Receiver(answers=False)
    await hanging.start()
    caplog.set_level(logging.INFO, logger="tpnode_tui.notify.post")
    try:
        async with agent_in(accounts, timeout_s=20.0) as agent:
            # Apprise's own time-outs lengthened past the agent's, so only the agent's deadline ends it
            await agent.cli(alice, "notify", "add", hanging.url(alice.name, "s3cret") + "?cto=900&rto=900")
            await agent.cli(bob, "notify", "add", receiver.url(bob.name))
            await agent.cli(alice, "launch", "--cards", "1", "--run-id", "a-1", "--", "sleep", "1")
            await until_async(lambda: hanging.to(alice.name), "alice's URL to be sent to, and hang")

            reserve = agent.cli(bob, "reserve", "--cards", "1", "--for", "1h", "--run-id", "b-r")
            await asyncio.wait_for(reserve, PROMPT_S)
            await asyncio.wait_for(agent.cli(bob, "status"), PROMPT_S)
            await asyncio.wait_for(agent.cli(bob, "stop", "b-r"), PROMPT_S)
            await notice(receiver, bob.name, "reservation b-r ended")  # bob's own lane went on

            listed = await until_async(
                lambda: _failing(agent, alice), "alice's URL to be said to fail", timeout=PROMPT_S * 2
            )
            assert "no answer within 20 s" in listed["failing"] and "s3cret" not in json.dumps(listed)
            said = [r.getMessage() for r in caplog.records if "fail" in r.getMessage()]
            assert len(said) == 1 and "s3cret" not in said[0] and f"{alice.name}'s json URL fail" in said[0], said
    finally:
        await hanging.close()


async def _failing(agent: NotifyingAgent, who: Account):
    urls = json.loads((await agent.cli(who, "notify", "list", "--json")).stdout)["urls"]
    return urls[0] if urls and urls[0]["failing"] else None


async def test_urls_are_each_accounts_own_shown_with_secrets_masked_and_bounded(accounts, receiver):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    secret = "pa55w0rd-x9"
    async with agent_in(accounts, urls=2) as agent:
        added = await agent.cli(alice, "notify", "add", receiver.url(alice.name, secret))
        assert secret not in added.stdout and "****" in added.stdout
        wrong = await agent.cli(alice, "notify", "add", "nosuchservice://" + secret, ok=False)
        assert wrong.returncode == 2 and "Apprise cannot send to that URL" in wrong.stderr
        assert secret not in wrong.stderr
        await agent.cli(alice, "notify", "add", receiver.url("second"))
        over = await agent.cli(alice, "notify", "add", receiver.url("third"), ok=False)
        assert over.returncode == 2 and "TUNEPLANE_NOTIFY_MAX_URLS=2" in over.stderr, over.stderr
        node = await agent.cli(bob, "notify", "add", "--node", receiver.url(bob.name), ok=False)
        assert node.returncode == 77 and "only an operator" in node.stderr

        # bob sees none of alice's; alice removes one of hers
        assert json.loads((await agent.cli(bob, "notify", "list", "--json")).stdout)["urls"] == []
        left = json.loads((await agent.cli(alice, "notify", "remove", "2", "--json")).stdout)["urls"]
        assert [u["number"] for u in left] == [1] and "****" in left[0]["shown"]
        gone = await agent.cli(alice, "notify", "remove", "5", ok=False)
        assert gone.returncode == 2 and "no notification URL 5" in gone.stderr

        # the secret is in the root-only file, and nowhere anyone reads
        kept = agent.state / "notify.json"
        assert secret in kept.read_text() and stat.S_IMODE(kept.stat().st_mode) == 0o600
        for who, args in ((alice, ("audit", "--json")), (carol, ("audit", "--json")), (carol, ("events", "--json"))):
            assert secret not in (await agent.cli(who, *args)).stdout
        assert secret not in (await agent.cli(alice, "status", "--json")).stdout
        for log in agent.state.rglob("*.jsonl"):
            assert secret not in log.read_text()
        audit = json.loads((await agent.cli(alice, "audit", "--json")).stdout)["entries"]
        assert any(e["action"] == "notify-add" and "a json URL" in e["message"] for e in audit)


async def test_a_url_removed_leaves_nothing_behind_and_added_again_is_not_said_to_fail(accounts):
    """What the post knows of a URL that fails goes with the URL: an account that adds
    and removes failing URLs makes nothing grow, and one added again starts afresh."""
    alice = accounts.alice
    refused = "json://127.0.0.1:9/nobody-listens"  # the discard port: nothing answers there
    async with agent_in(accounts) as agent:
        await agent.cli(alice, "notify", "add", refused)
        await agent.cli(alice, "launch", "--cards", "1", "--run-id", "a-f", "--", "true")
        await until_async(lambda: _failing(agent, alice), "alice's URL to be said to fail")
        await agent.cli(alice, "notify", "remove", "1")
        again = json.loads((await agent.cli(alice, "notify", "add", refused, "--json")).stdout)["urls"]
        assert [u["failing"] for u in again] == [None], again


#: bob's watcher: the command line of every process on the node that runs the
#: product's notify, as any account may read it (``ps``), until its standard input closes
WATCHER = """
import os, select, sys
seen = set()
while not select.select([sys.stdin], [], [], 0)[0]:
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                line = f.read().replace(b"\\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tpnode_tui notify" in line and line not in seen:
            seen.add(line)
            print(line, flush=True)
"""


async def test_a_url_given_on_standard_input_is_on_no_command_line_another_account_reads(accounts, receiver):
    """Every account may read every process's command line: a URL's password there
    is anyone's while the command runs, so it is given on standard input instead."""
    alice, bob = accounts.alice, accounts.bob
    secret = "pa55w0rd-stdin"
    watcher = bob.spawn(
        [runnable().python, "-I", "-c", WATCHER],
        env=bob.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        async with agent_in(accounts) as agent:
            env = alice.env(TUNEPLANE_AGENT="on", TUNEPLANE_AGENT_SOCKET=str(agent.socket))
            argv = runnable().argv("notify", "add")
            added = await asyncio.to_thread(alice.run, argv, env=env, input=receiver.url(alice.name, secret) + "\n")
            assert added.returncode == 0, added.stderr
            assert secret not in added.stdout and "****" in added.stdout
            await agent.cli(alice, "launch", "--cards", "1", "--run-id", "a-in", "--", "true")
            await notice(receiver, alice.name, "job a-in ended")  # the URL kept is the one given
    finally:
        seen = watcher.communicate("", timeout=60)[0]
    assert "tpnode_tui notify add" in seen, "bob's watcher never saw alice's command: it proves nothing"
    assert secret not in seen
