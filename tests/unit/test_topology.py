"""Topology-aware placement (pure) and the ``nvidia-smi topo -m`` parser."""

from __future__ import annotations

import gc
import weakref
from itertools import combinations, permutations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers.placement import grouped_search, set_points
from tpnode_tui.core.placement import choose, pair_points, pick_gpus
from tpnode_tui.model.errors import BadRequest, NeverFits, NoCapacity
from tpnode_tui.model.topology import CONTIGUOUS, SAME_SWITCH, Link, Topology
from tpnode_tui.probes.shapes import cube_mesh, hierarchy, pcie, shape
from tpnode_tui.probes.topo_matrix import TopologyError, link_from_word, parse_topo_matrix

NV18, NV2, NV1 = Link(18), Link(2), Link(1)
PIX, PXB, PHB, NODE, SYS = (Link(pcie=p) for p in ("PIX", "PXB", "PHB", "NODE", "SYS"))


# -- links and topologies ------------------------------------------------------------


def test_links_are_ordered_by_speed_as_topo_m_ranks_them():
    ladder = [NV18, NV2, Link(1, "PIX"), Link(1, "SYS"), NV1, PIX, PXB, PHB, NODE, SYS]
    assert sorted(reversed(ladder), reverse=True) == ladder
    assert max(SYS, NV1, PIX) == NV1
    assert [link.word for link in (NV18, Link(2, "SYS"), PXB)] == ["NV18", "NV2", "PXB"]


@pytest.mark.parametrize("nvlinks, path", [(0, None), (-1, "PIX"), (0, "QPI")])
def test_a_link_that_says_nothing_or_nonsense_is_refused(nvlinks, path):
    with pytest.raises(ValueError):
        Link(nvlinks, path)


def test_a_topology_is_symmetric_and_keeps_the_slower_of_two_answers():
    topology = Topology.build(3, {(0, 1): NV2, (1, 0): PIX, (2, 1): SYS}, {0: 0, 2: 1})
    assert topology.link(0, 1) == topology.link(1, 0) == PIX
    assert topology.link(1, 2) == SYS
    assert topology.link(0, 2) is None and topology.link(0, 0) is None and topology.link(0, 7) is None
    assert topology.numa == (0, None, 1)
    assert len(topology.matrix) == 9 and len(topology.kinds) <= 3


def test_a_topology_that_does_not_add_up_is_refused():
    with pytest.raises(ValueError):
        Topology(2, (NV1,), b"\x00\x01\x01", (None, None))
    with pytest.raises(ValueError):
        Topology(2, (NV1,), b"\x00\x02\x02\x00", (None, None))
    with pytest.raises(ValueError):
        Topology.build(2, {(0, 0): NV1})


def test_points_follow_go_gpuallocator_and_unknown_pairs_what_numa_shows():
    topology = Topology.build(4, {(0, 1): Link(2, "PIX"), (0, 2): NV18}, {0: 0, 1: 0, 2: 0, 3: 1})
    assert pair_points(topology, 0, 1) == 250 and pair_points(topology, 0, 2) == 1800
    assert pair_points(topology, 1, 2) == 20  # unknown, one NUMA node: at worst NODE
    assert pair_points(topology, 1, 3) == 10  # unknown, two NUMA nodes: SYS
    assert pair_points(Topology.build(2, {}), 0, 1) == 0
    assert set_points(topology, [0, 1, 2]) == 250 + 1800 + 20


def test_the_shapes():
    cube = cube_mesh()
    assert [cube.link(0, b) for b in range(1, 8)] == [NV1, NV1, NV2, NV2, SYS, SYS, SYS]
    # six NVLinks a card, as a V100 has
    assert all(sum(cube.link(a, b).nvlinks for b in range(8) if b != a) == 6 for a in range(8))
    node = pcie(16)
    assert (node.link(0, 3), node.link(0, 4), node.link(0, 8)) == (PIX, NODE, SYS)
    assert node.numa == (0,) * 8 + (1,) * 8
    assert pcie(2).link(0, 1) == PIX  # a small node fills one switch first
    h200 = shape("nvswitch", 8)
    assert {h200.link(a, b) for a, b in combinations(range(8), 2)} == {NV18}
    assert shape("nvswitch", 8) is h200
    with pytest.raises(ValueError, match="8 cards"):
        shape("cube-mesh", 4)
    with pytest.raises(ValueError, match="not a topology"):
        shape("torus", 8)


