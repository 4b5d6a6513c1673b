"""The node's service: one reading for every reader, and actions checked against who asks.

The runtime and probe are the in-memory stand-ins of tests/helpers/fakes.py (so a
probe read can be counted and nothing else moves); the lock is the real flock.
Callers are built by hand, because what the rules decide from an identity is
what is under test here; identities from the kernel, with real accounts and a
real agent, are in tests/system/test_agent_accounts.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from helpers.callers import ALICE, BOB, ROOT
from helpers.waiting import until_async
from tpnode_tui.core.policy import CardLimits
from tpnode_tui.locks import make_lock
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NoCapacity, NotAllowed
from tpnode_tui.port import operations as ops
from tpnode_tui.port.types.jobs import CancelRequest, LaunchRequest, ReclaimRequest, StopRequest
from tpnode_tui.port.types.operators import DrainRequest
from tpnode_tui.port.types.refusals import Cancelled
from tpnode_tui.port.types.reservations import ExtendRequest, ReserveRequest

WAIT_S = 10.0


#: the stand-ins' probe and runtime, and the agent's queue file
pytestmark = pytest.mark.service_node(probe="static", runtime="memory", file_queue=True)


async def test_many_readers_cost_one_probe_read_per_poll(service_node):
    readers = [service_node.service.subscribe() for _ in range(20)]
    got = [[] for _ in readers]

    async def read(n, it):
        async for reading in it:
            got[n].append(reading.seq)

    tasks = [asyncio.ensure_future(read(n, it)) for n, it in enumerate(readers)]
    for _ in range(5):
        await service_node.service.poll()
    await until_async(
        lambda: all(seqs and seqs[-1] == service_node.service.reading.seq for seqs in got),
        "every reader to see the last reading",
    )
    assert service_node.probe.reads == 5
    assert service_node.service.subscribers == 20
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert service_node.service.subscribers == 0  # a reader that leaves is forgotten


async def test_a_launch_belongs_to_the_caller_and_only_they_or_an_operator_may_stop_it(service_node):
    result = await service_node.launch(ALICE, "a1", 2)
    assert result.launched.job.owner == "alice" and result.launched.job.uid == 5001
    refusal = "cards 0,1 are held by a1 of alice; only alice or an operator may stop it; the operators here: root"
    with pytest.raises(NotAllowed, match=refusal):
        await service_node.service.stop(BOB, StopRequest("a1"))
    assert service_node.runtime.jobs["tpn-a1"].status == "running"  # nothing changed
    await service_node.service.stop(ROOT, StopRequest("a1"))
    actions = [(e["user"], e["action"], e["result"]) for e in service_node.log.read()]
    assert actions == [("alice", "launch", "ok"), ("bob", "stop", "refused"), ("root", "stop", "ok")]


@pytest.mark.parametrize("ask", ["stop", "extend"])
async def test_a_run_id_that_names_nothing_running_is_said_as_a_job_or_a_reservation(service_node, ask):
    request = StopRequest("rsv-a") if ask == "stop" else ExtendRequest("rsv-a", 60)
    with pytest.raises(JobNotFound) as missing:
        await getattr(service_node.service, ask)(ALICE, request)
    assert str(missing.value) == "no running job or reservation has run id rsv-a"


async def test_asking_for_another_owner_is_refused_unless_an_operator_asks(service_node):
    with pytest.raises(NotAllowed):
        await service_node.service.reserve(BOB, ReserveRequest(cards=1, duration_s=60, owner="alice"))
    done = await service_node.service.reserve(ROOT, ReserveRequest(cards=1, duration_s=60, owner="alice"))
    assert done.job.owner == "alice"


async def test_a_quota_is_checked_under_the_lock_so_two_launches_at_once_cannot_both_pass(make_node):
    n = make_node(8, limits=CardLimits(default=2))
    n.runtime.create_delay = 0.05  # a wide window between reading and creating
    results = await asyncio.gather(n.launch(ALICE, "x1", 2), n.launch(ALICE, "x2", 2), return_exceptions=True)
    refused = [r for r in results if isinstance(r, NotAllowed)]
    assert len(refused) == 1 and "you hold 2 cards" in str(refused[0]), results
    assert sum(len(j.gpus) for j in n.runtime.jobs.values()) == 2
    await n.launch(BOB, "b1", 2)  # another account's quota is its own


async def test_the_queue_keeps_its_order_and_the_first_that_does_not_fit_stops_the_round(service_node):
    await service_node.launch(ALICE, "big-running", 3)
    big = await service_node.launch(BOB, "wants-3", 3, queue=True)
    small = await service_node.launch(BOB, "wants-1", 1, queue=True)
    assert big.queued is not None and small.queued is not None
    await service_node.service.poll()
    service_node.service.launches.try_queue()
    await asyncio.sleep(0.2)
    assert "tpn-wants-1" not in service_node.runtime.jobs  # a free card, but not its turn
    assert [q.run_id for q in service_node.service.launches.queued()] == ["wants-3", "wants-1"]
    await service_node.service.stop(ALICE, StopRequest("big-running"))
    runner = asyncio.ensure_future(service_node.service.run())
    try:
        # Started, and the launch that placed it has returned (until then it is listed as placing).
        await until_async(
            lambda: (
                "tpn-wants-3" in service_node.runtime.jobs
                and "tpn-wants-1" in service_node.runtime.jobs
                and service_node.service.launches.queued() == ()
            ),
            "both queued launches to start in order",
        )
    finally:
        runner.cancel()
    assert list(service_node.runtime.started)[-2:] == ["tpn-wants-3", "tpn-wants-1"]
    assert service_node.service.launches.queued() == ()


async def test_a_queued_launch_over_its_owners_quota_waits_without_holding_back_others(make_node):
    n = make_node(limits=CardLimits(per_account={"alice": 1}))
    await n.launch(ALICE, "mine", 1)
    await n.service.launch(ALICE, LaunchRequest(cards=1, command=("t",), run_id="later", queue=True))
    n.probe.set_card(3, memory_used_mib=90000)  # someone outside takes card 3: 2 left
    with pytest.raises(NotAllowed):
        await n.launch(ALICE, "now", 1)
    await n.launch(BOB, "queued-b", 4, queue=True)
    await n.launch(BOB, "queued-c", 1, queue=True)
    await n.service.poll()
    n.service.launches.try_queue()
    await until_async(
        lambda: "tpn-queued-c" not in n.runtime.jobs and n.service.launches._round.done(), "a round of the queue"
    )
    assert "tpn-later" not in n.runtime.jobs
    assert [q.run_id for q in n.service.launches.queued()] == ["later", "queued-b", "queued-c"]


async def test_a_launch_waiting_for_the_lock_is_listed_and_its_owner_can_cancel_it(service_node):
    other = make_lock(service_node.settings)  # another holder of the flock, as another process would be
    async with other.hold():
        waiting = asyncio.ensure_future(service_node.launch(ALICE, "w1", 1))
        await until_async(lambda: service_node.allocator.lock.waiting, "the launch to wait for the lock")
        await service_node.service.poll()
        [shown] = service_node.service.reading.snapshot.queue
        assert (shown.run_id, shown.state, shown.owner) == ("w1", "waiting", "alice")
        assert "allocation lock" in shown.waiting_for
        with pytest.raises(NotAllowed):
            await service_node.service.cancel(BOB, CancelRequest("w1"))
        # being placed for alice: bob is told whose it is, and not to wait for or cancel what he may not
        with pytest.raises(
            Conflict,
            match=r"run id w1 is being launched already for alice; choose another run id "
            r"\(only they or an operator may cancel it\)$",
        ):
            await service_node.launch(BOB, "w1", 1)
        await service_node.service.cancel(ALICE, CancelRequest("w1"))
        with pytest.raises(Cancelled, match="w1 was cancelled by alice while it waited"):
            await waiting
    assert service_node.runtime.jobs == {}  # nothing was placed
    assert service_node.service.launches.queued() == ()


async def test_a_launch_whose_asker_goes_away_while_it_waits_is_dropped(service_node):
    other = make_lock(service_node.settings)
    async with other.hold():
        asker = asyncio.ensure_future(service_node.launch(ALICE, "gone", 1))
        await until_async(lambda: service_node.allocator.lock.waiting, "the launch to wait")
        asker.cancel()
        await asyncio.sleep(0.1)
        assert service_node.service.launches.queued() == ()
    await asyncio.sleep(0.1)
    assert service_node.runtime.jobs == {}
    assert [e["result"] for e in service_node.log.read()] == ["abandoned"]


async def test_a_status_right_after_an_action_shows_the_action(service_node):
    runner = asyncio.ensure_future(service_node.service.run())
    try:
        await service_node.service.current()
        service_node.service.interval = 3600  # no poll by the clock from here on
        await service_node.launch(ALICE, "seen", 1)
        reading = await service_node.service.current()
        assert reading.snapshot.occupancy.by_job == {0: "seen"}
    finally:
        runner.cancel()


async def test_cancelling_what_is_not_queued_says_so(service_node):
    with pytest.raises(JobNotFound, match="no launch nope is queued or waiting"):
        await service_node.service.cancel(ALICE, CancelRequest("nope"))


async def test_no_capacity_without_queueing_is_refused_as_no_capacity(service_node):
    await service_node.launch(ALICE, "all", 4)
    with pytest.raises(NoCapacity):
        await service_node.launch(BOB, "more", 1)


async def test_extend_moves_a_reservations_expiry_for_its_owner_only(service_node):
    r = await service_node.service.reserve(ALICE, ReserveRequest(cards=1, duration_s=600, run_id="r1"))
    with pytest.raises(NotAllowed):
        await service_node.service.extend(BOB, ExtendRequest("r1", 3600))
    job = await service_node.service.extend(ALICE, ExtendRequest("r1", 3600))
    assert job.expires_at == pytest.approx(r.job.expires_at + 3600, abs=1)


async def test_reclaim_without_a_run_id_removes_only_what_the_caller_may(service_node):
    for caller, run_id in ((ALICE, "a"), (BOB, "b")):
        await service_node.launch(caller, run_id, 1)
        service_node.runtime.jobs[f"tpn-{run_id}"] = replace(
            service_node.runtime.jobs[f"tpn-{run_id}"], status="exited"
        )
    assert [j.run_id for j in await service_node.service.reclaim(ALICE, ReclaimRequest(None))] == ["a"]
    assert [j.run_id for j in await service_node.service.reclaim(ROOT, ReclaimRequest(None))] == ["b"]


async def test_a_queued_launch_being_tried_keeps_its_place_unless_the_lock_keeps_it_waiting(service_node):
    await service_node.launch(ALICE, "full", 4)
    await service_node.launch(BOB, "later", 1, queue=True)
    read = asyncio.Event()
    slow = service_node.probe.read

    async def slowly():
        read.set()
        await asyncio.sleep(0.3)
        return await slow()

    service_node.probe.read = slowly
    service_node.service.launches.try_queue()  # tries "later": reads the node under the lock, slowly
    await asyncio.wait_for(read.wait(), WAIT_S)
    [shown] = service_node.service.launches.queued()
    assert (shown.run_id, shown.state) == ("later", "queued")  # being tried, not waiting for anyone
    assert shown.waiting_for == "1 card, #1 in the queue"


async def test_a_broken_queue_file_is_said_in_every_reading_and_the_polls_go_on(service_node):
    await service_node.launch(ALICE, "all", 4)
    await service_node.launch(BOB, "waits", 1, queue=True)
    runner = asyncio.ensure_future(service_node.service.run())
    try:
        await until_async(
            lambda: service_node.service.reading.snapshot is not None and service_node.service.reading.error is None,
            "a first reading",
        )
        queue_file = service_node.settings.state.dir / "queue.json"
        good = queue_file.read_bytes()
        queue_file.write_text("{broken")

        def problem():
            snap = service_node.service.reading.snapshot
            return snap.queue_problem if snap is not None else None

        await until_async(lambda: "launch queue" in (problem() or ""), "the reading to say so")
        # the cards are still known and shown: only the queue is in doubt, never the whole reading
        assert service_node.service.reading.error is None
        assert service_node.service.reading.snapshot.occupancy.by_job
        reads = service_node.probe.reads
        await until_async(lambda: service_node.probe.reads >= reads + 3, "the polls to go on")
        queue_file.write_bytes(good)
        await until_async(lambda: problem() is None, "a good reading again")
        assert [q.run_id for q in service_node.service.reading.snapshot.queue] == ["waits"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_a_problem_of_the_node_s_that_passes_drops_no_queued_launch(service_node):
    await service_node.launch(ALICE, "all", 4)
    await service_node.launch(BOB, "first", 2, queue=True)
    await service_node.launch(BOB, "second", 1, queue=True)
    drains = service_node.settings.state.dir / "drains.json"
    drains.write_text("{broken")  # no card can be handed out until it is repaired
    await service_node.service.stop(ALICE, StopRequest("all"))
    await service_node.service.poll()
    service_node.service.launches.try_queue()
    launches = service_node.service.launches
    await until_async(lambda: launches._round is not None and launches._round.done(), "a round")
    assert [q.run_id for q in service_node.service.launches.queued()] == ["first", "second"], "both kept their place"
    assert "tpn-first" not in service_node.runtime.jobs
    drains.unlink()
    service_node.service.launches.try_queue()
    await until_async(
        lambda: "tpn-first" in service_node.runtime.jobs and "tpn-second" in service_node.runtime.jobs, "both to start"
    )


async def test_someone_else_s_run_id_is_not_theirs_to_get_back(service_node):
    await service_node.launch(ALICE, "a1", 1)
    with pytest.raises(Conflict, match="run id a1 is taken by alice's job; choose another run id"):
        await service_node.launch(BOB, "a1", 1)
    again = await service_node.launch(ALICE, "a1", 1)  # the owner's retry gets her job back, as before
    assert again.launched is not None and again.launched.existing
    assert [e["result"] for e in service_node.log.read() if e.get("target") == "a1"] == ["ok", "failed", "ok"]


async def test_repeated_refusals_from_one_account_fold_into_one_line_with_their_count(service_node):
    for _ in range(40):
        with pytest.raises(NotAllowed, match="only an operator"):
            await service_node.ask(BOB, ops.RESERVE, ReserveRequest(cards=1, duration_s=60, owner="x" * 5000))
    with pytest.raises(NotAllowed):  # another kind of refusal: a line of its own
        await service_node.ask(BOB, ops.DRAIN, DrainRequest(1, "mine now"))
    with pytest.raises(BadRequest, match="who asks is the kernel's"):  # a forged uid: refused at the door, logged
        service_node.service.read(BOB, ops.STOP, {"run_id": "a1", "uid": 0})
    service_node.service.journal.flush()  # as the fold's minute ends
    logged = [e for e in service_node.kinds("action") if e["uid"] == BOB.uid]
    assert [(e["action"], e["result"], e.get("count")) for e in logged] == [
        ("reserve", "refused", None),
        ("drain", "refused", None),
        ("stop", "bad request", None),
        ("reserve", "refused", 39),
    ]
    first, *_, folded = logged
    assert "bob asked to act as 'xxxx" in first["message"] and len(first["message"]) <= 500  # quoted, cut
    assert folded["first"] <= folded["last"] and folded["message"].startswith("39 more like the one before from bob")
    assert all(e["user"] == "bob" and e["pid"] == BOB.pid for e in logged)  # who, as the kernel named them
