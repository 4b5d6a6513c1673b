"""Section 7: topology-aware placement, against every set and against the clock.

- 8 cards, the three simulated shapes (DGX-style NVSwitch, 2-socket PCIe with
  4 cards a switch, the DGX-1 hybrid cube mesh): for every free-card pattern
  (all 256) and every count from 1 to the free count, ``choose``'s set scores
  what the best of every set of that size scores (the sets scored here, by
  ``set_points``, not by the search under test). Counted as mismatches, which
  must be 0. The same again with the grouped search forced
  (``exhaustive_limit=0``): on the tree for NVSwitch and PCIe; for the cube
  mesh, which is no hierarchy, one block searched set by set. Every ``choose``
  is timed on its own, after one untimed call per shape that works out its
  plan: in the CPU time of this thread (what the search itself costs; on a
  shared machine a call that is preempted waits 4 ms and more for the CPU,
  which says nothing about the search), and the slowest by the wall clock too.
- For scale: 64 cards (8 NVSwitch boards of 8 in 2 sockets, and 8 cube meshes
  joined across the sockets) against every set for counts 1 to 3, and 1024
  cards (128 boards of 8) timed for counts 1 to 64; random free patterns
  (seeded), each card free with probability 1/2. The plan for a new topology
  (once per topology read) is timed apart.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from itertools import combinations
from typing import Callable, Optional

from common import Limit, Row, Section, percentile
from helpers.placement import grouped_search, set_points
from tpnode_tui.core.placement import choose
from tpnode_tui.model.errors import NoCapacity
from tpnode_tui.model.topology import Link, Topology
from tpnode_tui.probes.shapes import hierarchy, shape

TITLE = "7. Topology-aware placement: chosen set vs every set, time per choose"
SHAPES = ("nvswitch", "pcie-2x4", "cube-mesh")
SEED = 16


def _best(topology: Topology, free: list[int], count: int) -> int:
    return max(set_points(topology, combo) for combo in combinations(free, count))


class _Times:
    """Microseconds per call: in this thread's CPU time, and by the wall clock."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def call(self, free: list[int], count: int, topology: Topology, **kw: int) -> Optional[list[int]]:
        """choose's answer (None for NoCapacity), timed."""
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            got: Optional[list[int]] = choose(free, count, topology, **kw)
        except NoCapacity:
            got = None
        self.cpu.append((time.thread_time_ns() - cpu) / 1000)
        self.wall.append((time.perf_counter_ns() - wall) / 1000)
        return got


def _against_every_set(
    topology: Topology, patterns: list[list[int]], counts: Callable[[list[int]], range], limit: Optional[int]
) -> tuple[int, _Times]:
    """Mismatches over the patterns, and the time of each choose."""
    kw = {} if limit is None else {"exhaustive_limit": limit}
    choose(range(topology.count), 2, topology, **kw)  # the plan, untimed
    gc.collect()
    mismatches, times = 0, _Times()
    for free in patterns:
        for count in counts(free):
            got = times.call(free, count, topology, **kw)
            if got is None or set_points(topology, got) != _best(topology, free, count):
                mismatches += 1
    return mismatches, times


def _rows(section: Section, key: str, label: str, times: _Times) -> Row:
    """Median, p99 and max CPU time, and the slowest by the wall clock, as rows; the CPU max's row."""
    worst = Row(f"{key}_max_us", f"{label}: max", [max(times.cpu)], "us")
    section.rows += [
        Row(f"{key}_median_us", f"{label}: median", [statistics.median(times.cpu)], "us"),
        Row(f"{key}_p99_us", f"{label}: p99", [percentile(times.cpu, 99)], "us"),
        worst,
        Row(f"{key}_wall_max_us", f"{label}: max by the wall clock", [max(times.wall)], "us"),
    ]
    return worst


def _boards(count: int, sockets: int = 2) -> Topology:
    """NVSwitch boards of 8 cards (NV18), the boards of a socket NODE, sockets SYS."""
    per_socket = count // sockets
    tiers = [(8, Link(18)), (per_socket, Link(pcie="NODE")), (count, Link(pcie="SYS"))]
    return hierarchy(count, tiers, numa_size=per_socket)


