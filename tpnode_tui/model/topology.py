"""How a node's cards are wired: pairwise links and NUMA nodes, as data.

The placement rules that use it are in :mod:`tpnode_tui.core.placement`; how each
probe reads it, in :mod:`tpnode_tui.probes.wiring`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering
from typing import Mapping, Optional

#: How a launch may require its cards to sit on the node's topology (see
#: tpnode_tui.core.placement.choose): every pair NVLinked or under one PCIe switch
#: (PIX or PXB); or as well connected as the best set of that size on this
#: node when it is empty. Words of the port, so a client needs no topology to say them.
SAME_SWITCH, CONTIGUOUS = "same-switch", "contiguous"


PLACEMENTS = (SAME_SWITCH, CONTIGUOUS)


#: The PCIe paths between two cards as ``nvidia-smi topo -m``'s legend names them,
#: fastest first: through at most one PCIe bridge (one switch); through several
#: bridges but no host bridge; through a host bridge (typically the CPU); between
#: the host bridges of one NUMA node; across the interconnect between NUMA nodes.
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@total_ordering
@dataclass(frozen=True)
class Link:
    """How two cards reach each other: their NVLinks, and the PCIe path where known.

    ``nvidia-smi topo -m`` shows one word a pair, its fastest path: ``NV18``
    (18 bonded NVLinks, directly or through NVSwitches), else the PCIe path
    (``PIX`` ... ``SYS``). NVML tells both, so a link carries both: ``nvlinks``
    is always known (0: none), ``pcie`` may be unknown (``None``) only beside
    NVLinks, because a pair the driver said nothing about has no Link at all.

    Links are ordered by speed, slowest first, so ``max`` is the fastest: more
    NVLinks beat fewer, any NVLink beats any PCIe path, and between equal
    NVLinks the shorter PCIe path is faster (a known path beats an unknown one).
    """

    #: bonded NVLinks between the two, directly or through NVSwitches; 0: none
    nvlinks: int = 0
    #: one of PCIE_PATHS, or None where not known
    pcie: Optional[str] = None

    def __post_init__(self) -> None:
        if self.nvlinks < 0 or (self.pcie is not None and self.pcie not in PCIE_PATHS):
            raise ValueError(f"not a link: {self.nvlinks} NVLinks, PCIe path {self.pcie!r}")
        if self.nvlinks == 0 and self.pcie is None:
            raise ValueError("a link with no NVLink and no known PCIe path says nothing: leave the pair out")

    @property
    def word(self) -> str:
        """The link as ``nvidia-smi topo -m`` shows it: "NV18", "PIX", "SYS"."""
        return f"NV{self.nvlinks}" if self.nvlinks else str(self.pcie)

    def _speed(self) -> tuple[int, int]:
        path = -1 if self.pcie is None else len(PCIE_PATHS) - PCIE_PATHS.index(self.pcie)
        return self.nvlinks, path

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Link):
            return NotImplemented
        return self._speed() < other._speed()


@dataclass(frozen=True)
class Topology:
    """How the cards of a node are connected to each other: hardware, not occupancy.

    Cards are 0 .. ``count - 1``. A pair the driver said nothing about has no
    link (:meth:`link` is None) and a card whose NUMA node is not known has
    ``None``: unknown is neither "far" nor "near", and what placement makes of
    it is :mod:`~tpnode_tui.core.placement`'s to say. A card with nothing known at all
    is allowed.

    The links are kept as one byte a pair, ``matrix[a * count + b]``: 0 where
    nothing is known (and on the diagonal), else ``k`` for ``kinds[k - 1]``.
    A node has only a handful of kinds of link, while 1024 cards have half a
    million pairs: as a byte string they cost a megabyte, and a reading that is
    walked on its way to the screen (every string made printable) walks the
    few kinds, not every pair. Build one with :meth:`build`.
    """

    count: int
    #: every kind of link on the node, once each (at most 250, so a kind fits in a byte with room to spare)
    kinds: tuple[Link, ...]
    #: ``count * count`` bytes, symmetric: which kind links each pair (see above)
    matrix: bytes
    #: each card's NUMA node (the CPU side, as ``topo -m``'s "NUMA Affinity"); None: not known
    numa: tuple[Optional[int], ...]

    def __post_init__(self) -> None:
        if (
            self.count < 0
            or len(self.matrix) != self.count * self.count
            or len(self.numa) != self.count
            or len(self.kinds) > 250
            or (self.matrix and max(self.matrix) > len(self.kinds))
        ):
            raise ValueError(
                f"not a topology of {self.count} cards: {len(self.matrix)} matrix bytes, "
                f"{len(self.numa)} NUMA nodes, {len(self.kinds)} kinds of link"
            )

    @classmethod
    def build(
        cls, count: int, links: Mapping[tuple[int, int], Link], numa: Optional[Mapping[int, int]] = None
    ) -> Topology:
        """A topology from its pairs' links (either order; where both orders are
        given and differ, the slower counts, so a pair is never promised faster
        than both of its ends said) and the cards' NUMA nodes."""
        kinds: list[Link] = []
        index: dict[Link, int] = {}
        matrix = bytearray(count * count)
        for (a, b), link in links.items():
            if not (0 <= a < count and 0 <= b < count) or a == b:
                raise ValueError(f"no pair of distinct cards {a} and {b} among {count} cards")
            if link not in index:
                kinds.append(link)
                index[link] = len(kinds)
            known = matrix[a * count + b]
            if not known or link < kinds[known - 1]:
                matrix[a * count + b] = matrix[b * count + a] = index[link]
        nodes = numa or {}
        return cls(count, tuple(kinds), bytes(matrix), tuple(nodes.get(card) for card in range(count)))

    def link(self, a: int, b: int) -> Optional[Link]:
        """How cards ``a`` and ``b`` are linked; None when not known (or not two cards of this node)."""
        if a == b or not (0 <= a < self.count and 0 <= b < self.count):
            return None
        kind = self.matrix[a * self.count + b]
        return self.kinds[kind - 1] if kind else None
