"""Pure data for the allocator and everything that displays it: no I/O here.

Snapshots are frozen dataclasses, built afresh on every read and never
updated in place: a reading that could be patched would become a second copy
of the truth that slowly drifts from the driver and the runtime.

A field a driver or probe cannot supply is ``None`` (shown as "N/A"), never an
exception and never a made-up zero: zero MiB used would read as "idle".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering
from typing import Iterable, Mapping, Optional, Union


def card_ranges(cards: Iterable[int]) -> str:
    """Card indices in order, three or more in a row as a range: "0-3,7,9-12".

    A node of 256 cards has lists of 255 indices, which as plain lists fill a
    screen and push everything else off it. Two neighbours stay "0,1": as a
    range they would be no shorter.
    """
    ordered = sorted(set(cards))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        else:
            parts.extend(map(str, ordered[start : end + 1]))
        start = end + 1
    return ",".join(parts)


def cards_words(cards: Union[int, Iterable[int]]) -> str:
    """A count as "1 card" / "3 cards"; a list as "card 4" / "cards 0,1" / "cards 0-254" / "no cards"."""
    if isinstance(cards, int):
        return f"{cards} card" if cards == 1 else f"{cards} cards"
    listed = tuple(cards)
    if not listed:
        return "no cards"
    return ("card " if len(set(listed)) == 1 else "cards ") + card_ranges(listed)


#: How a launch may require its cards to sit on the node's topology (see
#: tpnode_tui.topology.choose): every pair NVLinked or under one PCIe switch
#: (PIX or PXB); or as well connected as the best set of that size on this
#: node when it is empty. Words of the port, so a client needs no topology to say them.
SAME_SWITCH, CONTIGUOUS = "same-switch", "contiguous"
PLACEMENTS = (SAME_SWITCH, CONTIGUOUS)

#: Job statuses that hold cards. A job that exited is still listed until it is
#: reclaimed, but it gave its GPU memory back when it ended.
LIVE_STATUSES = frozenset({"running", "created", "paused", "restarting"})

JOB_KINDS = ("job", "reservation")

#: A run id names a job in labels, state files and container names, so it is
#: kept to what all three accept literally: no spaces, quotes or shell syntax.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
RUN_ID_RULE = "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"

#: A MIG profile as NVIDIA names it ("1g.18gb", "1c.3g.71gb", "1g.5gb+me"). A job
#: asks for one by name, and it is written into labels and records, so it is kept
#: to what NVIDIA's names use: no spaces, commas or colons.
PROFILE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,39}")
PROFILE_RULE = "a MIG profile as nvidia-smi -L names it, such as 1g.18gb or 2g.35gb"
#: A MIG device's uuid as CUDA_VISIBLE_DEVICES takes it: "MIG-<uuid>", or on older
#: drivers "MIG-GPU-<card uuid>/<GPU instance>/<compute instance>".
MIG_UUID_PATTERN = re.compile(r"MIG-[A-Za-z0-9][A-Za-z0-9/_.-]{0,120}")


class TpnodeError(Exception):
    """Base of every error the product reports to a person in plain words."""

    #: True when the message is already the whole line to show (an agent's
    #: answer, worded by :func:`error_line` on its side)
    worded = False


class NoCapacity(TpnodeError):
    """Not enough free cards *now*.

    Not a failure: it means "not your turn yet". A queue catches it and tries
    again next round instead of failing the job. A request that can never fit
    raises :class:`NeverFits` instead, which is deliberately *not* a subclass,
    so a ``except NoCapacity`` retry loop cannot keep such a job waiting forever.
    """


class NeverFits(TpnodeError):
    """The request is larger than this node will ever have: waiting cannot help."""


class LockWaitTimeout(TpnodeError):
    """The allocation lock was not had within the time the caller allowed.

    Like NoCapacity it means "try again later", and like it nothing was
    started; it is kept apart so the message can say what was waited for
    (the lock's holder, or Redis) rather than talk about cards.
    """


class ConfigError(TpnodeError):
    """A setting or flag has a value that cannot be used; the message names it."""


class RuntimeUnavailable(TpnodeError):
    """The job runtime (Docker engine, state file) cannot be reached or read.

    While this is raised nobody knows which cards platform jobs hold, so no
    card may be handed out and none may be shown as free.
    """


class NotAllowed(TpnodeError):
    """The caller may not do this (sysexits' EX_NOPERM, exit code 77); the
    message names the rule and who may."""


class JobNotFound(TpnodeError):
    """No platform job has the run id or name asked for."""


class BadRequest(TpnodeError):
    """A request that is malformed whatever the node's state (a bad run id, 0 cards)."""


class Conflict(TpnodeError):
    """A well-formed request the node's present state refuses: a run id already
    taken, a job still running, an image or command this node does not have.
    Unlike BadRequest, the same request can succeed once the state changes."""


#: Exit codes are part of the interface, so scripts can tell "try later" from
#: "this is wrong" from "ask someone who may": the CLI exits with them and the
#: agent's errors carry them.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_TEMPFAIL, EXIT_NOPERM = 0, 1, 2, 75, 77


def exit_code(error: TpnodeError) -> int:
    """The exit code that reports ``error``: 75 for no capacity now or the lock
    not had in time (EX_TEMPFAIL), 77 for not allowed (EX_NOPERM), 2 for a
    malformed request or setting, else 1."""
    if isinstance(error, (NoCapacity, LockWaitTimeout)):
        return EXIT_TEMPFAIL
    if isinstance(error, NotAllowed):
        return EXIT_NOPERM
    if isinstance(error, (BadRequest, ConfigError)):
        return EXIT_USAGE
    return EXIT_FAIL


def error_line(error: TpnodeError) -> str:
    """The one line that reports ``error`` to a person, the same from the CLI
    and from the agent's API. No capacity says what to do about it: a command
    never waits for cards, it tries again later (or queues through the agent)."""
    if isinstance(error, NoCapacity) and not error.worded:
        return f"no capacity now: {error}; not waiting for cards: try again later"
    return str(error)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id or ""):
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise BadRequest(f"run id {shown!r} is not valid: use {RUN_ID_RULE}")
    return run_id


def check_profile(profile: str) -> str:
    """``profile`` when it can name a MIG profile; BadRequest saying what one looks like."""
    if not isinstance(profile, str) or not PROFILE_PATTERN.fullmatch(profile):
        shown = repr(profile) if not isinstance(profile, str) or len(profile) <= 60 else repr(profile[:57] + "...")
        raise BadRequest(f"{shown} is not a MIG profile: give {PROFILE_RULE}")
    return profile


@dataclass(frozen=True)
class SliceRef:
    """A MIG slice a job holds: the card it is on and its MIG device's uuid,
    which is what the job is pointed at (``CUDA_VISIBLE_DEVICES=MIG-...``).

    The uuid, not the slice's index, names it: indices are renumbered when an
    operator makes or destroys MIG devices, a uuid is never given to another.
    """

    card: int
    uuid: str
    #: the profile it was handed out as ("1g.18gb"), so a job whose slice is no
    #: longer reported still says what it held; "" when not recorded
    profile: str = ""

    def words(self) -> str:
        """ "slice 1g.18gb of card 1"."""
        return f"slice {self.profile or self.uuid} of card {self.card}"

    @property
    def short(self) -> str:
        """ "1:1g.18gb": by its card and profile, for a table's column (its uuid is too long for one)."""
        return f"{self.card}:{self.profile or self.uuid}"


def wanted_words(cards: int, slice: Optional[str] = None, placement: Optional[str] = None) -> str:
    """What a launch asks for, in a few words: "2 cards", "4 cards same-switch", "a 1g.18gb MIG slice"."""
    if slice is not None:
        return f"a {slice} MIG slice"
    return cards_words(cards) + (f" {placement}" if placement else "")


def holding_words(gpus: Iterable[int], slices: Iterable[SliceRef] = ()) -> str:
    """What a job holds, in a few words: "cards 0,1", "slice 1g.18gb of card 1",
    "card 0 and slice 1g.18gb of card 1", "no cards"."""
    cards = tuple(gpus)
    parts = [s.words() for s in slices]
    if cards or not parts:
        parts.insert(0, cards_words(cards))
    return " and ".join(parts)


#: How a card split into MIG slices is said (``GpuOccupancy.mig``), the grid's
#: "MIG" meaning "split into slices: see them".
MIG_SPLIT = "split into"

#: The states a MIG slice can be in, each exactly one at a time: held by a
#: platform job or reservation; in use from outside the platform; not offered
#: because it shares its GPU instance's memory with a slice that is held or in
#: use; unhealthy, drained or unverified (with its card, or on its own); free.
SLICE_STATES = ("free", "job", "reservation", "external", "shared", "unhealthy", "unverified", "drained")


@dataclass(frozen=True)
class SliceState:
    """One MIG slice as the allocator decides on it: exactly one state, and why."""

    card: int
    #: the MIG device's index on its card
    index: int
    #: one of SLICE_STATES
    state: str
    uuid: Optional[str] = None
    profile: Optional[str] = None
    gpu_instance_id: Optional[int] = None
    #: the platform job holding it (held slices only)
    run_id: Optional[str] = None
    #: in plain words, why it is not free: what uses it (external), which slice it
    #: shares its memory with (shared), what is wrong (unhealthy, drained, unverified)
    reason: Optional[str] = None

    def words(self) -> str:
        """ "slice 3 (1g.18gb) of card 1"."""
        return f"slice {self.index} ({self.profile or 'profile unknown'}) of card {self.card}"


@dataclass(frozen=True)
class GpuOccupancy:
    """What is physically held at one moment, as the allocator decides on it."""

    total: int
    #: card index -> run id of the platform job that holds it
    by_job: dict[int, str] = field(default_factory=dict)
    #: cards in use by something the platform did not start
    external: frozenset[int] = frozenset()
    #: card index -> why it must not be handed out (never includes job-held cards:
    #: those were never free, so they are not deducted twice)
    unhealthy: dict[int, str] = field(default_factory=dict)
    #: False when use from outside could not be probed. Then ``external`` is empty
    #: and that does *not* mean nobody holds a card: the free count may be too high.
    external_probe_ok: bool = True
    #: card index -> why an operator or an XID took it out of service (never
    #: includes job-held cards, like ``unhealthy``; a drained card is never
    #: also listed as unhealthy or external)
    drained: dict[int, str] = field(default_factory=dict)
    #: card index -> why it is not handed out whole: it is split into MIG slices,
    #: its MIG mode changes at its next reset, or its MIG mode cannot be read
    #: (never includes job-held, drained or unhealthy cards, nor external ones
    #: that are whole)
    mig: dict[int, str] = field(default_factory=dict)
    #: every MIG slice the driver reports, in card and slice order, each in
    #: exactly one state; a job gets a free one, never a card in ``mig`` whole
    slices: tuple[SliceState, ...] = ()

    @property
    def busy(self) -> frozenset[int]:
        return (
            frozenset(self.by_job)
            | self.external
            | frozenset(self.unhealthy)
            | frozenset(self.drained)
            | frozenset(self.mig)
        )

    @property
    def free_slices(self) -> list[SliceState]:
        return [s for s in self.slices if s.state == "free"]

    @property
    def free(self) -> list[int]:
        busy = self.busy
        return [i for i in range(self.total) if i not in busy]

    def explain(self) -> str:
        """The occupancy in plain words, for refusals, the CLI and the dashboard."""
        parts = [f"{self.total} cards total, {len(self.free)} free"]
        if self.by_job:
            parts.append(f"{len(self.by_job)} held by platform jobs")
        if self.external:
            parts.append(
                f"{len(self.external)} held by processes outside the platform (cards {card_ranges(self.external)})"
            )
        if self.unhealthy:
            # One entry per reason, not per card: a node whose driver lost every
            # card would otherwise repeat the same words for each of them.
            by_reason: dict[str, list[int]] = {}
            for i, reason in sorted(self.unhealthy.items()):
                by_reason.setdefault(reason, []).append(i)
            bad = "; ".join(f"{cards_words(cards)}: {r}" for r, cards in by_reason.items())
            parts.append(f"{len(self.unhealthy)} unhealthy ({bad})")
        if self.drained:
            parts.append(f"{len(self.drained)} drained ({cards_words(self.drained)})")
        if self.mig:
            # Cards split into slices are said in one breath with their slices;
            # any other reason (a mode pending a reset, or unknown) once per reason.
            split = sorted(i for i, why in self.mig.items() if why.startswith(MIG_SPLIT))
            if split or self.slices:
                parts.append(self._explain_slices(split))
            others: dict[str, list[int]] = {}
            for i, why in sorted(self.mig.items()):
                if i not in split:
                    others.setdefault(why, []).append(i)
            if others:
                said = "; ".join(f"{cards_words(cards)}: {why}" for why, cards in others.items())
                parts.append(f"{sum(map(len, others.values()))} not handed out whole ({said})")
        elif self.slices:
            parts.append(self._explain_slices([]))
        if not self.external_probe_ok:
            parts.append("cannot probe use from outside the platform, so the free count may be too high")
        return "; ".join(parts)

    def _explain_slices(self, split: list[int]) -> str:
        """ "card 1 in MIG mode: 5 slices, 2 free (2g.35gb, 1g.18gb)": what the
        slices' own states are, each slice shows; the summary says what is free."""
        free = self.free_slices
        where = f"{cards_words(split)} in MIG mode" if split else "MIG"
        said = f"{where}: {len(self.slices)} slice{'s' if len(self.slices) != 1 else ''}, {len(free)} free"
        if free:
            by_card: dict[int, dict[str, int]] = {}
            for s in free:
                profiles = by_card.setdefault(s.card, {})
                profiles[s.profile or "profile unknown"] = profiles.get(s.profile or "profile unknown", 0) + 1
            many = len(by_card) > 1
            said += (
                " ("
                + "; ".join(
                    ", ".join(f"{p} x{n}" if n > 1 else p for p, n in profiles.items())
                    + (f" on card {c}" if many else "")
                    for c, profiles in sorted(by_card.items())
                )
                + ")"
            )
        return said


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


@dataclass(frozen=True)
class ProcessFacts:
    """A compute process the driver reports on a card."""

    pid: int
    used_memory_mib: Optional[int] = None


def _memory_busy(used_mib: Optional[int], mem_busy_mib: int) -> bool:
    return used_mib is not None and used_mib >= mem_busy_mib


@dataclass(frozen=True)
class SliceFacts:
    """One MIG device of a card in MIG mode, as a probe could read it.

    A MIG device is what a job on a MIG card is given
    (``CUDA_VISIBLE_DEVICES=MIG-<uuid>``): a compute instance inside a GPU
    instance. Several compute instances may share one GPU instance (profiles
    "1c.3g.71gb" and "2c.3g.71gb" are two compute instances of one 3g.71gb GPU
    instance); they have their own SMs but share that GPU instance's memory, so
    each of them reads the GPU instance's memory total and used.

    ``None`` means the driver did not say; a slice that could not be read at
    all is kept with its index and nothing else, never dropped, since it may
    still hold someone's work. Utilisation is not part of it: drivers do not
    report it for MIG devices.
    """

    #: the MIG device's index on its card: ``nvidia-smi -L``'s "Device N",
    #: NVML's ``nvmlDeviceGetMigDeviceHandleByIndex``
    index: int
    #: "MIG-..." (older drivers: "MIG-GPU-<card uuid>/<gi>/<ci>"), what
    #: CUDA_VISIBLE_DEVICES names it by
    uuid: Optional[str] = None
    #: the profile as NVIDIA names it: "1g.18gb", or "1c.3g.71gb" for a compute
    #: instance that shares its GPU instance with others
    profile: Optional[str] = None
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    #: ``None`` when they could not be read (not the same as "none")
    processes: Optional[tuple[ProcessFacts, ...]] = ()

    def in_use(self, mem_busy_mib: int) -> bool:
        """Whether something holds this slice, by either signal (as :meth:`CardFacts.in_use`)."""
        return bool(self.processes) or _memory_busy(self.memory_used_mib, mem_busy_mib)


@dataclass(frozen=True)
class CardFacts:
    """What a probe could read about one card. ``None`` means "not available".

    A card in MIG mode (``mig_mode`` True) is split into ``slices``, and its
    whole-card fields keep their whole-card meaning:

    - ``utilization_pct`` is ``None``: drivers do not report utilisation in MIG
      mode, and a zero would read as idle;
    - ``memory_used_mib`` is what the driver reports for the whole card, which
      counts every slice's memory and what MIG itself sets aside, so an idle
      MIG card may read several GiB used; each slice has its own;
    - ``processes`` is every process the driver reports on the card, on any
      slice. Each slice lists those of them it could be told to run on it (by
      the slice's own list, or by the GPU and compute instance ids the card's
      list carries); a process whose slice cannot be told is on the card's
      list only. So the card's list is never shorter than its slices' together,
      and a process is never dropped for not matching a slice.
    """

    index: int
    uuid: Optional[str] = None
    name: Optional[str] = None
    pci_bus_id: Optional[str] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    utilization_pct: Optional[int] = None
    temperature_c: Optional[int] = None
    power_w: Optional[float] = None
    #: ``None`` when the process list could not be read (not the same as "none")
    processes: Optional[tuple[ProcessFacts, ...]] = ()
    #: why the card must not be handed out; empty when healthy or not checked
    health: tuple[str, ...] = ()
    #: True when the card is split into MIG devices, False when it is whole
    #: (a card that cannot do MIG is whole, and so is one nobody said is split:
    #: every reading was, before MIG); ``None`` when it could not be told
    mig_mode: Optional[bool] = False
    #: the MIG mode the card takes at its next reset, where that differs from
    #: ``mig_mode`` (True: it waits for a reset to be split; False: to be whole
    #: again); ``None`` when nothing is pending or it could not be told
    mig_pending: Optional[bool] = None
    #: the MIG devices of a card in MIG mode, by index; ``()`` on a whole card
    #: (or a MIG card with none made yet); ``None`` when they could not be listed
    slices: Optional[tuple[SliceFacts, ...]] = ()

    def in_use(self, mem_busy_mib: int) -> bool:
        """Whether something holds this card, or any part of it, by either signal.

        The process list names a holder, but inside a container it is empty
        (the driver reports host pids); memory used is a per-device counter that
        reads the same everywhere. Either one is enough. On a MIG card either
        signal on any slice is enough too, and the card's own memory used still
        counts, so a MIG card whose driver reports memory in use (an idle one
        may: it counts what MIG sets aside) is never taken for a whole idle card.
        """
        if self.processes or any(s.in_use(mem_busy_mib) for s in self.slices or ()):
            return True
        return _memory_busy(self.memory_used_mib, mem_busy_mib)


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
    it is :mod:`~tpnode_tui.topology`'s to say. A card with nothing known at all
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


@dataclass(frozen=True)
class ProbeReading:
    """One reading of the node's cards by one probe."""

    source: str
    cards: tuple[CardFacts, ...] = ()
    #: how many cards the probe found; ``None`` when it could not tell
    count: Optional[int] = None
    #: False when use from outside the platform could not be read
    external_probe_ok: bool = True
    #: in plain words, what could not be read and why (``None`` when all went well)
    problem: Optional[str] = None
    #: how the cards are connected, where the probe could read it (None: not known)
    topology: Optional[Topology] = None

    def card(self, index: int) -> Optional[CardFacts]:
        for c in self.cards:
            if c.index == index:
                return c
        return None

    @property
    def model_name(self) -> str:
        return next((c.name for c in self.cards if c.name), "")


@dataclass(frozen=True)
class RunAs:
    """The account a process job's command runs as, as the kernel named the caller.

    Only a privileged launcher (the agent) can switch to it; the in-process
    allocator runs commands as its own account and leaves this unset.
    """

    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    home: str


@dataclass(frozen=True)
class JobSpec:
    """What to launch. ``command`` is an argv list, never a shell string."""

    run_id: str
    cards: int
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    kind: str = "job"
    owner: str = ""
    #: unix seconds; reservations end then (their workload exits)
    expires_at: Optional[float] = None
    #: the allocation lock's fencing number when the cards were picked; set by the allocator
    fence: Optional[int] = None
    #: the owner's uid, recorded so that rules compare accounts, not names
    uid: Optional[int] = None
    #: the command's environment and working directory (process runtime); None: the launcher's
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: the account to run the command as (process runtime); None: the launcher's own
    run_as: Optional[RunAs] = None
    #: how the cards must be placed on the node's topology: None (the best set free
    #: now), "same-switch" or "contiguous" (see tpnode_tui.topology.choose). How the
    #: cards are chosen, not what the job is: not recorded with it
    placement: Optional[str] = None
    #: the MIG profile asked for ("1g.18gb"): the job gets one MIG slice of it
    #: instead of whole cards (``cards`` is then 1); None: whole cards
    slice: Optional[str] = None
    #: the MIG slices it was given; set by the allocator, as ``fence`` is
    slices: tuple[SliceRef, ...] = ()

    @property
    def wants(self) -> str:
        """What it asks for, in a few words: "2 cards", "4 cards same-switch", "a 1g.18gb MIG slice"."""
        return wanted_words(self.cards, self.slice, self.placement)


@dataclass(frozen=True)
class JobState:
    """A platform job as its source of truth (labels, state file) says now."""

    name: str
    run_id: str
    gpus: tuple[int, ...]
    status: str
    kind: str = "job"
    owner: str = ""
    image: Optional[str] = None
    command: tuple[str, ...] = ()
    started_at: Optional[float] = None
    expires_at: Optional[float] = None
    exit_code: Optional[int] = None
    pid: Optional[int] = None
    #: fencing number of the allocation that placed it (None: placed by hand or by an old version)
    fence: Optional[int] = None
    #: what could not be understood in its labels or record, in plain words
    problems: tuple[str, ...] = ()
    #: the owner's uid where the job recorded one
    uid: Optional[int] = None
    #: how it ended, where the exit code does not say it all ("killed by SIGKILL after 10 s")
    note: str = ""
    #: the docker container's full id (docker runtime), to tell its processes by their cgroup
    container_id: Optional[str] = None
    #: the job's own cgroup directory (process runtime, where the node allows one)
    cgroup: Optional[str] = None
    #: the MIG slices it holds (a slice job holds no whole card: ``gpus`` is empty)
    slices: tuple[SliceRef, ...] = ()

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def holding(self) -> str:
        """What it holds, in a few words: "cards 0,1", "slice 1g.18gb of card 1"."""
        return holding_words(self.gpus, self.slices)

    @property
    def cards(self) -> tuple[int, ...]:
        """Every card it holds or holds a slice of: what the node's log files it under."""
        return tuple(sorted({*self.gpus, *(ref.card for ref in self.slices)}))

    @property
    def key(self) -> str:
        """How the job is named and asked for: its run id, or its container or
        record name when it has none (a container labelled by hand)."""
        return self.run_id or self.name


@dataclass(frozen=True)
class Launched:
    """What a launch or reservation got."""

    gpus: tuple[int, ...]
    job: JobState
    #: True when the run id already held cards and nothing new was started
    existing: bool = False
    #: set when the cards were handed out while use from outside could not be probed
    warning: Optional[str] = None
    #: the MIG slices it got (a slice job gets no whole card)
    slices: tuple[SliceRef, ...] = ()

    @property
    def holding(self) -> str:
        return holding_words(self.gpus, self.slices)


def claims_overlap(a: JobState, b: JobState) -> bool:
    """Whether two jobs claim any of the same hardware: a card both list, a MIG
    slice both list, or a card one lists whole on which the other holds a slice."""
    cards_a, cards_b = set(a.gpus), set(b.gpus)
    if cards_a & cards_b:
        return True
    if {s.uuid for s in a.slices} & {s.uuid for s in b.slices}:
        return True
    return bool(cards_a & {s.card for s in b.slices} or cards_b & {s.card for s in a.slices})


#: Whom a process on a card belongs to (:attr:`HolderInfo.belongs`):
#: the job or reservation that holds the card; anyone else on a held card;
#: a process on a card nobody holds; or a pid this machine cannot look at.
HOLDER, INTRUDER, EXTERNAL, UNKNOWN = "holder", "intruder", "external", "unknown"
BELONGS = (HOLDER, INTRUDER, EXTERNAL, UNKNOWN)


@dataclass(frozen=True)
class HolderInfo:
    """Who a driver-reported process is, as far as this machine can tell.

    ``visible`` is False when the pid does not exist here (the driver reports
    host pids; from inside a container they belong to another PID namespace).
    Such a holder is still shown: a card is never hidden because its holder
    cannot be named.
    """

    pid: int
    used_memory_mib: Optional[int] = None
    visible: bool = False
    user: Optional[str] = None
    command: Optional[str] = None
    #: the full id of the container it runs in, from its cgroup
    container: Optional[str] = None
    started_at: Optional[float] = None
    #: one of BELONGS: "holder" (the card's job, or its reservation's owner),
    #: "intruder" (anyone else on a held card), "external" (on a card nobody
    #: holds) or "unknown" (a pid this machine cannot look at)
    belongs: str = UNKNOWN
    #: the process's real uid (None when not visible)
    uid: Optional[int] = None
    #: the container as people know it: its name and image (docker runtime)
    container_name: Optional[str] = None
    container_image: Optional[str] = None
    #: the run id of another platform job this process is part of, when it uses a
    #: card that job was not given: still a squatter here, but ended with ``stop``
    job_elsewhere: Optional[str] = None


#: Who took a card out of service: an operator, or the XID watcher.
DRAIN_SOURCES = ("operator", "xid")


@dataclass(frozen=True)
class Drain:
    """A card taken out of service until an operator puts it back.

    Drains live in the state dir (:mod:`~tpnode_tui.drains`) and outlive
    restarts: a card drained for a fault must not come back because the
    agent restarted before the card was reset.
    """

    card: int
    #: in plain words, what is wrong and what to do
    reason: str
    #: the account that drained it ("xid" for the XID watcher)
    by: str
    #: unix seconds
    at: float
    #: "operator" or "xid"
    source: str = "operator"
    #: the XID that drained it, when one did
    xid: Optional[int] = None


@dataclass(frozen=True)
class SliceView:
    """One MIG slice as displayed, under its card: its state and everything said about it."""

    card: int
    facts: SliceFacts
    #: one of SLICE_STATES
    state: str
    run_id: Optional[str] = None
    job: Optional[JobState] = None
    #: the processes the driver lists on this slice, each told apart against its holder
    holders: tuple[HolderInfo, ...] = ()
    #: why it is not free, in plain words (see :class:`SliceState`)
    reason: Optional[str] = None
    #: what is wrong on a slice that keeps its state: an intruder, two claimants
    warning: Optional[str] = None

    @property
    def index(self) -> int:
        return self.facts.index

    @property
    def intruders(self) -> tuple[int, ...]:
        return tuple(h.pid for h in self.holders if h.belongs == INTRUDER)


@dataclass(frozen=True)
class CardView:
    """One card as displayed: its state and everything said about it.

    A card in MIG mode is in state "mig" (split into slices: see them) and has
    one :class:`SliceView` per MIG device in ``slices``; its ``holders`` are every
    process on it, each told apart against the holder of the slice it runs on.
    """

    index: int
    state: str
    facts: Optional[CardFacts] = None
    run_id: Optional[str] = None
    job: Optional[JobState] = None
    holders: tuple[HolderInfo, ...] = ()
    #: why the card is unhealthy, drained or unverified, in plain words
    reason: Optional[str] = None
    #: what is wrong on a card that keeps its state: a health problem, a drain
    #: or an intruder on a card a job holds, a recent XID
    warning: Optional[str] = None
    #: the card's drain, on a drained card and on a held card drained under its job
    drain: Optional[Drain] = None
    #: its MIG slices, one per MIG device the driver reports, in index order
    slices: tuple[SliceView, ...] = ()

    @property
    def intruders(self) -> tuple[int, ...]:
        """Pids of the processes of someone else on this held card."""
        return tuple(h.pid for h in self.holders if h.belongs == INTRUDER)


@dataclass(frozen=True)
class QueuedLaunch:
    """A launch that waits for its turn: queued for cards, or waiting for the lock.

    What everyone may see of it: never its environment, which may hold secrets.
    """

    run_id: str
    cards: int
    owner: str
    queued_at: float
    kind: str = "job"
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    uid: Optional[int] = None
    #: "queued" (waiting for cards), "waiting" (for the allocation lock) or
    #: "placing" (has the lock; too late to cancel)
    state: str = "queued"
    #: what it waits for, in plain words
    waiting_for: Optional[str] = None
    #: the MIG profile it asks for a slice of; None: whole cards
    slice: Optional[str] = None
    #: how its cards must sit on the topology ("same-switch", "contiguous"); None: any
    placement: Optional[str] = None

    @property
    def wants(self) -> str:
        return wanted_words(self.cards, self.slice, self.placement)


@dataclass(frozen=True)
class NodeSnapshot:
    """Everything one poll learned, for display. Built afresh each time."""

    taken_at: float
    host: str
    occupancy: GpuOccupancy
    cards: tuple[CardView, ...]
    jobs: tuple[JobState, ...]
    probe: ProbeReading
    series: str = ""
    runtime: str = ""
    #: the runtime's kind, "docker" or "process": a docker launch names an image
    runtime_kind: str = ""
    #: TUNEPLANE_ALLOW_UNVERIFIED: cards are handed out even while use from outside cannot be probed
    allow_unverified: bool = False
    #: TUNEPLANE_MEM_BUSY_MIB: memory in use from which a card counts as held
    mem_busy_mib: int = 512
    lock: str = ""
    #: who holds the allocation lock or why it cannot be had (Redis down); None when free
    lock_state: Optional[str] = None
    explain: str = ""
    #: launches waiting their turn, in order
    queue: tuple[QueuedLaunch, ...] = ()
    #: live reservations whose owner has used none of their cards for
    #: TUNEPLANE_IDLE_RESERVATION_MIN or longer: run id -> unix seconds since when
    idle: dict[str, float] = field(default_factory=dict)
    #: where XID events are read from ("nvml", "kmsg", "simulated"); "" when they are not
    xid_watch: str = ""
    #: why XID events are not watched, in plain words; None while they are
    xid_problem: Optional[str] = None

    @property
    def intruder_cards(self) -> tuple[int, ...]:
        """Cards on which someone other than their holder has a process."""
        return tuple(c.index for c in self.cards if c.intruders)


@dataclass(frozen=True)
class Evicted:
    """One process evict acted on (or, in a dry run, would)."""

    card: int
    pid: int
    user: Optional[str]
    uid: Optional[int]
    command: Optional[str]
    #: "external" or "intruder"
    belongs: str
    used_memory_mib: Optional[int]
    #: "listed" (dry run), "ended" (after SIGTERM), "killed", "running" (still, after the
    #: grace period), "gone" (before it was signalled) or "failed" (could not be signalled)
    outcome: str
    #: what became of it, in plain words
    fate: str
    #: when the process started (seconds since the epoch) as the node read it: naming
    #: it back to evict signals that process only, never a later one given its pid
    started_at: Optional[float] = None


@dataclass(frozen=True)
class EvictReport:
    """What evict did on one card (in a dry run: what it would do), process by process."""

    card: int
    dry_run: bool
    kill: bool
    grace_s: float
    processes: tuple[Evicted, ...]


@dataclass(frozen=True)
class Sample:
    """A moment of a card's history: one poll (``seconds`` 0), or the average of
    the polls of ``seconds`` seconds from ``at``."""

    at: float
    seconds: float
    utilization_pct: Optional[float]
    memory_used_mib: Optional[float]
    power_w: Optional[float]
    temperature_c: Optional[float]