# -- choosing ---------------------------------------------------------------------------


def test_the_smallest_free_group_that_fits_is_taken_whole_groups_stay_free():
    node = pcie()  # 0-3 under one switch, 4-7 under another
    assert choose([0, 1, 2, 3, 4, 5], 2, node) == [4, 5]
    assert choose([0, 1, 2, 3, 4, 5], 1, node) == [4]
    assert choose([0, 1, 2, 3, 4, 5], 4, node) == [0, 1, 2, 3]
    assert choose([0, 1, 2, 3, 4, 5], 3, node) == [0, 1, 2]


def test_on_the_cube_mesh_the_doubly_linked_pairs_and_the_quads_win():
    cube = cube_mesh()
    assert choose(range(8), 2, cube) == [1, 2]  # NV2; of those, consecutive first
    assert choose(range(8), 4, cube) == [0, 1, 2, 3]
    assert choose([0, 2, 4, 5], 2, cube) == [0, 4]  # the one NV2 pair beats NV1 pairs
    assert choose([1, 3, 4, 6], 2, cube) == [1, 3]


def test_the_job_asking_now_gets_the_best_set_even_if_a_partition_would_score_more():
    """go-gpuallocator would hand out 4 and 5 here (its best partition of the free
    cards into pairs is {0,2}, {4,5}); this gives the job in front of it the NV2 pair."""
    assert choose([0, 2, 4, 5], 2, cube_mesh()) == [0, 4]


def test_nothing_known_places_as_pick_gpus_and_numa_still_counts():
    blank = Topology.build(8, {})
    for free, count in (([0, 3, 4, 5, 7], 3), ([7, 1, 2], 2), ([0, 3, 5, 7], 3), ([2, 6], 1)):
        assert choose(free, count, blank) == pick_gpus(free, count)
    sockets = Topology.build(4, {}, {0: 0, 1: 0, 2: 1, 3: 1})
    assert choose([0, 2, 3], 2, sockets) == [2, 3]


def test_a_card_nothing_is_known_about_is_placed_when_nothing_better_is_free():
    links = {(a, b): PIX for a, b in combinations(range(3), 2)}
    node = Topology.build(4, links)
    assert choose([0, 1, 2, 3], 2, node) == [0, 1]
    assert choose([0, 3], 2, node) == [0, 3]
    with pytest.raises(NoCapacity):
        choose([0, 3], 2, node, SAME_SWITCH)


@given(
    free=st.lists(st.integers(0, 40), max_size=12),
    count=st.integers(-1, 6),
)
def test_without_a_topology_it_is_pick_gpus(free, count):
    try:
        expected = pick_gpus(free, count)
    except NoCapacity as e:
        with pytest.raises(NoCapacity, match=str(e)):
            choose(free, count, None)
        return
    assert choose(free, count, None) == expected
    # a topology of fewer cards than the free ones describes another node
    assert choose(free, count, pcie(4) if any(c >= 4 for c in free) else None) == expected


def test_same_switch():
    node = pcie()
    assert choose([0, 1, 4, 5, 6], 3, node, SAME_SWITCH) == [4, 5, 6]
    assert choose([0, 1, 4, 5, 6], 1, node, SAME_SWITCH) == [0]
    with pytest.raises(NoCapacity, match="no 4 cards all linked by NVLink or under one PCIe switch are free now"):
        choose([0, 1, 4, 5, 6], 4, node, SAME_SWITCH)
    with pytest.raises(NeverFits, match="this node has no 5 cards all linked by NVLink"):
        choose(range(8), 5, node, SAME_SWITCH)
    assert choose(range(8), 4, cube_mesh(), SAME_SWITCH) == [0, 1, 2, 3]
    with pytest.raises(NeverFits):
        choose(range(8), 5, cube_mesh(), SAME_SWITCH)
    assert choose(range(8), 8, shape("nvswitch", 8), SAME_SWITCH) == list(range(8))


