"""The dashboard's launch queue over a real allocator: order, no starvation, no waiting for nothing."""
from __future__ import annotations

import asyncio

import pytest

from services import write_scene
from tpnode_tui.allocator import GpuAllocator
from tpnode_tui.config import load_settings
from tpnode_tui.locks import make_lock
from tpnode_tui.model import BadRequest, JobSpec, NeverFits
from tpnode_tui.tui.app import stop_demo_jobs
from tpnode_tui.tui.queue import PLACING, QUEUED, WAITING, Cancel, LaunchQueue


@pytest.fixture
async def allocator(tmp_path):
    scene = write_scene(tmp_path / "node.json", 2)
    alloc = GpuAllocator.from_settings(load_settings(
        {}, probe=f"simulated:{scene}", runtime="process", state_dir=str(tmp_path / "state")))
    yield alloc
    await stop_demo_jobs(alloc)
    await alloc.close()


def spec(run_id: str, cards: int) -> JobSpec:
    return JobSpec(run_id=run_id, cards=cards, command=("sleep", "60"))


async def test_a_large_request_at_the_head_is_not_starved_by_smaller_ones(allocator):
    await allocator.launch(spec("holder", 1))
    queue = LaunchQueue()
    queue.add(spec("big", 2), now=0)
    queue.add(spec("small", 1), now=1)

    assert await queue.drain(allocator.launch, now=2) == []
    assert [q.spec.run_id for q in queue] == ["big", "small"], "small jumped ahead of big"
    assert {j.run_id for j in await allocator.runtime.ps()} == {"holder"}

    await allocator.stop("holder")
    await allocator.reclaim("holder")
    [placed] = await queue.drain(allocator.launch, now=2)
    assert placed.spec.run_id == "big" and placed.launched.gpus == (0, 1)
    assert [q.spec.run_id for q in queue] == ["small"], "small waits for the next free card"


async def test_a_request_that_can_never_fit_leaves_the_queue_with_its_reason(allocator):
    queue = LaunchQueue()
    queue.add(spec("huge", 3), now=0)
    queue.add(spec("fits", 1), now=1)
    outcomes = await queue.drain(allocator.launch, now=2)
    assert [(o.spec.run_id, type(o.error)) for o in outcomes] == [("huge", NeverFits), ("fits", type(None))]
    assert "this node has 2" in str(outcomes[0].error)
    assert outcomes[1].launched.gpus == (0,)
    assert len(queue) == 0


async def test_one_run_id_is_queued_once_and_can_be_cancelled():
    queue = LaunchQueue()
    queue.add(spec("a", 1), now=0)
    with pytest.raises(BadRequest, match="already queued"):
        queue.add(spec("a", 2), now=1)
    queue.add(spec("b", 1), now=2)
    assert queue.position("b") == 2
    assert queue.cancel("a") is Cancel.DROPPED and queue.cancel("a") is None
    assert queue.position("b") == 1 and "a" not in queue


async def until(condition, what: str) -> None:
    for _ in range(300):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def states(queue: LaunchQueue) -> list[tuple[str, str]]:
    return [(p.spec.run_id, p.state) for p in queue.pending()]


async def test_a_launch_cancelled_while_it_waits_for_the_lock_is_abandoned_and_the_next_is_tried(allocator):
    other = make_lock(allocator.settings)  # another holder of the same lock file
    queue = LaunchQueue()
    queue.add(spec("first", 1), now=0)
    queue.add(spec("second", 1), now=1)
    try:
        async with other.hold():
            round_ = asyncio.ensure_future(queue.drain(allocator.launch, now=2))
            await until(lambda: allocator.lock.waiting, "the launch to wait for the lock")
            assert states(queue) == [("first", WAITING), ("second", QUEUED)]
            assert queue.cancel("first") is Cancel.ABANDONED
            await until(lambda: states(queue) == [("second", WAITING)], "the next launch to be tried")
            assert queue.cancel("second") is Cancel.ABANDONED
            assert await asyncio.wait_for(round_, 5) == [], "an abandoned launch has no outcome"
            assert allocator.lock.waiting is None and queue.pending() == []
        assert await allocator.runtime.ps() == [], "an abandoned launch created a job"
    finally:
        await other.close()


async def test_a_cancel_once_the_launch_holds_the_lock_lets_it_finish_and_says_so(allocator):
    real_create, gate = allocator.runtime.create, asyncio.Event()

    async def slow_create(job, gpus):
        await gate.wait()
        return await real_create(job, gpus)

    allocator.runtime.create = slow_create
    queue = LaunchQueue()
    attempt = asyncio.ensure_future(queue.attempt(spec("placed", 1), allocator.launch, now=0))
    await until(lambda: states(queue) == [("placed", PLACING)], "the launch to hold the lock")
    assert queue.cancel("placed") is Cancel.TOO_LATE
    gate.set()
    outcome = await asyncio.wait_for(attempt, 10)
    assert outcome.cancelled and outcome.launched.gpus == (0,)
    assert [j.run_id for j in await allocator.runtime.ps()] == ["placed"]


async def test_a_run_id_is_launched_once_at_a_time():
    started = asyncio.Event()

    async def never_done(job, locked):
        started.set()
        await asyncio.Event().wait()

    queue = LaunchQueue()
    attempt = asyncio.ensure_future(queue.attempt(spec("once", 1), never_done, now=0))
    await started.wait()
    with pytest.raises(BadRequest, match="already queued or being launched"):
        await queue.attempt(spec("once", 1), never_done, now=1)
    with pytest.raises(BadRequest, match="already queued or being launched"):
        queue.add(spec("once", 1), now=1)
    assert queue.cancel("once") is Cancel.ABANDONED
    assert (await attempt).abandoned
