"""Each probe reads the topology through its own machinery, and not on every poll."""

from __future__ import annotations

import asyncio
import time

import pytest

from helpers.nvml import (
    NVML_TOPOLOGY_HOSTBRIDGE,
    NVML_TOPOLOGY_INTERNAL,
    NVML_TOPOLOGY_MULTIPLE,
    NVML_TOPOLOGY_NODE,
    NVML_TOPOLOGY_SINGLE,
    FakeCard,
    FakeNvml,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
    NVMLError_Unknown,
)
from helpers.services import write_scene
from tpnode_tui.core.placement import choose
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.topology import Link, Topology
from tpnode_tui.probes import wiring as probe_topology
from tpnode_tui.probes.shapes import shape
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.probes.smi import SmiProbe
from tpnode_tui.probes.wiring import TopologyKeeper

NV18, NV2 = Link(18), Link(2)
PIX, PXB, PHB, NODE, SYS = (Link(pcie=p) for p in ("PIX", "PXB", "PHB", "NODE", "SYS"))


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    """A /sys/bus/pci/devices of the test's own: sysfs({"0000:18:00.0": "1"})."""
    devices = tmp_path / "devices"
    monkeypatch.setattr(probe_topology, "PCI_DEVICES", devices)

    def _write(nodes: dict[str, str]) -> None:
        for bus, node in nodes.items():
            (devices / bus).mkdir(parents=True)
            (devices / bus / "numa_node").write_text(node + "\n")

    return _write


def _links(topology: Topology) -> dict[tuple[int, int], Link]:
    n = topology.count
    return {(a, b): topology.link(a, b) for a in range(n) for b in range(a + 1, n) if topology.link(a, b)}


# -- NVML ----------------------------------------------------------------------------------


async def test_nvml_reads_pcie_paths_nvlinks_and_numa_nodes(nvml_probe, sysfs):
    fake = FakeNvml([FakeCard() for _ in range(4)])
    fake.default_ancestor = NVML_TOPOLOGY_NODE
    fake.ancestors.update(
        {
            (0, 1): NVML_TOPOLOGY_SINGLE,
            (2, 3): NVML_TOPOLOGY_MULTIPLE,
            (1, 2): NVML_TOPOLOGY_HOSTBRIDGE,
            (3, 0): NVML_TOPOLOGY_INTERNAL,
        }
    )
    fake.nvlink(0, 1, 2)
    fake.nvlink(3, 1)
    sysfs({"0000:18:00.0": "0", "0000:19:00.0": "0", "0000:1a:00.0": "-1"})  # card 3: not there at all

    reading = await nvml_probe(fake).read()
    assert reading.problem is None and reading.count == 4
    assert _links(reading.topology) == {
        (0, 1): Link(2, "PIX"),
        (0, 2): NODE,
        (0, 3): PIX,
        (1, 2): PHB,
        (1, 3): Link(1, "NODE"),
        (2, 3): PXB,
    }
    assert reading.topology.numa == (0, 0, None, None)


async def test_nvml_counts_the_nvlinks_two_cards_share_through_the_nvswitches(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(8)])
    fake.nvswitch(18)
    topology = (await nvml_probe(fake).read()).topology
    assert set(_links(topology).values()) == {Link(18, "SYS")}
    assert choose([0, 3, 5, 7], 2, topology) == [0, 3]


async def test_a_link_that_is_down_or_leads_nowhere_known_is_not_counted(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(2)])
    fake.nvlink(0, 1, 3)
    fake.cards[0].nvlinks[1] = None  # down
    fake.cards[0].nvlinks[2] = (0, "00000000:99:00.0")  # a GPU this node does not list
    fake.cards[1].nvlinks = [None, None, None]
    assert (await nvml_probe(fake).read()).topology.link(0, 1) == Link(1, "SYS")


@pytest.mark.parametrize("missing", ["error", "binding"])
async def test_an_older_driver_without_the_remote_type_still_finds_peers_by_bus_id(nvml_probe, missing):
    class OldBinding(FakeNvml):
        nvmlDeviceGetNvLinkRemoteDeviceType = None

    fake = (OldBinding if missing == "binding" else FakeNvml)([FakeCard() for _ in range(2)])
    for card in fake.cards:
        card.errors["nvlink_remote_type"] = NVMLError_FunctionNotFound
    fake.nvlink(0, 1, 2)
    reading = await nvml_probe(fake).read()
    assert reading.topology.link(0, 1) == Link(2, "SYS") and reading.problem is None


