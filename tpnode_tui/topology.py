"""Topology-aware placement: which of the free cards a multi-card job gets. Pure: no I/O.

A job on several cards spends much of its time in all-reduce, which runs at
the speed of the slowest link between its cards: NVLink (directly, or through
the NVSwitches of a DGX-style node), else one PCIe switch, else one NUMA
node, else across sockets. Two cards under one switch talk several times
faster than two on different sockets, and a scattered pick raises nothing: the
job is simply slow.

Sets are scored as NVIDIA's go-gpuallocator best-effort policy scores them: a
set's score is the sum of its pairs' scores, and a pair scores 100 points for
each NVLink between the two plus 50 for one PCIe switch (PIX), 40 for several
(PXB), 30 for a host bridge (PHB), 20 within a NUMA node (NODE) and 10 across
(SYS). ``nvidia-smi topo -m`` names a pair's NVLinks only, NVML both. A pair
nothing is known about scores what the cards' NUMA nodes show at worst: 20
on one NUMA node (anything from PIX to NODE), 10 on two (SYS); with neither
known it scores nothing. So unknown is not "far": it is never promised near,
a set whose links are known to be fast wins over one that might be, and a
card with nothing known is still placed when no better set is free.

:func:`choose` finds the best-scoring set of the free cards: exhaustively
where the candidate sets are few (every 8-card node), otherwise on the tree
that a hierarchical topology forms (NVLink or switch groups inside NUMA nodes
inside the node: every real node of many cards), with any group of up to 10
cards whose links form no hierarchy (a DGX-1's cube mesh) searched set by
set; both exact. Only a node with a bigger such group is searched greedily.
Without a topology it is :func:`~tpnode_tui.model.pick_gpus`, so a node whose
topology cannot be read loses nothing.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from math import comb
from operator import itemgetter
from typing import Callable, Iterable, Optional, Sequence

from .model import (
    CONTIGUOUS,
    PCIE_PATHS,
    PLACEMENTS,
    SAME_SWITCH,
    BadRequest,
    Link,
    NeverFits,
    NoCapacity,
    Topology,
    card_ranges,
    cards_words,
    pick_gpus,
)

NVLINK_POINTS = 100
PCIE_POINTS = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
#: what a pair nothing is known about scores, by its cards' NUMA nodes
SAME_NUMA_POINTS, OTHER_NUMA_POINTS = PCIE_POINTS["NODE"], PCIE_POINTS["SYS"]

#: the placements a launch may require (model.PLACEMENTS), by their names here
REQUIREMENTS = PLACEMENTS
_SWITCH_POINTS = PCIE_POINTS["PXB"]
_WANTED = {
    SAME_SWITCH: "all linked by NVLink or under one PCIe switch",
    CONTIGUOUS: "as well connected as the best set of that size on this node",
}

#: Up to this many candidate sets are all scored. 8 cards never have more
#: than 70; beyond it the tree (or the greedy search) takes over.
EXHAUSTIVE_LIMIT = 2000

#: Beyond this many free cards the tree is searched rather than every set,
#: which scores each free card against every other first.
_EXHAUSTIVE_CARDS = 16
#: A group whose links form no hierarchy (a cube mesh) is searched set by set
#: when it has at most this many cards; a bigger one leaves the node to the
#: greedy search.
_BLOCK_CARDS = 10
#: A hierarchy deeper than this is not one (a PCIe tree has a few levels).
_MAX_DEPTH = 32
#: the diagonal of the effective matrix: above every real level
_SELF = 255


def link_points(link: Optional[Link]) -> int:
    """The points of one link: 100 per NVLink, plus its PCIe path's; 0 for None."""
    if link is None:
        return 0
    return NVLINK_POINTS * link.nvlinks + (PCIE_POINTS[link.pcie] if link.pcie else 0)