def test_contiguous():
    node = pcie()
    # a PIX pair; of those, the one that leaves the 3 free under the other switch together
    assert choose([0, 1, 4, 5, 6], 2, node, CONTIGUOUS) == [0, 1]
    with pytest.raises(NoCapacity, match="as well connected as the best set of that size"):
        choose([0, 1, 4, 5, 6], 4, node, CONTIGUOUS)  # only a whole switch will do
    with pytest.raises(NoCapacity):
        choose([0, 1, 4, 5, 6], 5, node, CONTIGUOUS)  # 4 + 1 is the best 5, 3 + 2 is not
    assert choose([0, 1, 2, 3, 6, 7], 5, node, CONTIGUOUS) == [0, 1, 2, 3, 6]  # 4 + 1
    with pytest.raises(NeverFits):
        choose(range(8), 9, node, CONTIGUOUS)


def test_requirements_without_a_topology_wait_for_it_to_be_read():
    with pytest.raises(NoCapacity, match="topology is not known now"):
        choose(range(8), 2, None, SAME_SWITCH)
    with pytest.raises(BadRequest, match="not a placement requirement"):
        choose(range(8), 2, pcie(), "nearby")
    assert choose(range(8), 0, None, SAME_SWITCH) == []


def test_what_is_worked_out_for_a_topology_goes_with_it():
    """A probe reads a new topology every 10 minutes: the old ones must not pile up."""
    topology = pcie(16)
    assert choose(range(16), 4, topology, exhaustive_limit=0) == [0, 1, 2, 3]
    gone = weakref.ref(topology)
    del topology
    gc.collect()
    assert gone() is None


# -- choosing against every set --------------------------------------------------------