@pytest.mark.parametrize("error", [NVMLError_NotSupported, NVMLError_FunctionNotFound])
async def test_unsupported_topology_calls_leave_those_facts_unknown_quietly(nvml_probe, error):
    fake = FakeNvml([FakeCard() for _ in range(3)])
    fake.nvlink(0, 1, 2)
    for card in fake.cards:
        card.errors["topology"] = error
    reading = await nvml_probe(fake).read()
    assert _links(reading.topology) == {(0, 1): NV2}  # NVLinks known, PCIe paths not
    assert reading.problem is None and reading.external_probe_ok


async def test_unsupported_nvlink_calls_leave_nvlinks_unknown_quietly(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(2)])
    fake.nvlink(0, 1, 2)
    for card in fake.cards:
        card.errors["nvlink_state"] = NVMLError_FunctionNotFound
    reading = await nvml_probe(fake).read()
    assert reading.topology.link(0, 1) == SYS and reading.problem is None


@pytest.mark.parametrize(
    "where, links",
    [
        # its PCIe paths are not known; its NVLinks are
        ("topology", {(0, 1): NV2, (0, 2): PIX, (1, 2): NV2}),
        # its own NVLinks are not read, but its peers see theirs to it
        ("nvlink_state", {(0, 1): Link(2, "SYS"), (0, 2): PIX, (1, 2): Link(2, "SYS")}),
        ("nvlink_remote_pci", {(0, 1): Link(2, "SYS"), (0, 2): PIX, (1, 2): Link(2, "SYS")}),
        # lost before anything is known of it: nothing is
        ("pci", {(0, 2): PIX}),
    ],
)
async def test_a_gpu_lost_in_a_topology_call_leaves_only_what_it_would_tell_unknown(nvml_probe, where, links):
    fake = FakeNvml([FakeCard() for _ in range(3)])
    fake.nvlink(0, 1, 2)
    fake.nvlink(1, 2, 2)
    fake.ancestors[(0, 2)] = NVML_TOPOLOGY_SINGLE
    fake.cards[1].errors[where] = NVMLError_GpuIsLost
    reading = await nvml_probe(fake).read()
    assert _links(reading.topology) == links
    assert reading.problem is None  # a lost card is the reading's to report, as it always was


async def test_a_lost_gpu_has_no_links_and_the_rest_keep_theirs(nvml_probe):
    fake = FakeNvml([FakeCard(), FakeCard(lost=True), FakeCard()])
    fake.nvlink(0, 2, 2)
    fake.ancestors[(0, 2)] = NVML_TOPOLOGY_SINGLE
    reading = await nvml_probe(fake).read()
    assert _links(reading.topology) == {(0, 2): Link(2, "PIX")}
    assert reading.cards[1].health == ("GPU is lost (fell off the bus; needs a reset or reboot)",)


async def test_a_topology_call_that_fails_is_noted_once_and_costs_only_its_fact(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(3)])
    fake.nvlink(0, 1, 2)
    fake.cards[2].errors["nvlink_state"] = NVMLError_Unknown
    fake.cards[2].nvlinks = [None]
    reading = await nvml_probe(fake).read()
    assert reading.topology.link(0, 1) == Link(2, "SYS")
    assert reading.external_probe_ok and reading.count == 3
    assert reading.problem == (
        "topology partly not known (NVML could not read card 2: the state of NVLink 0 (Unknown Error) "
        f"and {fake.NVML_NVLINK_MAX_LINKS - 1} more)"
    )


async def test_nvml_reads_the_topology_when_it_starts_and_again_when_the_cards_change(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(3)])
    probe = nvml_probe(fake)
    for _ in range(3):
        assert (await probe.read()).topology.count == 3
    assert fake.calls["topology"] == 2 * 3  # three pairs, once, both cards entered
    fake.cards.append(FakeCard())
    reading = await probe.read()
    assert reading.topology.count == 4 and fake.calls["topology"] == 2 * (3 + 6)


async def test_a_hung_topology_read_is_kept_when_it_ends_and_not_started_again(nvml_probe):
    fake = FakeNvml([FakeCard() for _ in range(2)])
    release = fake.hang("topology")
    probe = nvml_probe(fake, timeout_s=0.2)
    try:
        assert (await probe.read()).problem == "NVML did not answer within 0.2 s"
    finally:
        release.set()

    async def seen():
        while (reading := await probe.read()).problem is not None:
            await asyncio.sleep(0.01)
        return reading

    reading = await asyncio.wait_for(seen(), 5)
    assert reading.topology.link(0, 1) == SYS
    assert fake.calls["topology"] == 2  # the one read, finished on the worker thread