def pair_points(topology: Topology, a: int, b: int) -> int:
    """The points of cards ``a`` and ``b``: their link's, else what their NUMA nodes show."""
    if a == b:
        return 0
    link = topology.link(a, b)
    if link is not None:
        return link_points(link)
    return _numa_points(topology, a, b)


def _numa_points(topology: Topology, a: int, b: int) -> int:
    na = topology.numa[a] if 0 <= a < topology.count else None
    nb = topology.numa[b] if 0 <= b < topology.count else None
    if na is None or nb is None:
        return 0
    return SAME_NUMA_POINTS if na == nb else OTHER_NUMA_POINTS


def set_points(topology: Topology, cards: Iterable[int]) -> int:
    """A set's score: the sum of its pairs' points."""
    listed = sorted(set(cards))
    return sum(pair_points(topology, a, b) for a, b in combinations(listed, 2))


def choose(
    free: Iterable[int],
    count: int,
    topology: Optional[Topology],
    require: Optional[str] = None,
    *,
    exhaustive_limit: int = EXHAUSTIVE_LIMIT,
) -> list[int]:
    """``count`` of the ``free`` cards that talk fastest, in order.

    The best-scoring set; among equals, the one least connected to the free
    cards it leaves (the smallest sum of its cards' points to every other free
    card). That is the set taken from the smallest free group that fits, so
    whole NVLink and switch groups stay free for the next job that needs one:
    of {0,1,2,3} free under one switch and {4,5} under another, a 2-card job
    gets 4 and 5. Among those, a run of consecutive indices, else the lowest
    (what :func:`~tpnode_tui.model.pick_gpus` takes; on a big node's tree, the
    lower groups first). The same question always gets the same answer.

    go-gpuallocator instead takes its set from the best partition of all the
    free cards into sets of that size, which can hand the job asking now a
    slower set (two NV1 cards beside a free NV2 pair) for the sake of jobs
    that may never come. Here the job asking now gets the best set there is,
    and fragmentation decides only between equals.

    ``require``: None takes the best set free now, however scattered; with
    ``"same-switch"`` every pair must be NVLinked or under one PCIe switch
    (PIX or PXB); with ``"contiguous"`` the set must score what the best set of
    ``count`` cards on this node scores when every card is free. Raises
    :class:`NoCapacity` when no such set is free now (it may be later), or when
    the topology is not known now (no set can be shown to be one until it is
    read), and :class:`NeverFits` when none exists on this node. Without a topology, or with one
    that does not cover every free card (read for another node than this
    reading's), this is ``pick_gpus``: NoCapacity when too few are free.

    ``exhaustive_limit``: up to this many candidate sets are scored one by one.
    """
    if require is not None and require not in REQUIREMENTS:
        raise BadRequest(f"{require!r} is not a placement requirement: use {' or '.join(REQUIREMENTS)}")
    if count <= 0:
        return []
    cards = sorted(set(free))
    if topology is None or (cards and (cards[0] < 0 or cards[-1] >= topology.count)):
        if require is not None:
            # Unknown is not "no such set": the probe reads it again (a first read
            # that timed out, a driver still loading), and a queued launch waits.
            raise NoCapacity(
                f"this node's topology is not known now, so no {cards_words(count)} can be shown to be "
                f"{_WANTED[require]}; it is read again as the probe reads the node"
            )
        return pick_gpus(cards, count)
    plan = _plan(topology)
    possible: Optional[int] = None
    if require is not None:
        possible = plan.best_points_on_node(count, require == SAME_SWITCH, exhaustive_limit)
        if possible is None:
            raise NeverFits(
                f"this node has no {cards_words(count)} {_WANTED[require]} "
                f"(cards {card_ranges(range(topology.count))}): waiting cannot help"
            )
    if len(cards) < count:
        raise NoCapacity(f"not enough free cards: need {count}, available {len(cards)}")
    found = plan.best(cards, count, require == SAME_SWITCH, exhaustive_limit)
    if require is not None and (found is None or (require == CONTIGUOUS and found.points < (possible or 0))):
        raise NoCapacity(f"no {cards_words(count)} {_WANTED[require]} are free now (free: {cards_words(cards)})")
    assert found is not None  # without a requirement any set will do, and there are enough cards
    return found.cards


