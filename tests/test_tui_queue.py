"""The dashboard's launch queue over a real allocator: order, no starvation, no waiting for nothing."""
from __future__ import annotations

import pytest

from services import write_scene
from tpnode_tui.allocator import GpuAllocator
from tpnode_tui.config import load_settings
from tpnode_tui.model import BadRequest, JobSpec, NeverFits
from tpnode_tui.tui.app import stop_demo_jobs
from tpnode_tui.tui.queue import LaunchQueue


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

    assert await queue.drain(allocator.launch) == []
    assert [q.spec.run_id for q in queue] == ["big", "small"], "small jumped ahead of big"
    assert {j.run_id for j in await allocator.runtime.ps()} == {"holder"}

    await allocator.stop("holder")
    await allocator.reclaim("holder")
    [placed] = await queue.drain(allocator.launch)
    assert placed.item.spec.run_id == "big" and placed.launched.gpus == (0, 1)
    assert [q.spec.run_id for q in queue] == ["small"], "small waits for the next free card"


async def test_a_request_that_can_never_fit_leaves_the_queue_with_its_reason(allocator):
    queue = LaunchQueue()
    queue.add(spec("huge", 3), now=0)
    queue.add(spec("fits", 1), now=1)
    outcomes = await queue.drain(allocator.launch)
    assert [(o.item.spec.run_id, type(o.error)) for o in outcomes] == [("huge", NeverFits), ("fits", type(None))]
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
    assert queue.cancel("a") and not queue.cancel("a")
    assert queue.position("b") == 1 and "a" not in queue
