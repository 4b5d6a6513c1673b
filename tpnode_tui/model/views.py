"""One card as every client shows it: its display state, holder, processes and whose each is.

The CLI's ``status --json``, the dashboard and the allocator all read these
views, so they can never disagree about a card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.facts import CardFacts, SliceFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.states import CardStateName, SliceStateName

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


#: Who took a card out of service: an operator, the XID watcher, or a check the card failed.
DRAIN_SOURCES = ("operator", "xid", "check")
#: the drains the node made itself: only these may it lift, after a check passes
NODE_DRAINS = ("xid", "check")


@dataclass(frozen=True)
class Drain:
    """A card taken out of service until an operator puts it back (or, for a
    drain the node made itself, a check that passes: TUNEPLANE_RETURN_AFTER_CHECK).

    Drains live in the state dir (:mod:`~tpnode_tui.state.drains`) and outlive
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
    #: "operator", "xid" or "check"
    source: str = "operator"
    #: the XID that drained it, when one did
    xid: Optional[int] = None
    #: the boot it was drained in (/proc/sys/kernel/random/boot_id); None: not recorded
    boot: Optional[str] = None
    #: it stays drained until the node has rebooted (an XID whose cure is a reboot)
    reboot: bool = False
    #: the card's uncorrectable ECC errors (over its life) when the node first read it
    #: drained; a check compares with it. None until then, or on a card without ECC
    ecc: Optional[int] = None
    #: the last XID the card reported after it was drained, and when
    later_xid: Optional[int] = None
    later_xid_at: Optional[float] = None

    @property
    def by_node(self) -> bool:
        """Made by the node itself (an XID, a failed check), not by an operator."""
        return self.source in NODE_DRAINS


@dataclass(frozen=True)
class SliceView:
    """One MIG slice as displayed, under its card: its state and everything said about it."""

    card: int
    facts: SliceFacts
    state: SliceStateName
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
    state: CardStateName
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
    #: its last check (tpnode-tui check), where one was made
    check: Optional[CardCheck] = None

    @property
    def intruders(self) -> tuple[int, ...]:
        """Pids of the processes of someone else on this held card."""
        return tuple(h.pid for h in self.holders if h.belongs == INTRUDER)


# ── whether a held card's holder uses it ───────────────────────────────────
# One rule for every reader that asks: the dashboard's idle mark, the idle
# reservations given back, and the usage ledger's idle minutes. Here, beside the
# views it reads, because the ledger (tpnode_tui.state) may not import the
# rules in tpnode_tui.core, its sibling layer.


def holder_present(
    holders: tuple[HolderInfo, ...], listed: bool, memory_mib: Optional[int], mem_busy_mib: int
) -> Optional[bool]:
    """Whether the card's (or slice's) holder has a process on it; None when that cannot be told.

    A process of theirs, or memory in use that no one else's process accounts
    for, since from inside a container the driver lists no process but memory
    reads the same everywhere. ``listed`` is False when the driver's process
    list could not be read; a pid this machine cannot look at leaves it
    unknown, as an unread list does: unknown is not "not used", and nothing
    is taken from anyone on an unknown.
    """
    if any(h.belongs == HOLDER for h in holders):
        return True
    intruded = any(h.belongs == INTRUDER for h in holders)
    if not intruded and memory_mib is not None and memory_mib >= mem_busy_mib:
        return True
    if not listed or any(h.belongs == UNKNOWN for h in holders):
        return None
    return False


#: whose a process is, when it is someone else's than a held card's holder
SOMEONE_ELSES = (INTRUDER, EXTERNAL)


def holder_memory(holders: tuple[HolderInfo, ...], listed: bool, memory_mib: Optional[int]) -> Optional[int]:
    """How much of a held card's (or slice's) memory in use is its holder's:
    all of it but what someone else's processes use, so that memory no one
    else's process accounts for is the holder's, as :func:`holder_present`
    counts it (from inside a container the driver lists pids this machine
    cannot see, the holder's among them). None when that cannot be told: the
    process list not read, or another's process whose memory is not given."""
    if memory_mib is None or not listed:
        return None
    theirs = [h.used_memory_mib for h in holders if h.belongs in SOMEONE_ELSES]
    if any(m is None for m in theirs):
        return None
    return max(0, memory_mib - sum(m or 0 for m in theirs))


def intruders_memory(holders: tuple[HolderInfo, ...], listed: bool) -> tuple[Optional[bool], Optional[int]]:
    """Whether someone else's process is on a held card (None: the list not read),
    and the memory those use (None: none there, or not given)."""
    theirs = [h.used_memory_mib for h in holders if h.belongs in SOMEONE_ELSES]
    if not theirs:
        return (False if listed else None), None
    return True, None if any(m is None for m in theirs) else sum(m or 0 for m in theirs)


def holder_on_card(card: CardView, mem_busy_mib: int) -> Optional[bool]:
    """:func:`holder_present` on a whole card; None for a card the driver did not report."""
    f = card.facts
    if f is None:
        return None
    return holder_present(card.holders, f.processes is not None, f.memory_used_mib, mem_busy_mib)


def holder_on_slice(piece: SliceView, mem_busy_mib: int) -> Optional[bool]:
    """:func:`holder_present` on one MIG slice: its own processes and memory (siblings
    of one GPU instance share it, but a sibling in use is never handed out)."""
    f = piece.facts
    return holder_present(piece.holders, f.processes is not None, f.memory_used_mib, mem_busy_mib)


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