# -- the search ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Found:
    cards: list[int]
    points: int


@dataclass(eq=False)
class _Node:
    """A group of a hierarchical topology: every pair across two of its parts
    has the points of ``level``. Its parts are single cards (``bag``, whose
    links to the rest of the group are all alike) and smaller groups. A
    ``block`` is a group whose links form no hierarchy: its cards, all in
    ``bag``, are searched set by set."""

    level: int
    bag: list[int] = field(default_factory=list)
    subs: list[_Node] = field(default_factory=list)
    block: bool = False


#: (points, minus the points to the free cards left): compared as a tuple
_Value = tuple[int, int]
#: a node's best value for each number of cards taken from it (None: cannot)
_Table = list[Optional[_Value]]


class _Plan:
    """What :func:`choose` works out once per topology: the points of each pair
    and, where the topology is a hierarchy, its tree."""

    def __init__(self, topology: Topology) -> None:
        # no reference to the topology itself: the plan is dropped with it
        n = self.n = topology.count
        kind_points = [0] + [link_points(k) for k in topology.kinds]
        matrix = topology.matrix
        unknown: dict[int, int] = {}  # position -> points, for pairs with no link
        if matrix.count(0) > n:
            for a in range(n):
                at = matrix.find(0, a * n, (a + 1) * n)
                while at >= 0:
                    if at != a * n + a:
                        unknown[at] = _numa_points(topology, a, at - a * n)
                    at = matrix.find(0, at + 1, (a + 1) * n)
        #: the distinct points of the node's pairs, ascending; a pair's level indexes it
        self.levels = sorted(set(kind_points[1:]) | set(unknown.values())) or [0]
        level_of = {p: i for i, p in enumerate(self.levels)}
        table = bytes([level_of.get(p, 0) for p in kind_points] + [0] * (256 - len(kind_points)))
        eff = bytearray(matrix.translate(table))
        for at, points in unknown.items():
            eff[at] = level_of[points]
        for a in range(n):
            eff[a * n + a] = _SELF
        #: each pair's level, ``count * count`` bytes
        self.eff = bytes(eff)
        #: how many groups of the tree are blocks
        self.blocks = 0
        self.tree = self._hierarchy()
        self._on_node: dict[tuple[int, bool, int], Optional[int]] = {}

    def points(self, a: int, b: int) -> int:
        return 0 if a == b else self.levels[self.eff[a * self.n + b]]

    def best_points_on_node(self, count: int, same_switch: bool, limit: int) -> Optional[int]:
        """The best score of ``count`` cards with every card free; None when no set qualifies."""
        key = (count, same_switch, limit)
        if key not in self._on_node:
            found = self.best(list(range(self.n)), count, same_switch, limit) if count <= self.n else None
            self._on_node[key] = None if found is None else found.points
        return self._on_node[key]

    def best(self, cards: list[int], count: int, same_switch: bool, limit: int) -> Optional[_Found]:
        if comb(len(cards), count) <= limit and (self.tree is None or len(cards) <= _EXHAUSTIVE_CARDS):
            return self._exhaustive(cards, count, same_switch)
        if self.tree is not None:
            return self._on_tree(self.tree, set(cards), count, same_switch)
        return self._greedy(cards, count, same_switch)

    # -- every set --------------------------------------------------------------

    def _exhaustive(self, cards: list[int], count: int, same_switch: bool) -> Optional[_Found]:
        rows = [[self.points(a, b) for b in cards] for a in cards]
        left = [sum(row) for row in rows]  # each card's points to every other free card
        best: Optional[tuple[int, int, bool]] = None
        chosen: tuple[int, ...] = ()
        for combo in combinations(range(len(cards)), count):
            total = 0
            for i, j in combinations(combo, 2):
                points = rows[i][j]
                if same_switch and points < _SWITCH_POINTS:
                    break
                total += points
            else:
                key = (total, -sum(left[i] for i in combo), cards[combo[-1]] - cards[combo[0]] == count - 1)
                if best is None or key > best:
                    best, chosen = key, combo
        if best is None:
            return None
        return _Found([cards[i] for i in chosen], best[0])

    # -- the tree -----------------------------------------------------------------

    def _hierarchy(self) -> Optional[_Node]:
        """The tree of groups whose levels give every pair's points, groups that
        are no hierarchy (a cube mesh: cards 0 and 1 share one NVLink, 1 and 2
        two, 0 and 2 one, yet 0 and 3 two) kept whole as blocks; None when such
        a group is too big to search set by set."""
        return self._split(list(range(self.n)), 0) if self.n else None

    def _split(self, members: list[int], depth: int) -> Optional[_Node]:
        """``members`` as a group whose parts are linked to each other at one
        level, the lowest its first card has to the others: the cards linked
        above it to one card after another, else the cards connected above it.
        Neither holding, the group is a block."""
        if depth > _MAX_DEPTH:
            return None
        n, eff = self.n, self.eff
        first = members[0] * n
        level = min((eff[first + b] for b in members[1:]), default=0)
        parts: list[list[int]] = []
        rest = members
        while rest:
            row = rest[0] * n
            parts.append([b for b in rest if eff[row + b] > level])
            rest = [b for b in rest if eff[row + b] <= level]
        if not self._apart_at(parts, level):
            parts = self._connected(members, level)
            if len(parts) == 1 or not self._apart_at(parts, level):
                if len(members) > _BLOCK_CARDS:
                    return None
                self.blocks += 1
                return _Node(level, bag=sorted(members), block=True)
        node = _Node(level)
        for part in parts:
            if len(part) == 1:
                node.bag.append(part[0])
                continue
            sub = self._split(part, depth + 1)
            if sub is None:
                return None
            node.subs.append(sub)
        return node

    def _apart_at(self, parts: list[list[int]], level: int) -> bool:
        """Whether every pair across two of the parts is at ``level``: each card's
        row in the parts' order, its own part's span left out, is that level only."""
        n, eff = self.n, self.eff
        ordered = [card for part in parts for card in part]
        if len(ordered) < 2:
            return True
        pick = itemgetter(*ordered)
        start = 0
        for part in parts:
            end = start + len(part)
            for card in part:
                row = bytes(pick(eff[card * n : (card + 1) * n]))
                if row.count(level, 0, start) != start or row.count(level, end) != len(ordered) - end:
                    return False
            start = end
        return True

    def _connected(self, members: list[int], level: int) -> list[list[int]]:
        """The members in groups connected by links above ``level``."""
        n, eff = self.n, self.eff
        left = members
        parts = []
        while left:
            part, frontier, left = [left[0]], [left[0]], left[1:]
            while frontier and left:
                row = frontier.pop() * n
                reached = [b for b in left if eff[row + b] > level]
                if reached:
                    part += reached
                    frontier += reached
                    left = [b for b in left if eff[row + b] <= level]
            parts.append(sorted(part))
        return parts

    def _on_tree(self, root: _Node, free: set[int], count: int, same_switch: bool) -> Optional[_Found]:
        """The best set by dynamic programming over the groups: from each, the
        best value for each number of cards taken from it, combining its parts
        (pairs across two parts all score the group's level)."""
        levels = self.levels
        frees: dict[int, int] = {}

        def count_free(node: _Node) -> int:
            total = sum(1 for c in node.bag if c in free) + sum(count_free(s) for s in node.subs)
            frees[id(node)] = total
            return total

        count_free(root)
        chosen: list[int] = []

        def table(node: _Node, outside: int) -> tuple[_Table, Callable[[int], None]]:
            """The node's table, and how to collect the cards of a given entry.
            ``outside``: the points from any of its free cards to the free cards beyond it."""
            points, here = levels[node.level], frees[id(node)]
            cap = min(count, here)
            if node.block:
                return self._block([c for c in node.bag if c in free], outside, cap, same_switch, chosen)
            apart = same_switch and points < _SWITCH_POINTS  # its parts' pairs would break the rule
            bag = [c for c in node.bag if c in free]
            left = outside + points * (here - 1)  # a bag card's points to the other free cards
            parts: list[tuple[_Table, Callable[[int], None]]] = []
            if bag:

                def take_bag(j: int, bag: list[int] = bag) -> None:
                    chosen.extend(pick_gpus(bag, j))

                most = 1 if apart else min(cap, len(bag))
                parts.append(([(points * (j * (j - 1) // 2), -left * j) for j in range(most + 1)], take_bag))
            for sub in node.subs:
                if frees[id(sub)]:
                    parts.append(table(sub, outside + points * (here - frees[id(sub)])))
            return _apart(parts, cap) if apart else _together(parts, cap, points)

        best, take = table(root, 0)
        if count >= len(best) or best[count] is None:
            return None
        take(count)
        value = best[count]
        assert value is not None
        return _Found(sorted(chosen), value[0])

    def _block(
        self, cards: list[int], outside: int, cap: int, same_switch: bool, chosen: list[int]
    ) -> tuple[_Table, Callable[[int], None]]:
        """A block's table: every subset of its free cards, each scored from the
        one without its lowest card (at most 2 ** _BLOCK_CARDS of them)."""
        rows = [[self.points(a, b) for b in cards] for a in cards]
        left = [outside + sum(row) for row in rows]
        subsets = 1 << len(cards)
        points, lefts, sizes = [0] * subsets, [0] * subsets, [0] * subsets
        allowed = [True] * subsets
        best: _Table = [(0, 0)] + [None] * cap
        masks = [0] * (cap + 1)
        for mask in range(1, subsets):
            low = (mask & -mask).bit_length() - 1
            rest = mask & (mask - 1)
            size = sizes[mask] = sizes[rest] + 1
            added = [rows[low][i] for i in range(low + 1, len(cards)) if rest >> i & 1]
            points[mask] = points[rest] + sum(added)
            lefts[mask] = lefts[rest] + left[low]
            allowed[mask] = allowed[rest] and not (same_switch and any(p < _SWITCH_POINTS for p in added))
            if size <= cap and allowed[mask]:
                value, known = (points[mask], -lefts[mask]), best[size]
                if known is None or value > known:
                    best[size], masks[size] = value, mask

        def take(j: int) -> None:
            chosen.extend(card for i, card in enumerate(cards) if masks[j] >> i & 1)

        return best, take

    # -- no hierarchy, too many sets ------------------------------------------------

    def _greedy(self, cards: list[int], count: int, same_switch: bool) -> Optional[_Found]:
        """Best effort where neither search above applies: grow a set from each
        of a few seeds by the card that adds the most, then swap cards while a
        swap raises the score (not under ``same_switch``, where a swap could
        break the rule)."""
        points = self.points
        best: Optional[_Found] = None
        for seed in cards[:16]:
            chosen = [seed]
            gain = {c: points(c, seed) for c in cards}
            allowed = {c for c in cards if not same_switch or gain[c] >= _SWITCH_POINTS} - {seed}
            while len(chosen) < count and allowed:
                pick = max(allowed, key=lambda c: (gain[c], -c))
                chosen.append(pick)
                allowed.discard(pick)
                for c in cards:
                    gain[c] += points(c, pick)
                if same_switch:
                    allowed = {c for c in allowed if points(c, pick) >= _SWITCH_POINTS}
            if len(chosen) < count:
                continue
            if not same_switch:
                self._swap(chosen, gain, cards)
            total = sum(points(a, b) for a, b in combinations(chosen, 2))
            if best is None or total > best.points:
                best = _Found(sorted(chosen), total)
        return best

    def _swap(self, chosen: list[int], gain: dict[int, int], cards: list[int]) -> None:
        points = self.points
        for _ in range(4 * len(chosen)):
            inside = set(chosen)
            delta, out_card, in_card = max(
                ((gain[b] - points(a, b) - gain[a], a, b) for a in chosen for b in cards if b not in inside),
                default=(0, -1, -1),
            )
            if delta <= 0:
                return
            chosen[chosen.index(out_card)] = in_card
            for c in cards:
                gain[c] += points(c, in_card) - points(c, out_card)


def _together(
    parts: list[tuple[_Table, Callable[[int], None]]], cap: int, points: int
) -> tuple[_Table, Callable[[int], None]]:
    """Parts that may be mixed: taking ``a`` cards from those before and ``j``
    from the next adds ``a * j`` pairs of the group's points. Of equal values the
    one with more cards from the earlier parts (the lower indices) is kept."""
    best: _Table = [(0, 0)]
    picks: list[list[int]] = []
    for part, _ in parts:
        merged: _Table = [None] * min(cap + 1, len(best) + len(part) - 1)
        pick = [0] * len(merged)
        for a in reversed(range(len(best))):
            before = best[a]
            if before is None:
                continue
            for j, value in enumerate(part[: len(merged) - a]):
                if value is None:
                    continue
                total = (before[0] + value[0] + points * a * j, before[1] + value[1])
                known = merged[a + j]
                if known is None or total > known:
                    merged[a + j], pick[a + j] = total, j
        best = merged
        picks.append(pick)

    def take(count: int) -> None:
        for (_, collect), pick in zip(reversed(parts), reversed(picks)):
            j = pick[count]
            if j:
                collect(j)
            count -= j

    return best, take


def _apart(parts: list[tuple[_Table, Callable[[int], None]]], cap: int) -> tuple[_Table, Callable[[int], None]]:
    """Parts that must not be mixed (their pairs would break same-switch): the
    best of any one part."""
    best: _Table = [(0, 0)] + [None] * cap
    source = [-1] * (cap + 1)
    for index, (part, _) in enumerate(parts):
        for j in range(1, min(cap, len(part) - 1) + 1):
            value, known = part[j], best[j]
            if value is not None and (known is None or value > known):
                best[j], source[j] = value, index
    while len(best) > 1 and best[-1] is None:
        best.pop()

    def take(count: int) -> None:
        if count:
            parts[source[count]][1](count)

    return best, take


#: one plan per topology object, dropped with it (topologies are not hashable)
_PLANS: dict[int, tuple[weakref.ref[Topology], _Plan]] = {}


def _plan(topology: Topology) -> _Plan:
    key = id(topology)
    entry = _PLANS.get(key)
    if entry is not None and entry[0]() is topology:
        return entry[1]
    plan = _Plan(topology)
    plans = _PLANS  # the dict itself: at exit the module's names are gone before the last topologies

    def forget(_gone: weakref.ref[Topology]) -> None:
        plans.pop(key, None)

    plans[key] = (weakref.ref(topology, forget), plan)
    return plan


def grouped_search(topology: Topology) -> str:
    """How :func:`choose` searches this topology once its sets are too many to
    score one by one: "tree" where its links form a hierarchy (groups inside
    groups), "tree of blocks" where some groups form none (a cube mesh) but are
    small enough to search set by set (both exact), else "greedy"."""
    plan = _plan(topology)
    if plan.tree is None:
        return "greedy"
    return "tree of blocks" if plan.blocks else "tree"


# -- simulated nodes -------------------------------------------------------------------


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


# -- nvidia-smi topo -m --------------------------------------------------------------


class TopologyError(ValueError):
    """Text that is not an ``nvidia-smi topo -m`` matrix; the message says why."""


#: Most cards a matrix may name: its bytes grow with the square.
MAX_CARDS = 4096

_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"GPU([0-9]{1,5})")
_NVLINK = re.compile(r"NV([0-9]{1,3})")
_NUMBER = re.compile(r"[0-9]{1,5}")
_NUMA_AFFINITY = "NUMA Affinity"
_TRAILING = ("CPU Affinity", _NUMA_AFFINITY, "GPU NUMA ID")


def link_from_word(word: str) -> Optional[Link]:
    """A ``topo -m`` cell as a link: "NV12", "PIX" ... "SYS" (and "SOC", what
    older drivers called SYS); None for "X" (the card itself) and for a word
    this code does not know, which says nothing about the pair."""
    word = word.strip()
    if word in PCIE_PATHS:
        return Link(pcie=word)
    if word == "SOC":
        return Link(pcie="SYS")
    nv = _NVLINK.fullmatch(word)
    if nv is not None and 0 < int(nv.group(1)) < 256:
        return Link(int(nv.group(1)))
    return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def parse_topo_matrix(text: str) -> Topology:
    """The cards' links and NUMA nodes from what ``nvidia-smi topo -m`` printed.

    The real format: a header of tab-separated columns (``\\tGPU0\\tGPU1...\\tNIC0
    ...\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID``, underlined with terminal
    escapes by some drivers), one row per GPU and per NIC (``GPU0\\t X \\tNV18...``),
    then the ``Legend:`` and ``NIC Legend:`` blocks. NIC rows and columns,
    columns this code does not know and cells it cannot read say nothing about
    the cards; a pair whose two cells differ gets the slower. "NUMA Affinity"
    is the CPU side's NUMA node; "GPU NUMA ID" (a GPU's own memory on
    coherent platforms) is not a socket and is not used.

    Raises :class:`TopologyError` naming what is wrong when there is no matrix
    to read: the text is someone else's and is never trusted.
    """
    lines = _ESCAPE.sub("", text).splitlines()
    header_at = next(
        (
            i
            for i, line in enumerate(lines)
            if line.startswith("\t") and any(_GPU.fullmatch(c.strip()) for c in line.split("\t"))
        ),
        None,
    )
    if header_at is None:
        first = next((line.strip() for line in lines if line.strip()), "")
        raise TopologyError(f"no GPU matrix in it (it begins {_shown(first)})")
    header = [c.strip() for c in lines[header_at].split("\t")[1:]]
    header = [c for c in header if c]
    rows: dict[str, list[str]] = {}
    for line in lines[header_at + 1 :]:
        if line.startswith("Legend:"):
            break
        cells = [c.strip() for c in line.split("\t")]
        if len(cells) > 1 and cells[0] and cells[0] not in rows:
            rows[cells[0]] = cells[1:]
    devices = 0
    while devices < len(header) and header[devices] in rows:
        devices += 1
    gpus: dict[int, str] = {}
    for name in header[:devices]:
        gpu = _GPU.fullmatch(name)
        if gpu is not None:
            gpus[int(gpu.group(1))] = name
    if not gpus:
        raise TopologyError(f"its header names no GPU that has a row ({_shown(lines[header_at].strip())})")
    count = max(gpus) + 1
    if count > MAX_CARDS:
        raise TopologyError(f"it names GPU{count - 1}, more cards than the {MAX_CARDS} this code reads")
    column = {name: i for i, name in enumerate(header[:devices])}
    trailing = header[devices:]
    links: dict[tuple[int, int], Link] = {}
    numa: dict[int, int] = {}
    for a, name in gpus.items():
        cells = rows[name]
        for b, other in gpus.items():
            at = column[other]
            link = link_from_word(cells[at]) if a != b and at < len(cells) else None
            if link is not None:
                links[(a, b)] = link
        values = dict(zip(trailing, [c for c in cells[devices:] if c]))
        node = values.get(_NUMA_AFFINITY, "")
        if _NUMBER.fullmatch(node):
            numa[a] = int(node)
    return Topology.build(count, links, numa)