_WORDS = ["NV1", "NV2", "NV4", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", None]


@st.composite
def topologies(draw, max_cards=7):
    """Any small topology: each pair any link or none, each card any NUMA node or none."""
    n = draw(st.integers(1, max_cards))
    links = {}
    for a, b in combinations(range(n), 2):
        word = draw(st.sampled_from(_WORDS))
        if word is not None:
            links[(a, b)] = link_from_word(word)
    numa = {c: node for c in range(n) if (node := draw(st.sampled_from([0, 1, None]))) is not None}
    return Topology.build(n, links, numa)


@st.composite
def hierarchies(draw, max_cards=9):
    """A hierarchical topology (NVLink or switch groups inside NUMA nodes inside the
    node: nested blocks, faster inside), its cards numbered in any order."""
    sizes = [1]
    for factor in draw(st.lists(st.integers(2, 3), min_size=1, max_size=3)):
        sizes.append(sizes[-1] * factor)
    sizes = sizes[1:]
    n = draw(st.integers(1, min(max_cards, sizes[-1])))
    words = draw(st.lists(st.sampled_from(_WORDS[:-1]), min_size=len(sizes), max_size=len(sizes), unique=True))
    tiers = list(zip(sizes, sorted(map(link_from_word, words), reverse=True)))
    blocks = hierarchy(n, tiers, numa_size=draw(st.sampled_from([None, *sizes])))
    order = draw(st.permutations(range(n)))
    links = {(order[a], order[b]): blocks.link(a, b) for a, b in combinations(range(n), 2) if blocks.link(a, b)}
    numa = {order[c]: node for c, node in enumerate(blocks.numa) if node is not None}
    return Topology.build(n, links, numa)


def _best(topology, free, count, same_switch=False):
    """Every set of ``count`` free cards, scored: the best (points, minus the points
    to the free cards left), or None when no set qualifies."""
    values = []
    for combo in combinations(sorted(free), count):
        if same_switch and any(pair_points(topology, a, b) < 40 for a, b in combinations(combo, 2)):
            continue
        values.append(_value(topology, free, combo))
    return max(values, default=None)


def _value(topology, free, chosen):
    left = sum(pair_points(topology, a, b) for a in chosen for b in free if b != a)
    return set_points(topology, chosen), -left


def _check(topology, free, count, require, limit):
    """choose's answer is the best set (or the right refusal), by every set."""
    on_node = _best(topology, range(topology.count), count, require == SAME_SWITCH)
    now = _best(topology, free, count, require == SAME_SWITCH) if len(free) >= count else None
    try:
        got = choose(free, count, topology, require, exhaustive_limit=limit)
    except NeverFits:
        assert require is not None and on_node is None
        return None
    except NoCapacity:
        assert now is None or (require == CONTIGUOUS and now[0] < on_node[0])
        return None
    assert len(got) == count == len(set(got)) and set(got) <= set(free) and got == sorted(got)
    if require == CONTIGUOUS:
        assert set_points(topology, got) == on_node[0]
    return got, now


@settings(max_examples=300, deadline=None)
@given(topology=topologies(), data=st.data(), require=st.sampled_from([None, SAME_SWITCH, CONTIGUOUS]))
def test_the_chosen_set_is_the_best_of_every_set(topology, data, require):
    free = data.draw(st.sets(st.integers(0, topology.count - 1)))
    count = data.draw(st.integers(1, topology.count))
    checked = _check(topology, free, count, require, limit=10**6)
    if checked is not None:
        got, best = checked
        assert _value(topology, free, got) == best  # the best score, and of those the least fragmenting


@settings(max_examples=300, deadline=None)
@given(topology=hierarchies(), data=st.data(), require=st.sampled_from([None, SAME_SWITCH, CONTIGUOUS]))
def test_on_a_hierarchy_the_grouped_search_is_as_good_as_every_set(topology, data, require):
    assert grouped_search(topology) == "tree"
    free = data.draw(st.sets(st.integers(0, topology.count - 1)))
    count = data.draw(st.integers(1, topology.count))
    checked = _check(topology, free, count, require, limit=0)
    if checked is not None:
        got, best = checked
        assert _value(topology, free, got) == best


@settings(max_examples=300, deadline=None)
@given(topology=topologies(max_cards=9), data=st.data(), require=st.sampled_from([None, SAME_SWITCH, CONTIGUOUS]))
def test_groups_that_are_no_hierarchy_are_searched_set_by_set_and_as_well(topology, data, require):
    assert grouped_search(topology) in ("tree", "tree of blocks")
    free = data.draw(st.sets(st.integers(0, topology.count - 1)))
    count = data.draw(st.integers(1, topology.count))
    checked = _check(topology, free, count, require, limit=0)
    if checked is not None:
        got, best = checked
        assert _value(topology, free, got) == best


@settings(max_examples=100, deadline=None)
@given(
    topology=topologies(max_cards=14).filter(lambda t: t.count > 10),
    data=st.data(),
    require=st.sampled_from([None, SAME_SWITCH, CONTIGUOUS]),
)
def test_without_a_hierarchy_the_greedy_search_still_gives_a_valid_set(topology, data, require):
    """No optimum is promised there (a big node with a big group that is no
    hierarchy is rare), only a set of the right size that meets the
    requirement, or a refusal."""
    assume(grouped_search(topology) == "greedy")
    free = data.draw(st.sets(st.integers(0, topology.count - 1)))
    count = data.draw(st.integers(1, topology.count))
    try:
        got = choose(free, count, topology, require, exhaustive_limit=0)
    except (NoCapacity, NeverFits):
        return
    assert len(got) == count == len(set(got)) and set(got) <= set(free)
    if require == SAME_SWITCH:
        assert all(pair_points(topology, a, b) >= 40 for a, b in combinations(got, 2))


def test_how_each_shape_is_searched_once_its_sets_are_too_many():
    assert grouped_search(pcie()) == grouped_search(Topology.build(3, {})) == "tree"
    assert grouped_search(cube_mesh()) == "tree of blocks"
    meshes = Topology.build(
        16,
        {
            (a, b): cube_mesh().link(a % 8, b % 8) or SYS if a // 8 == b // 8 else SYS
            for a, b in combinations(range(16), 2)
        },
    )
    assert grouped_search(meshes) == "tree of blocks"
    assert choose(range(16), 4, meshes, exhaustive_limit=0) == [0, 1, 2, 3]
    # the quad left free in the first mesh, so the second stays whole
    assert choose(range(3, 16), 4, meshes, SAME_SWITCH, exhaustive_limit=0) == [4, 5, 6, 7]
    # 13 cards in a ring of NV2, the other pairs NV1 or SYS: one group, no hierarchy, too big for set by set
    ring = Topology.build(
        13,
        {
            (a, b): NV2 if (b - a) % 13 in (1, 12) else (NV1 if (a + b) % 2 else SYS)
            for a, b in combinations(range(13), 2)
        },
    )
    assert grouped_search(ring) == "greedy"
    assert set_points(ring, choose(range(13), 3, ring, exhaustive_limit=0)) == 500  # two NV2 and one NV1: the best


def test_a_big_hierarchical_node_is_searched_on_its_tree():
    node = hierarchy(1024, [(8, NV18), (512, NODE), (1024, SYS)], numa_size=512)
    free = [c for c in range(1024) if c % 8 != 0 or c == 512]  # every board but one has 7 free
    got = choose(free, 8, node)
    assert got == list(range(512, 520))  # the one whole board
    assert choose(free, 7, node) == list(range(1, 8))
    with pytest.raises(NeverFits):
        choose(free, 9, node, SAME_SWITCH)
    with pytest.raises(NoCapacity):
        choose([c for c in free if c != 515], 8, node, CONTIGUOUS)


# -- nvidia-smi topo -m -------------------------------------------------------------------

#: public captures of real nodes' ``nvidia-smi topo -m``, legends shortened
H100_NICS = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\t48-63,176-191\t3\n"
    "GPU1\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\t48-63,176-191\t3\n"
    "GPU2\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tSYS\tSYS\tPXB\tPXB\t16-31,144-159\t1\n"
    "GPU3\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tNV12\tSYS\tSYS\tPXB\tPXB\t16-31,144-159\t1\n"
    "GPU4\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tNV12\tSYS\tSYS\tSYS\tSYS\t112-127,240-255\t7\n"
    "GPU5\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tNV12\tSYS\tSYS\tSYS\tSYS\t112-127,240-255\t7\n"
    "GPU6\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tNV12\tSYS\tSYS\tSYS\tSYS\t80-95,208-223\t5\n"
    "GPU7\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\t X \tSYS\tSYS\tSYS\tSYS\t80-95,208-223\t5\n"
    "NIC0\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPXB\tSYS\tSYS\t\t\n"
    "NIC1\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\t X \tSYS\tSYS\t\t\n"
    "NIC2\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPXB\t\t\n"
    "NIC3\tSYS\tSYS\tPXB\tPXB\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPXB\t X \t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
)
PCIE_8 = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNODE\tNODE\tNODE\tNODE\tNODE\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU1\tNODE\t X \tPHB\tNODE\tNODE\tNODE\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU2\tNODE\tPHB\t X \tNODE\tNODE\tNODE\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU3\tNODE\tNODE\tNODE\t X \tPHB\tNODE\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU4\tNODE\tNODE\tNODE\tPHB\t X \tNODE\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU5\tNODE\tNODE\tNODE\tNODE\tNODE\t X \tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU6\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tPHB\t16-31,48-63\t1\t\tN/A\n"
    "GPU7\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPHB\t X \t16-31,48-63\t1\t\tN/A\n"
    "\n"
    "Legend:\n"
)
STATION = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tCPU Affinity\n"
    "GPU0\t X \tNV1\tNV1\tNV2\tSYS\t0-15\n"
    "GPU1\tNV1\t X \tNV2\tNV1\tSYS\t0-15\n"
    "GPU2\tNV1\tNV2\t X \tNV2\tSYS\t0-15\n"
    "GPU3\tNV2\tNV1\tNV2\t X \tSYS\t0-15\n"
    "mlx5_0\tSYS\tSYS\tSYS\tSYS\t X \t\n"
    "\n"
    "Legend:\n"
)


