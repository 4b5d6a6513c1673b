"""The agent's triage endpoints: drain, undrain, evict, events (and following them), history.

As in tests/service/test_agent_api.py the agent runs in the test's own event loop on
a real Unix socket over a simulated node and the process runtime; clients
are the product's own (AgentNode) or raw HTTP. A caller who is not an
operator is a real test account: the test connects with that account's
uid and gid (the kernel records them for SO_PEERCRED at connect) and then
takes root's back.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import threading
from dataclasses import replace

import pytest

from helpers.accounts import shared_dir
from helpers.agents import Agent, running
from helpers.waiting import until_async
from tpnode_tui.model.errors import Conflict, JobNotFound
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.state.nodelog import NodeLog

WAIT_S = 15.0


@pytest.fixture
async def agent(tmp_path):
    a = Agent(tmp_path)
    # A socket every test account can reach (a pytest tmp_path is root's alone).
    place = shared_dir("tpn-agent-")
    a.socket = place / "agent.sock"
    a.settings = replace(a.settings, agent=replace(a.settings.agent, socket=a.socket))
    a.state.mkdir()  # as the agent's unit makes it (StateDirectory=): its log is kept from the start
    async with running(a):
        yield a
    shutil.rmtree(place, ignore_errors=True)


async def get(agent, path: str) -> tuple[int, dict]:
    return await agent.request(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())


async def test_drain_and_undrain_through_the_agent_show_in_status_and_events(agent, client):
    drain = await client.drain(3, "fan replaced tomorrow")
    assert (drain.card, drain.by, drain.source) == (3, "root", "operator")
    view = await client.status()
    # the node keeps the card's ECC count on its drain once it has read the card drained
    assert view.snapshot.cards[3].state == "drained" and replace(view.snapshot.cards[3].drain, ecc=None) == drain
    assert view.snapshot.occupancy.drained == {3: "fan replaced tomorrow"}
    with pytest.raises(Conflict, match="card 3 is drained already"):
        await client.drain(3, "again")
    lifted = await client.undrain(3)
    assert replace(lifted, ecc=None) == drain
    with pytest.raises(JobNotFound, match="card 3 is not drained"):
        await client.undrain(3)
    kinds = [(e["kind"], e.get("action")) for e in await client.events(card=3)]
    # each change once (the actions that made them are in the audit), and each refusal
    assert kinds == [("drain", None), ("action", "drain"), ("undrain", None), ("action", "undrain")]
    assert [e["result"] for e in await client.events(card=3) if e["kind"] == "action"] == ["failed", "failed"]
    assert await client.events(card=5) == []


async def test_following_the_log_through_the_agent(agent, client):
    got: list[dict] = []

    async def follow():
        async for entry in client.follow_events(card=1):
            got.append(entry)

    other = AgentNode(agent.socket)
    follower = asyncio.ensure_future(follow())
    try:
        await asyncio.sleep(0.3)  # the stream is open
        await other.drain(1, "watch this")
        await other.drain(2, "not this card")
        await other.undrain(1)
        await until_async(lambda: len(got) >= 2, "the drain and the undrain of card 1")
        # each once: the actions that made them are in the audit
        assert [(e["kind"], e["cards"]) for e in got] == [("drain", [1]), ("undrain", [1])]
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await other.close()


async def test_an_xid_in_the_scene_drains_its_card_through_the_agent(agent, client):
    doc = json.loads(agent.scene.read_text())
    doc["cards"][6]["xid_events"] = [{"id": "boom", "xid": 79}]
    agent.scene.write_text(json.dumps(doc))

    async def drained():
        snap = (await client.status()).snapshot
        return snap if snap.cards[6].state == "drained" else None

    snap = await until_async(drained, "card 6 to be drained")
    assert snap.xid_watch == "simulated" and snap.xid_problem is None
    assert snap.cards[6].drain.reason == "XID 79: GPU has fallen off the bus; reboot the node"
    [drain] = await client.events(card=6)  # one entry: the drain, with the XID that did it
    assert (drain["kind"], drain["xid"], drain["verdict"], drain["event"]) == ("drain", 79, "reboot", "boom")


async def test_history_and_an_evict_dry_run_through_the_agent(agent, client):
    squatter = subprocess.Popen(["sleep", "300"])
    try:
        doc = json.loads(agent.scene.read_text())
        doc["cards"][4].update(processes=[{"pid": squatter.pid, "used_memory_mib": 4096}], memory_used_mib=4096)
        agent.scene.write_text(json.dumps(doc))

        async def seen():
            return (await client.status()).snapshot.cards[4].state == "external"

        await until_async(seen, "the squatter")
        report = await client.evict(4, dry_run=True)
        assert report.dry_run and [(p.pid, p.outcome, p.belongs) for p in report.processes] == [
            (squatter.pid, "listed", "external")
        ]
        assert squatter.poll() is None
        with pytest.raises(Conflict, match="no longer the process that was listed"):  # its start travels both ways
            await client.evict(4, squatter.pid, started_at=report.processes[0].started_at + 60)
        assert squatter.poll() is None
        history = await until_async(lambda: client.history(4), "some history")
        assert list(history) == [4] and history[4] and history[4][-1].memory_used_mib == 4096
        assert set(await client.history()) == set(range(8))
    finally:
        squatter.kill()
        squatter.wait()


@pytest.mark.parametrize(
    "path, says",
    [
        ("/v1/events?card=x", "card='x' is not a card index"),
        ("/v1/events?since=-5", "since='-5' is not a number of seconds"),
        ("/v1/events?follow=maybe", "follow='maybe' is not true or false"),
        ("/v1/events?sice=5", "does not take sice"),
        ("/v1/history?card=99", "card 99 is not a card of this node (its cards: 0-7)"),
    ],
)
async def test_a_malformed_query_is_a_400_and_one_line(agent, client, path, says):
    await client.status()  # the agent has read the node, so it knows its cards
    status, doc = await get(agent, path)
    assert status == 400 and doc["exit_code"] == 2 and says in doc["error"], doc


@pytest.mark.parametrize(
    "path, body, says",
    [
        ("/v1/drain", b'{"card": "1", "reason": "x"}', "request.card is a string, not a whole number"),
        ("/v1/drain", b'{"card": 1}', "request has no 'reason'"),
        ("/v1/drain", b'{"card": -1, "reason": "x"}', "request.card is -1, not a card index"),
        ("/v1/undrain", b'{"card": 1, "now": true}', "unknown fields ['now']"),
        ("/v1/undrain", b'{"card": 1, "force": "yes"}', "request.force is a string, not true or false"),
        ("/v1/check", b'{"card": 1, "tier": "B"}', "unknown fields ['tier']"),
        ("/v1/check", b'{"card": "1"}', "request.card is a string, not a whole number"),
        ("/v1/evict", b'{"card": 1, "pid": 0}', "request.pid is 0, not a process id"),
        ("/v1/evict", b'{"card": 1, "kill": "yes"}', "request.kill is a string, not true or false"),
        ("/v1/evict", b'{"card": 1, "started_at": 1700000000.5}', "names the start of one process: give its pid"),
        ("/v1/evict", b'{"card": 1, "pid": 42, "started_at": "noon"}', "request.started_at is a string"),
    ],
)
async def test_a_malformed_triage_request_is_a_400(agent, path, body, says):
    status, doc = await agent.post(path, body)
    assert status == 400 and doc["exit_code"] == 2 and says in doc["error"], doc


def connect_as(account, path) -> socket.socket:
    """A connection the kernel records as ``account``'s: its ids while connecting, then root's back."""
    groups = os.getgroups()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.setgroups(list(account.groups))
    os.setegid(account.gid)
    os.seteuid(account.uid)
    try:
        sock.connect(str(path))
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)
    return sock


async def test_a_user_who_is_not_an_operator_is_refused_with_77(agent, client, accounts):
    for path, body in (
        ("/v1/drain", {"card": 1, "reason": "mine now"}),
        ("/v1/undrain", {"card": 1}),
        ("/v1/evict", {"card": 1, "dry_run": True}),
    ):
        raw = json.dumps(body).encode()
        reader, writer = await asyncio.open_unix_connection(sock=connect_as(accounts.bob, agent.socket))
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n".encode()
            + raw
        )
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), WAIT_S)
        writer.close()
        head, _, answer = data.partition(b"\r\n\r\n")
        doc = json.loads(answer)
        assert int(head.split()[1]) == 403 and doc["exit_code"] == 77 and doc["kind"] == "NotAllowed", doc
        assert doc["error"].startswith(f"{accounts.bob.name} may not ")
    refused = [e for e in await client.events() if e["kind"] == "action"]
    assert [(e["user"], e["action"], e["result"]) for e in refused] == [
        (accounts.bob.name, "drain", "refused"),
        (accounts.bob.name, "undrain", "refused"),
        (accounts.bob.name, "evict", "refused"),
    ]
    assert (await client.status()).snapshot.occupancy.drained == {}


async def test_reading_a_long_log_keeps_no_one_else_waiting(agent, client, monkeypatch):
    """The log files (up to TUNEPLANE_LOG_MAX_MB each) are read off the event loop."""

    async def started():  # what the agent reads back of its log at start is read by then
        snap = (await client.status()).snapshot
        return snap is not None and snap.xid_watch == "simulated"

    await until_async(started, "the agent's first reading and its XID watcher")
    entered, release, read_done = threading.Event(), threading.Event(), threading.Event()
    read = NodeLog.read

    def slow_read(self, **kw):
        entered.set()
        release.wait(5.0)  # a log that takes seconds to read; never for ever
        read_done.set()
        return read(self, **kw)

    monkeypatch.setattr(NodeLog, "read", slow_read)
    reading = asyncio.ensure_future(client.events())
    try:
        await until_async(entered.is_set, "the log read to begin")
        await client.status()
        answered_while_reading = not read_done.is_set()
    finally:
        release.set()
        await reading
    assert answered_while_reading, "status waited for someone else's log read"
