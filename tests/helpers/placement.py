"""What the placement tests and the topology bench check the search with, apart from the search itself.

``set_points`` scores a set by summing its pairs, as the search's scores are
defined, so a test can compare the chosen set with every set of that size;
``grouped_search`` says which search :func:`~tpnode_tui.core.placement.choose`
uses on a topology once its sets are too many to score one by one.
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable

from tpnode_tui.core.placement import _plan, pair_points
from tpnode_tui.model.topology import Topology


def set_points(topology: Topology, cards: Iterable[int]) -> int:
    """A set's score: the sum of its pairs' points."""
    listed = sorted(set(cards))
    return sum(pair_points(topology, a, b) for a, b in combinations(listed, 2))


def grouped_search(topology: Topology) -> str:
    """How :func:`~tpnode_tui.core.placement.choose` searches this topology once
    its sets are too many to score one by one: "tree" where its links form a
    hierarchy (groups inside groups), "tree of blocks" where some groups form
    none (a cube mesh) but are small enough to search set by set (both exact),
    else "greedy"."""
    plan = _plan(topology)
    if plan.tree is None:
        return "greedy"
    return "tree of blocks" if plan.blocks else "tree"