def _meshes(count: int) -> Topology:
    """Cube meshes of 8 side by side, every pair across two meshes SYS."""
    mesh = shape("cube-mesh", 8)
    links = {}
    for a, b in combinations(range(count), 2):
        links[(a, b)] = mesh.link(a % 8, b % 8) if a // 8 == b // 8 else Link(pcie="SYS")
    return Topology.build(count, links, {c: c // (count // 2) for c in range(count)})


def _random_patterns(rng: random.Random, count: int, patterns: int) -> list[list[int]]:
    return [[c for c in range(count) if rng.random() < 0.5] for _ in range(patterns)]


def _plan_us(topology: Topology) -> float:
    """The first choose on a topology, which works out its plan."""
    start = time.perf_counter_ns()
    choose(range(topology.count), 2, topology)
    return (time.perf_counter_ns() - start) / 1000


def run(quick: bool) -> Section:
    section = Section(TITLE)
    rng = random.Random(SEED)
    all_patterns = [[c for c in range(8) if mask >> c & 1] for mask in range(256)]

    def every_count(free: list[int]) -> range:
        return range(1, len(free) + 1)

    def one_to_three(free: list[int]) -> range:
        return range(1, min(3, len(free)) + 1)

    total_mismatches = 0
    all_times = _Times()
    for name in SHAPES:
        topology = shape(name, 8)
        mismatches, times = _against_every_set(topology, all_patterns, every_count, None)
        forced, forced_times = _against_every_set(topology, all_patterns, every_count, 0)
        total_mismatches += mismatches
        all_times.cpu += times.cpu
        all_times.wall += times.wall
        label = f"{name}, 8 cards"
        chooses = len(times.cpu)
        section.rows.append(
            Row(f"topology_mismatches_{name}", f"{label}: mismatches in {chooses} chooses", [mismatches], "sets")
        )
        _rows(section, f"topology_choose_{name}", f"{label}, choose", times)
        forced_label = f"{label}, grouped search forced ({grouped_search(topology)})"
        section.rows.append(Row(f"topology_forced_mismatches_{name}", f"{forced_label}: mismatches", [forced], "sets"))
        _rows(section, f"topology_forced_{name}", forced_label, forced_times)
    summed = Row("topology_mismatches_8", "all three 8-card shapes: mismatches", [total_mismatches], "sets")
    max8 = _rows(section, "topology_choose_8", "all three 8-card shapes, choose", all_times)
    section.rows.append(summed)
    section.limits += [
        Limit("8 cards: chosen score below the best of every set (sets)", summed, 0, inclusive=True),
        Limit("8 cards: slowest choose, CPU time (us)", max8, 1000),
    ]

    patterns = 10 if quick else 40
    for key, label, topology in (
        ("boards64", "64 cards, 8 NVSwitch boards", _boards(64)),
        ("meshes64", "64 cards, 8 cube meshes", _meshes(64)),
    ):
        plan_us = _plan_us(topology)
        mismatches, times = _against_every_set(topology, _random_patterns(rng, 64, patterns), one_to_three, None)
        chooses = len(times.cpu)
        section.rows.append(
            Row(f"topology_mismatches_{key}", f"{label}, counts 1-3: mismatches in {chooses}", [mismatches], "sets")
        )
        _rows(section, f"topology_choose_{key}", f"{label}, counts 1-3, choose", times)
        section.rows.append(Row(f"topology_plan_{key}_us", f"{label}: plan, once per topology", [plan_us], "us"))
        section.notes.append(f"{label}: searched by {grouped_search(topology)} once its sets are too many")

    big = _boards(1024)
    label = "1024 cards, 128 NVSwitch boards"
    section.rows.append(Row("topology_plan_1024_us", f"{label}: plan, once per topology", [_plan_us(big)], "us"))
    frees = _random_patterns(rng, 1024, 5 if quick else 20)
    gc.collect()
    for count in (1, 2, 4, 8, 64):
        times = _Times()
        for free in frees:
            times.call(free, count, big)
        _rows(section, f"topology_choose_1024_{count}", f"{label}, count {count}, choose", times)

    section.notes += [
        "every 8-card choose is checked against the best of every set of its size; 64 cards for counts 1-3 only",
        "times are this thread's CPU time per call unless 'by the wall clock'; the machine is shared",
    ]
    return section
