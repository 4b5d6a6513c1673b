"""The simulated node's topologies, by name: an NVSwitch node, PCIe switches, a DGX-1's cube mesh.

A simulated scene names its wiring (``"topology": "nvswitch"``) instead of
spelling out every pair; tests and benchmarks build the same shapes.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations
from typing import Callable, Optional, Sequence

from tpnode_tui.model.topology import Link, Topology


def hierarchy(count: int, tiers: Sequence[tuple[int, Link]], numa_size: Optional[int] = None) -> Topology:
    """Cards in nested blocks of consecutive indices: ``tiers`` from the innermost,
    each (block size, the link between two cards in one block of that size and
    in none of the tiers before). Two cards in no common block have no link.
    ``numa_size``: consecutive cards per NUMA node (None: not known)."""
    sizes = [size for size, _ in tiers]
    if any(s <= 0 for s in sizes) or sizes != sorted(sizes):
        raise ValueError(f"tier sizes must be positive and ascending, not {sizes}")
    kinds = list(dict.fromkeys(link for _, link in tiers))
    rows = []
    for card in range(count):
        row = bytearray(count)
        for size, link in reversed(tiers):
            start = card // size * size
            end = min(start + size, count)
            row[start:end] = bytes([kinds.index(link) + 1]) * (end - start)
        row[card] = 0
        rows.append(bytes(row))
    numa = tuple(card // numa_size if numa_size else None for card in range(count))
    return Topology(count, tuple(kinds), b"".join(rows), numa)


def nvswitch(count: int = 8, nvlinks: int = 18, sockets: int = 2) -> Topology:
    """A DGX/HGX-style node: every pair through the NVSwitches with ``nvlinks``
    NVLinks (18 on H100 and H200), as ``topo -m`` shows it; the cards split
    evenly over ``sockets`` NUMA nodes."""
    return hierarchy(count, [(max(count, 1), Link(nvlinks))], numa_size=-(-count // sockets) or None)


def pcie(count: int = 8, per_switch: int = 4, sockets: int = 2) -> Topology:
    """A PCIe node: ``per_switch`` cards under each switch (PIX), the switches of
    a socket linked through its host bridges (NODE), sockets across the CPU
    interconnect (SYS); each socket its own NUMA node. The cards fill whole
    switches of the first socket before the next (2 cards: one switch)."""
    switches = max(1, -(-count // per_switch))
    per_socket = -(-switches // sockets) * per_switch  # whole switches, rounded up
    tiers = [(per_switch, Link(pcie="PIX"))]
    if per_socket > per_switch:
        tiers.append((per_socket, Link(pcie="NODE")))
    if count > per_socket:
        tiers.append((count, Link(pcie="SYS")))
    return hierarchy(count, tiers, numa_size=per_socket)


#: The hybrid cube mesh of a DGX-1 with V100s: each card's six NVLinks, one or
#: two to a peer, four peers in its own quad and one in the other; every other
#: pair crosses the sockets (SYS). The wiring as go-gpuallocator's DGX-1 Volta
#: test node and the DGX-1's ``nvidia-smi topo -m`` give it.
CUBE_MESH_NVLINKS = {
    (0, 1): 1,
    (0, 2): 1,
    (0, 3): 2,
    (0, 4): 2,
    (1, 2): 2,
    (1, 3): 1,
    (1, 5): 2,
    (2, 3): 2,
    (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1,
    (4, 6): 1,
    (4, 7): 2,
    (5, 6): 2,
    (5, 7): 1,
    (6, 7): 2,
}


def cube_mesh() -> Topology:
    """The 8-card DGX-1 (V100) hybrid cube mesh: see :data:`CUBE_MESH_NVLINKS`."""
    links = {
        (a, b): Link(CUBE_MESH_NVLINKS[(a, b)]) if (a, b) in CUBE_MESH_NVLINKS else Link(pcie="SYS")
        for a, b in combinations(range(8), 2)
    }
    return Topology.build(8, links, {card: card // 4 for card in range(8)})


def _cube_mesh_of(count: int) -> Topology:
    if count != 8:
        raise ValueError(f"the cube mesh has 8 cards, not {count}")
    return cube_mesh()


#: the simulated node's named shapes, each made for a number of cards
SHAPES: dict[str, Callable[[int], Topology]] = {
    "nvswitch": nvswitch,
    "pcie-2x4": pcie,
    "cube-mesh": _cube_mesh_of,
}


@lru_cache(maxsize=32)
def shape(name: str, count: int) -> Topology:
    """The named shape for ``count`` cards, one object per name and count (so
    what is worked out for it once is kept); ValueError for a name not in SHAPES
    or a count the shape cannot have."""
    if name not in SHAPES:
        raise ValueError(f"{name!r} is not a topology: use {', '.join(SHAPES)}")
    return SHAPES[name](count)