# -- nvidia-smi topo -m ----------------------------------------------------------------------


async def test_smi_reads_topo_m_beside_its_queries(smi):
    smi(GPUS="8")
    reading = await SmiProbe().read()
    assert reading.problem is None and reading.count == 8
    assert set(_links(reading.topology).values()) == {NV18}
    assert reading.topology.numa == (0, 0, 0, 0, 1, 1, 1, 1)


@pytest.mark.parametrize(
    "shape_name, smi_name", [("pcie-2x4", "pcie"), ("cube-mesh", "cube-mesh"), ("pcie-2x4", "old")]
)
async def test_smi_reads_each_shape_as_the_simulated_node_builds_it(smi, shape_name, smi_name):
    smi(GPUS="8", TOPO=smi_name)
    reading = await SmiProbe().read()
    assert _links(reading.topology) == _links(shape(shape_name, 8))
    assert reading.problem is None


@pytest.mark.parametrize(
    "mode, says",
    [
        ("fail", "topology not known (nvidia-smi topo -m: nvidia-smi exited with status 9: NVIDIA-SMI has failed"),
        (
            "junk",
            "topology not known (nvidia-smi topo -m answered what this probe does not understand: "
            "no GPU matrix in it (it begins 'Unable to parse this,",
        ),
        ("empty", "no GPU matrix in it (it begins '')"),
    ],
)
async def test_a_failed_topo_m_leaves_the_topology_unknown_and_the_reading_whole(smi, mode, says):
    smi(MODE_TOPO=mode)
    reading = await SmiProbe().read()
    assert reading.topology is None
    assert reading.count == 2 and reading.external_probe_ok
    assert says in reading.problem and reading.problem.endswith("so cards are placed without it")


async def test_a_hung_topo_m_ends_at_the_deadline_with_the_queries_answered(smi):
    smi(MODE_TOPO="hang")
    probe = SmiProbe(timeout_s=0.5)
    started = time.monotonic()
    reading = await probe.read()
    assert time.monotonic() - started < 0.5 + 1
    assert reading.count == 2 and reading.external_probe_ok and reading.topology is None
    assert reading.problem == (
        "topology not known (nvidia-smi topo -m: nvidia-smi did not answer within 0.5 s), "
        "so cards are placed without it"
    )
    smi(MODE_TOPO="ok")
    while "has not exited" in ((again := await probe.read()).problem or ""):
        await asyncio.sleep(0.05)  # the killed one is reaped first
    assert again.topology is None and again.count == 2  # not asked again before its retry


async def test_smi_reads_topo_m_once_then_again_when_the_cards_change(smi):
    probe = SmiProbe()
    assert (await probe.read()).topology.link(0, 1) == NV18
    smi(TOPO="pcie")
    assert (await probe.read()).topology.link(0, 1) == NV18  # not read again
    smi(GPUS="4")
    stale = await probe.read()  # the count is learned from this reading ...
    assert stale.count == 4 and stale.topology.count == 2
    assert choose([0, 1, 2, 3], 2, stale.topology) == [0, 1]  # a topology of other cards: as pick_gpus
    fresh = await probe.read()  # ... so the next one reads the topology again
    assert fresh.topology.count == 4 and fresh.topology.link(0, 1) == PIX


# -- the simulated node ----------------------------------------------------------------------


async def test_a_scene_names_its_shape(tmp_path):
    path = write_scene(tmp_path / "n.json", 8, topology="cube-mesh")
    reading = await SimulatedProbe(path).read()
    assert reading.topology is shape("cube-mesh", 8) and reading.problem is None
    assert choose(range(8), 4, reading.topology) == [0, 1, 2, 3]


async def test_a_scene_gives_its_matrix(tmp_path):
    links = [["X", "NV4", "SYS"], ["NV4", "X", ""], ["SYS", "", "X"]]
    path = write_scene(tmp_path / "n.json", 3, topology={"links": links, "numa": [0, None, 1]})
    reading = await SimulatedProbe(path).read()
    assert _links(reading.topology) == {(0, 1): Link(4), (0, 2): SYS}
    assert reading.topology.numa == (0, None, 1)


async def test_a_blind_scene_keeps_its_topology(tmp_path):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", 8, blind=True, topology="nvswitch")).read()
    assert not reading.external_probe_ok and reading.topology is shape("nvswitch", 8)


