"""Topology-aware placement: which of the free cards a multi-card job gets. Pure: no I/O.

A job on several cards runs its all-reduce at the speed of its slowest link,
and a scattered pick raises nothing: the job is simply slow. Sets are scored
as NVIDIA's go-gpuallocator scores them, an unknown link is never promised
near, and :func:`choose` finds the best set exactly on every real node;
without a topology it is :func:`pick_gpus`. See docs/architecture.md,
section 'Which cards talk fastest'.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from operator import itemgetter
from typing import Callable, Iterable, Optional

from tpnode_tui.model.errors import BadRequest, NeverFits, NoCapacity
from tpnode_tui.model.topology import CONTIGUOUS, PLACEMENTS, SAME_SWITCH, Link, Topology
from tpnode_tui.model.words import card_ranges, cards_words

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


def pick_gpus(free: list[int], count: int) -> list[int]:
    """Choose ``count`` of the ``free`` cards, a run of consecutive indices first.

    Jobs coming and going fragment the free set ({0,3,5,7}). On PCIe machines
    cards under one switch talk much faster, and a scattered pick makes
    all-reduce slow in a way that raises nothing. When no consecutive run
    exists the cards are taken in order: running slowly beats not running.
    """
    if count <= 0:
        return []
    ordered = sorted(set(free))
    if len(ordered) < count:
        raise NoCapacity(f"not enough free cards: need {count}, available {len(ordered)}")
    for start in range(len(ordered) - count + 1):
        window = ordered[start : start + count]
        if window[-1] - window[0] == count - 1:
            return window
    return ordered[:count]


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


def choose(
    free: Iterable[int],
    count: int,
    topology: Optional[Topology],
    require: Optional[str] = None,
    *,
    exhaustive_limit: int = EXHAUSTIVE_LIMIT,
    unknowable: Optional[str] = None,
) -> list[int]:
    """``count`` of the ``free`` cards that talk fastest, in order.

    The best-scoring set; among equals the one least connected to the free cards
    it leaves, then consecutive, then lowest; the same question always gets the
    same answer (see docs/architecture.md, section 'Which cards talk fastest').

    ``require``: None takes the best set free now; ``"same-switch"`` needs every
    pair NVLinked or under one PCIe switch; ``"contiguous"`` a set scoring what
    the node's best set of ``count`` scores. Raises :class:`NoCapacity` when no
    such set is free now or the topology is not known now, :class:`NeverFits`
    when none exists here (or ``unknowable`` says why this node can never know).
    Without a topology covering every free card, this is ``pick_gpus``.
    ``exhaustive_limit``: up to this many candidate sets are scored one by one.
    """
    if require is not None and require not in REQUIREMENTS:
        raise BadRequest(f"{require!r} is not a placement requirement: use {' or '.join(REQUIREMENTS)}")
    if count <= 0:
        return []
    cards = sorted(set(free))
    if topology is None or (cards and (cards[0] < 0 or cards[-1] >= topology.count)):
        return _without_topology(cards, count, require, unknowable if topology is None else None)
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


def _without_topology(cards: list[int], count: int, require: Optional[str], unknowable: Optional[str]) -> list[int]:
    """:func:`choose` where the topology is not known: ``pick_gpus``, or no
    set that must sit well on it (``unknowable``: why it never will be)."""
    if require is None:
        return pick_gpus(cards, count)
    if unknowable:
        raise NeverFits(
            f"this node cannot say how its cards are linked ({unknowable}), so no {cards_words(count)} "
            f"can be shown to be {_WANTED[require]}: waiting cannot help; ask without --{require}"
        )
    # Unknown is not "no such set": the probe reads it again (a first read
    # that timed out, a driver still loading), and a queued launch waits.
    raise NoCapacity(
        f"this node's topology is not known now, so no {cards_words(count)} can be shown to be "
        f"{_WANTED[require]}; it is read again as the probe reads the node"
    )


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