def test_parses_an_nvlinked_node_with_nics():
    topology = parse_topo_matrix(H100_NICS)
    assert topology.count == 8
    assert {topology.link(a, b) for a, b in combinations(range(8), 2)} == {Link(12)}
    assert topology.numa == (3, 3, 1, 1, 7, 7, 5, 5)


def test_parses_a_pcie_node_and_its_numa_nodes_past_the_empty_cell():
    topology = parse_topo_matrix(PCIE_8)
    assert (topology.link(1, 2), topology.link(0, 1), topology.link(0, 6), topology.link(6, 7)) == (PHB, NODE, SYS, PHB)
    assert topology.numa == (0,) * 6 + (1, 1)
    assert choose(range(8), 2, topology) == [6, 7]  # PHB, and it leaves the rest together


def test_parses_an_older_drivers_table_without_numa_columns():
    topology = parse_topo_matrix(STATION)
    assert (topology.link(0, 3), topology.link(0, 1), topology.link(1, 2)) == (NV2, NV1, NV2)
    assert topology.numa == (None,) * 4


def test_terminal_escapes_unknown_words_and_columns_are_tolerated():
    text = (
        "\x1b[4m\tGPU0\tGPU1\tGPU2\tC2C0\tCPU Affinity\tNUMA Affinity\tFuture Column\x1b[0m\n"
        "GPU0\t X \tNV18\tXYZ\tC2C\t0-7\t0\tsomething\n"
        "GPU1\tNV18\t X \tSOC\tC2C\t0-7\t0\tsomething\n"
        "GPU2\tXYZ\tSOC\t X \n"
        "C2C0\tC2C\tC2C\tC2C\t X \t\t\n"
    )
    topology = parse_topo_matrix(text)
    assert (topology.link(0, 1), topology.link(1, 2), topology.link(0, 2)) == (NV18, SYS, None)
    assert topology.numa == (0, 0, None)


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "no GPU matrix in it (it begins '')"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            'no GPU matrix in it (it begins "NVIDIA-SMI has failed because it couldn\'t communicate wit...")',
        ),
        ("\tGPU0\tGPU1\n", "its header names no GPU that has a row"),
        ("\tGPU99999\nGPU99999\t X \n", "more cards than the 4096"),
    ],
)
def test_text_that_is_no_matrix_says_why(text, says):
    with pytest.raises(TopologyError) as raised:
        parse_topo_matrix(text)
    assert says in str(raised.value)


