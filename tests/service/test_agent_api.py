"""The agent's API as clients meet it: well-formed or not, one at a time or many at once.

The agent runs here in the test's own event loop over a real Unix socket, a
simulated node and the process runtime with real processes; clients are the
product's own (AgentNode) or raw HTTP written by hand, because a hostile or
broken client does not use the product's client (the blocking one among
them, as the CLI asks). Accounts other than root, and the agent as its own
process, are in tests/system/test_agent_accounts.py.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from helpers.agents import WAIT_S, Agent, running
from helpers.services import write_scene
from helpers.waiting import until_async
from tpnode_tui.model.errors import JobNotFound
from tpnode_tui.node.http import straight
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.port.types.reservations import ReserveRequest


async def test_the_socket_is_connectable_by_every_account(agent):
    assert oct(os.stat(agent.socket).st_mode & 0o777) == "0o666"


async def test_the_agent_makes_its_state_dir_so_the_first_refusal_is_logged(agent, client):
    assert agent.state.is_dir() and oct(agent.state.stat().st_mode & 0o777) == "0o700"
    with pytest.raises(JobNotFound):
        await client.stop("nothing-by-this-name")
    entries, _ = await client.audit(None)
    assert [(e["action"], e["result"]) for e in entries] == [("stop", "failed")]


async def test_status_through_the_agent_names_the_caller_and_the_node(client):
    view = await client.status()
    assert view.snapshot.occupancy.total == 8 and len(view.snapshot.occupancy.free) == 8
    assert (view.you.user, view.you.uid, view.you.operator) == ("root", 0, True)


async def test_launch_reserve_and_stop_through_the_agent(agent, client):
    launched = (await client.launch(LaunchRequest(cards=2, command=("sleep", "60"), run_id="j1"))).launched
    reserved = await client.reserve(ReserveRequest(cards=1, duration_s=600, run_id="r1"))
    assert launched.gpus == (0, 1) and reserved.gpus == (2,)
    assert launched.job.owner == "root" and launched.job.uid == 0
    view = await client.status()
    assert view.snapshot.occupancy.by_job == {0: "j1", 1: "j1", 2: "r1"}
    assert view.you.cards_held == 3
    stopped = await client.stop("j1")
    assert stopped.key == "j1"
    await client.stop("r1")


@pytest.mark.parametrize(
    "body, says",
    [
        (b"{not json", "is not valid JSON"),
        (b"[1, 2]", "request is a list, not an object"),
        (b'{"cards": "2", "command": ["true"]}', "request.cards is a string, not a whole number"),
        (b'{"cards": 1, "command": ["true"], "privileged": true}', "unknown fields ['privileged']"),
        (b'{"cards": 1, "command": ["true"], "env": {"A": 1}}', "request.env is not an object of text values"),
        (b'{"cards": 1, "command": "true"}', "request.command is a string, not a list"),
        (b'{"cards": 1, "command": ["true"], "run_id": "../etc"}', "run id '../etc' is not valid"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
async def test_a_malformed_request_is_a_4xx_and_one_clear_line(agent, body, says):
    status, doc = await agent.post("/v1/launch", body)
    assert status == 400 and doc["exit_code"] == 2, doc
    assert says in doc["error"] and "\n" not in doc["error"] and "Traceback" not in doc["error"]


async def test_a_body_over_64_kib_is_refused_and_nothing_is_placed(agent, client):
    body = json.dumps({"cards": 1, "command": ["true", "x" * 70_000]}).encode()
    status, doc = await agent.post("/v1/launch", body)
    assert status == 413 and doc == {
        "error": "the request body is over 64 KiB, the most the agent reads (TUNEPLANE_MAX_BODY_KIB=64)",
        "exit_code": 2,
        "kind": "OverLimit",
    }
    assert (await client.status()).snapshot.jobs == ()


async def test_unknown_endpoints_and_methods_answer_in_the_same_form(agent):
    status, doc = await agent.request(b"GET /v2/anything HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 404 and "no such endpoint: GET /v2/anything" in doc["error"]
    status, doc = await agent.request(b"GET /v1/launch HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 405 and doc["exit_code"] == 2


async def test_silent_half_open_and_vanishing_clients_do_not_stop_the_agent_answering(agent, client):
    silent = [await asyncio.open_unix_connection(str(agent.socket)) for _ in range(200)]
    partial = []
    for _ in range(50):
        reader, writer = await asyncio.open_unix_connection(str(agent.socket))
        writer.write(b'POST /v1/launch HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{"cards"')
        partial.append((reader, writer))
    for _ in range(20):  # a dashboard that hangs up mid-stream
        reader, writer = await asyncio.open_unix_connection(str(agent.socket))
        writer.write(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readline()
        writer.transport.abort()
    view = await asyncio.wait_for(client.status(), WAIT_S)
    assert view.snapshot.occupancy.total == 8
    launched = await asyncio.wait_for(
        client.launch(LaunchRequest(cards=1, command=("sleep", "30"), run_id="still")), WAIT_S
    )
    assert launched.launched is not None
    await client.stop("still")
    for _, writer in silent + partial:
        writer.close()


async def test_the_stream_pushes_each_new_reading_as_it_is_made(agent, client):
    seen = []
    async for view in client.views():
        seen.append(view)
        if len(seen) == 1:
            write_scene(
                agent.scene,
                [{"memory_total_mib": 143771, "memory_used_mib": 90000}] + [{"memory_total_mib": 143771}] * 7,
            )
        if view.snapshot is not None and view.snapshot.occupancy.external:
            break
        assert len(seen) < 100, "the change never arrived"
    assert seen[-1].snapshot.occupancy.external == frozenset({0})
    assert [v.reading.seq for v in seen] == sorted(v.reading.seq for v in seen)
    assert seen[-1].you.user == "root"


async def test_an_agent_stops_at_once_with_streams_open_and_they_hear_it_went_away(agent, client):
    watching = []

    async def watch():
        async for view in client.views():
            watching.append(view)

    stream = asyncio.ensure_future(watch())
    await until_async(lambda: watching, "the first view")
    started = asyncio.get_running_loop().time()
    agent.stop.set()
    await asyncio.wait_for(agent.task, WAIT_S)  # not aiohttp's minute-long wait for the stream
    assert asyncio.get_running_loop().time() - started < WAIT_S
    with pytest.raises(AgentUnavailable) as gone:
        await asyncio.wait_for(stream, WAIT_S)
    assert str(gone.value).startswith(f"no agent answers at {agent.socket} (it went away mid-stream)")
    agent.stop = asyncio.Event()
    await agent.start()  # the same socket, a new agent: the same client reads from it
    view = await asyncio.wait_for(client.views().__anext__(), WAIT_S)
    assert view.you.user == "root"


async def test_many_clients_at_once_never_share_a_card(agent):
    clients = [AgentNode(agent.socket) for _ in range(50)]

    async def one(n: int, node: AgentNode):
        if n % 2:
            return await node.status()
        try:
            return await node.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id=f"m{n}"))
        except Exception as e:  # no capacity for most: that is the point
            return e

    try:
        results = await asyncio.gather(*(one(n, c) for n, c in enumerate(clients)))
    finally:
        for c in clients:
            await c.close()
    placed = [r.launched for r in results if hasattr(r, "launched") and r.launched is not None]
    assert len(placed) == 8
    cards = [g for p in placed for g in p.gpus]
    assert sorted(cards) == list(range(8))  # every card once, none twice
    refusals = [r for r in results if isinstance(r, Exception)]
    assert all("no capacity" in str(r).lower() or "need 1 card" in str(r) for r in refusals), refusals


async def test_more_cards_than_any_node_has_is_refused_as_the_node_says_it_never_queued(agent, client):
    """A count past any node's is the same refusal as one over this node's (422,
    exit 1, the node's count), through the door as well: it waits in no queue."""
    from tpnode_tui.model.errors import NeverFits

    for cards in (9, 10**20):
        with pytest.raises(NeverFits) as refused:
            await client.launch(LaunchRequest(cards=cards, command=("true",), run_id="big", queue=True))
        assert str(refused.value) == (
            f"big needs {cards} cards and this node has 8: no amount of waiting will place it; ask for fewer cards"
        )
    status, doc = await agent.post("/v1/reserve", b'{"cards": 100000000000000000000, "duration_s": 60}')
    assert (status, doc["exit_code"], doc["kind"]) == (422, 1, "NeverFits") and "this node has 8" in doc["error"]
    assert (await client.queued()) == () and (await client.status()).snapshot.jobs == ()


async def test_an_agent_that_is_gone_is_said_plainly(tmp_path):
    node = AgentNode(tmp_path / "nobody.sock")
    with pytest.raises(AgentUnavailable, match=r"no agent answers at .*nobody.sock"):
        await node.status()
    assert not await node.answers()
    await node.close()


def _mig_scene(scene) -> None:
    slices = [
        {
            "profile": "1g.18gb",
            "uuid": f"MIG-0000000{n}-9c0d-5e1f-a2b3-c4d5e6f7a8b9",
            "gpu_instance_id": 9 + n,
            "compute_instance_id": 0,
            "memory_total_mib": 16384,
            "memory_used_mib": 13,
        }
        for n in range(2)
    ]
    write_scene(scene, [{"mig": True, "slices": slices}] + [{"memory_total_mib": 143771}] * 7)


async def test_a_slice_is_asked_for_launched_and_reserved_through_the_agent(agent, client):
    from tpnode_tui.model.errors import NeverFits

    _mig_scene(agent.scene)
    launched = (
        await client.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="nb", slice="1g.18gb"))
    ).launched
    assert launched.gpus == () and launched.slices[0].uuid == "MIG-00000000-9c0d-5e1f-a2b3-c4d5e6f7a8b9"
    reserved = await client.reserve(ReserveRequest(cards=1, duration_s=600, run_id="rsv", slice="1g.18gb"))
    assert reserved.slices[0].uuid == "MIG-00000001-9c0d-5e1f-a2b3-c4d5e6f7a8b9"
    with pytest.raises(NeverFits, match="this node has none: its MIG slices are 2 of 1g.18gb"):
        await client.launch(LaunchRequest(cards=1, command=("true",), slice="2g.35gb"))
    view = await client.status()
    card = view.snapshot.cards[0]
    assert card.state == "mig" and [(s.state, s.run_id) for s in card.slices] == [("job", "nb"), ("reservation", "rsv")]
    assert view.snapshot.occupancy.free == list(range(1, 8))
    await client.stop("nb")
    await client.stop("rsv")


