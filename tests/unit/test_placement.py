"""Cards that talk fast: the allocator places a job on the node's topology.

The pure choice is tested in test_topology.py; here it is the allocator's,
under its lock (with the in-memory stand-ins, so nothing else moves), and the
topology in the snapshot document. The CLI's flags as a user types them, and
placement through the agent, are in tests/service/test_placement_served.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from helpers.fakes import MemoryRuntime, StaticProbe
from tpnode_tui import NeverFits, NoCapacity
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JobSpec, JobState
from tpnode_tui.model.topology import CONTIGUOUS, SAME_SWITCH
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.port.wire.snapshot import snapshot_from_json, snapshot_to_json
from tpnode_tui.probes.shapes import nvswitch, pcie


@pytest.fixture
def make(make_allocator):
    """An allocator on a node of this topology, with these jobs already holding their cards."""

    def build(topology, *held: tuple[str, list[int]]):
        probe = StaticProbe()
        probe.reading = replace(probe.reading, topology=topology)
        runtime = MemoryRuntime()
        for run_id, gpus in held:
            runtime.add(JobState(name=f"tpn-{run_id}", run_id=run_id, gpus=tuple(gpus), status="running"))
        return make_allocator(runtime, probe)

    return build


def spec(run_id: str, cards: int, placement=None) -> JobSpec:
    return JobSpec(run_id=run_id, cards=cards, command=("sleep", "60"), placement=placement)


async def test_a_pair_stays_under_one_switch_where_a_consecutive_pair_would_span_two(make):
    # 0-2 held: 3 is alone under the first switch; 3,4 are consecutive but cross the sockets
    alloc = make(pcie(8, per_switch=4), ("a", [0, 1, 2]))
    launched = await alloc.launch(spec("pair", 2))
    assert launched.gpus == (4, 5)


async def test_without_a_topology_the_pick_is_consecutive_as_before(make):
    alloc = make(None, ("a", [0, 1, 2]))
    assert (await alloc.launch(spec("pair", 2))).gpus == (3, 4)


async def test_same_switch_waits_for_a_whole_switch_and_never_takes_a_scattered_set(make):
    alloc = make(pcie(8, per_switch=4), ("a", [0]), ("b", [5]))
    with pytest.raises(NoCapacity) as refused:
        await alloc.launch(spec("four", 4, SAME_SWITCH))
    said = str(refused.value)
    assert "need 4 cards same-switch" in said and "6 free" in said, said
    assert (await alloc.launch(spec("any", 4))).gpus  # without the requirement it is placed


async def test_a_set_that_no_switch_can_ever_hold_never_fits(make):
    alloc = make(pcie(8, per_switch=4))
    with pytest.raises(NeverFits) as never:
        await alloc.launch(spec("five", 5, SAME_SWITCH))
    assert str(never.value).startswith("five: ")
    assert not isinstance(never.value, NoCapacity)


async def test_contiguous_is_the_node_s_best_shape_of_that_size(make):
    alloc = make(pcie(8, per_switch=4), ("a", [1]))
    assert (await alloc.launch(spec("quad", 4, CONTIGUOUS))).gpus == (4, 5, 6, 7)
    with pytest.raises(NoCapacity):  # {0,2,3} and the rest of the node are no whole switch
        await alloc.launch(spec("quad2", 4, CONTIGUOUS))
    on_nvswitch = make(nvswitch(8), ("a", [1]))
    assert len((await on_nvswitch.launch(spec("quad", 4, CONTIGUOUS))).gpus) == 4  # every set is the best


async def test_a_placement_the_node_does_not_know_is_a_bad_request(make):
    alloc = make(pcie(8))
    with pytest.raises(BadRequest, match="not a placement requirement"):
        await alloc.launch(spec("odd", 2, "nearby"))


async def test_placement_waits_for_a_topology_not_known_now(make):
    alloc = make(None)
    with pytest.raises(NoCapacity, match="topology is not known now"):
        await alloc.launch(spec("p", 2, SAME_SWITCH))


def test_a_topology_this_node_can_never_say_is_never_fits_not_try_later():
    from tpnode_tui.core.placement import choose

    with pytest.raises(NeverFits, match=r"cannot say how its cards are linked \(no wiring\).*waiting cannot help"):
        choose(range(8), 2, None, CONTIGUOUS, unknowable="no wiring")
    with pytest.raises(NoCapacity, match="topology is not known now"):
        choose(range(8), 2, None, CONTIGUOUS)
    assert choose(range(8), 2, None, None, unknowable="no wiring") == [0, 1]


async def test_the_topology_travels_in_the_snapshot_and_a_damaged_one_is_refused(make):
    snap = await make(pcie(8, per_switch=4)).snapshot()
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    words = [doc["topology"]["kinds"][k - 1]["word"] if k else "X" for k in doc["topology"]["links"][0]]
    assert words == ["X", "PIX", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"]
    assert snapshot_from_json(doc) == snap
    doc["topology"]["links"][2] = doc["topology"]["links"][2][:5]
    with pytest.raises(WireError, match=r"snapshot.topology.links\[2\] is not 8 kind numbers"):
        snapshot_from_json(doc)