@pytest.mark.parametrize(
    "topology, says",
    [
        ("torus", "'torus' is not a topology: use nvswitch, pcie-2x4, cube-mesh"),
        ("cube-mesh", "the cube mesh has 8 cards, not 2"),
        ({"links": [["X", "NV1"]]}, '"links" must have 2 rows of 2 words'),
        ({"links": [["X", "NV0"], ["NV0", "X"]]}, "card 0's link to card 1: 'NV0' is not a link"),
        ({"links": [["X", 1], [1, "X"]]}, "card 0's link to card 1 must be a word, not 1"),
        ({"links": [["X", "PIX"], ["PIX", "X"]], "numa": [0, -1]}, '"numa" must list 2 NUMA nodes'),
        ([1, 2], 'must name a shape or be {"links"'),
    ],
)
async def test_a_scene_topology_that_cannot_be_used_is_unknown_not_blind(tmp_path, topology, says):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", 2, topology=topology)).read()
    assert reading.topology is None and reading.external_probe_ok and reading.count == 2
    assert reading.problem.startswith('topology not known (the simulated node file\'s "topology": ')
    assert says in reading.problem and reading.problem.endswith("), so cards are placed without it")


# -- when to read again ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _reading(count: int) -> ProbeReading:
    return ProbeReading(source="test", count=count)


def test_a_good_topology_is_kept_until_the_cards_change_or_it_is_old():
    clock = Clock()
    keeper = TopologyKeeper(max_age_s=600, retry_s=60, clock=clock)
    assert keeper.due(8)
    keeper.begin(8)
    keeper.keep(shape("nvswitch", 8), None)
    assert keeper.attach(_reading(8)).topology is shape("nvswitch", 8)
    clock.now += 599
    assert not keeper.due(8) and not keeper.due()
    assert keeper.due(9)
    keeper.attach(_reading(7))
    assert keeper.due()  # the latest reading's count, when the probe cannot tell before reading
    keeper.attach(_reading(8))
    clock.now += 1
    assert keeper.due(8)


def test_a_failed_read_is_said_on_every_reading_and_tried_again_after_the_retry():
    clock = Clock()
    keeper = TopologyKeeper(max_age_s=600, retry_s=60, clock=clock)
    keeper.begin(2)
    keeper.keep(None, "it broke")
    reading = keeper.attach(ProbeReading(source="test", count=2, problem="card 1: no power draw"))
    assert reading.topology is None
    assert reading.problem == "card 1: no power draw; topology not known (it broke), so cards are placed without it"
    clock.now += 59
    assert not keeper.due(2)
    clock.now += 1
    assert keeper.due(2)


def test_a_read_that_never_ends_waits_its_turn():
    clock = Clock()
    keeper = TopologyKeeper(max_age_s=600, retry_s=60, clock=clock)
    keeper.begin(2)
    clock.now += 59
    assert not keeper.due(2)
    clock.now += 541
    assert keeper.due(2)


def test_a_node_without_cards_says_nothing_of_their_wiring():
    keeper = TopologyKeeper()
    keeper.begin()
    keeper.keep(None, "no matrix")
    assert keeper.attach(_reading(0)) == _reading(0)


def test_a_read_again_that_fails_for_the_same_cards_keeps_the_one_before():
    clock = Clock()
    keeper = TopologyKeeper(max_age_s=600, retry_s=60, clock=clock)
    keeper.begin(8)
    keeper.keep(shape("pcie-2x4", 8), None)
    clock.now += 600
    keeper.begin(8)
    keeper.keep(None, "nvidia-smi topo -m: nvidia-smi did not answer within 10 s")
    reading = keeper.attach(_reading(8))
    assert reading.topology is shape("pcie-2x4", 8)
    assert reading.problem == (
        "topology not read again (nvidia-smi topo -m: nvidia-smi did not answer within 10 s): "
        "the one read before is used"
    )
    clock.now += 60
    assert keeper.due(8)  # tried again as soon as a failed read is
    keeper.begin(8)
    keeper.keep(shape("pcie-2x4", 8), None)
    assert keeper.attach(_reading(8)).problem is None
    clock.now += 600
    keeper.begin(9)  # other cards: what was read before is not theirs
    keeper.keep(None, "it broke")
    assert keeper.attach(_reading(9)).topology is None


def test_a_read_begun_without_a_count_learns_it_from_the_reading_beside_it():
    keeper = TopologyKeeper(clock=Clock())
    keeper.begin()  # nvidia-smi: topo -m runs beside the query that counts the cards
    keeper.keep(shape("pcie-2x4", 8), None)
    keeper.attach(_reading(8))
    assert not keeper.due()
    keeper.attach(_reading(9))
    assert keeper.due()