async def test_a_slice_that_is_not_a_profile_is_a_4xx_through_the_agent(agent):
    status, doc = await agent.post("/v1/launch", b'{"cards": 1, "command": ["true"], "slice": 3}')
    assert status == 400 and "request.slice is a number, not a string or null" in doc["error"]
    status, doc = await agent.post("/v1/reserve", b'{"cards": 1, "duration_s": 60, "slice": "1g 18gb"}')
    assert status == 400 and "'1g 18gb' is not a MIG profile" in doc["error"]


async def test_a_slice_launch_waits_in_the_agents_queue_and_starts_when_a_slice_frees(agent, client):
    _mig_scene(agent.scene)
    first = await client.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="a", slice="1g.18gb"))
    await client.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="b", slice="1g.18gb"))
    queued = (
        await client.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="c", slice="1g.18gb", queue=True))
    ).queued
    assert queued is not None and queued.slice == "1g.18gb"
    kept = json.loads((agent.state / "queue.json").read_text())["launches"]["c"]["request"]
    assert kept["slice"] == "1g.18gb" and "slices" not in kept  # which slice is chosen when it is placed
    assert [q.slice for q in (await client.status()).snapshot.queue] == ["1g.18gb"]
    await client.stop("a")

    async def live() -> dict:
        jobs = {j.key: j for j in (await client.status()).snapshot.jobs if j.live}
        return jobs if "c" in jobs else {}

    jobs = await until_async(live, "the queued slice launch to start", every=0.1)
    assert jobs["c"].slices == first.launched.slices
    for run_id in ("b", "c"):
        await client.stop(run_id)


async def test_a_blocking_node_asks_the_real_agent_without_an_event_loop(tmp_path):
    async with running(Agent(tmp_path)) as agent:

        def look():
            node = AgentNode(agent.socket, blocking=True)
            try:
                assert straight(node.answers())
                view = straight(node.status())
                return view.you.user, len(view.snapshot.cards), node.where
            finally:
                straight(node.close())

        user, cards, where = await asyncio.to_thread(look)
    assert (cards, where) == (8, f"agent at {agent.socket}") and user