_PIECES = st.sampled_from(
    [
        "\t",
        "\n",
        " X ",
        "GPU0",
        "GPU1",
        "GPU3",
        "NV18",
        "NV0",
        "NV999",
        "PIX",
        "SYS",
        "SOC",
        "NIC0",
        "CPU Affinity",
        "NUMA Affinity",
        "0-15",
        "0",
        "N/A",
        "Legend:",
        "\x1b[4m",
        "٣",
    ]
)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.lists(_PIECES, max_size=60).map("".join)))
def test_any_text_gives_a_topology_or_a_topology_error(text):
    try:
        topology = parse_topo_matrix(text)
    except TopologyError:
        return
    assert 1 <= topology.count <= 4096
    assert all(node is None or node >= 0 for node in topology.numa)


def test_the_parser_reads_back_what_a_topology_says():
    for topology in (cube_mesh(), pcie(), shape("nvswitch", 4)):
        n = topology.count
        header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
        rows = "".join(
            f"GPU{a}\t"
            + "\t".join(" X " if a == b else topology.link(a, b).word for b in range(n))
            + f"\t0-7\t{topology.numa[a]}\n"
            for a in range(n)
        )
        parsed = parse_topo_matrix(header + rows)
        for a, b in permutations(range(n), 2):
            assert parsed.link(a, b).word == topology.link(a, b).word
        assert parsed.numa == topology.numa
