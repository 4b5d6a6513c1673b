"""The platform's jobs: what to launch (JobSpec), what runs (JobState), what waits (QueuedLaunch).

A job is read from where it lives (container labels, the process runtime's
state file) on every poll; these are that reading, frozen, never a copy that
is kept and updated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from tpnode_tui.model.words import cards_words

#: Job statuses that hold cards. A job that exited is still listed until it is
#: reclaimed, but it gave its GPU memory back when it ended.
LIVE_STATUSES = frozenset({"running", "created", "paused", "restarting"})


JOB_KINDS = ("job", "reservation")


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


def visible_devices(gpus: Iterable[int], slices: Iterable[SliceRef] = (), *, fenced: bool = False) -> dict[str, str]:
    """What points CUDA at a job's (or a reservation's shell's) cards or MIG
    slices: the one answer for a job's own environment, a shell's, and
    ``tpnode-tui env``.

    The cards by the driver's indices (PCI bus order, as nvidia-smi shows them,
    which ``CUDA_DEVICE_ORDER`` asks CUDA to number by too: it numbers the
    fastest first otherwise), a MIG slice by its uuid (an index would name the
    whole card). Inside a fence (``fenced``) the driver shows a process only the
    cards it may open, and CUDA numbers those from 0, as in a Slurm job with
    ``ConstrainDevices`` or a container: the node's indices would name cards it
    cannot see, so ``CUDA_VISIBLE_DEVICES`` counts from 0 there. A uuid means
    the same inside and out; ``NVIDIA_VISIBLE_DEVICES`` keeps the node's indices.
    """
    refs = tuple(slices)
    cards = tuple(gpus)
    devices = ",".join(s.uuid for s in refs) if refs else ",".join(map(str, cards))
    visible = ",".join(str(n) for n in range(len(cards))) if fenced and cards and not refs else devices
    return {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NVIDIA_VISIBLE_DEVICES": devices}


def holding_words(gpus: Iterable[int], slices: Iterable[SliceRef] = ()) -> str:
    """What a job holds, in a few words: "cards 0,1", "slice 1g.18gb of card 1",
    "card 0 and slice 1g.18gb of card 1", "no cards"."""
    cards = tuple(gpus)
    parts = [s.words() for s in slices]
    if cards or not parts:
        parts.insert(0, cards_words(cards))
    return " and ".join(parts)


#: How a job's processes are kept to its own cards' device files, in words
#: (:attr:`DeviceFence.mechanism`): a device program on its cgroup v2, a deny
#: list on its cgroup v1, or, for a container, the engine's own device cgroup.
FENCE_MECHANISMS = {
    "cgroup-v2": "a cgroup v2 device program",
    "cgroup-v1": "a cgroup v1 device list",
    "docker": "Docker's device cgroup",
}
#: What a job says about its fence when its runtime said nothing: not fenced,
#: since a fence nobody vouches for is none.
FENCE_NOT_SAID = "its node did not say whether it is fenced"


@dataclass(frozen=True)
class DeviceFence:
    """Whether a job can open only its own cards' device files: by what, or why not.

    ``CUDA_VISIBLE_DEVICES`` tells a job which cards are its own and binds it
    to nothing; a fenced job's processes cannot open another card's device
    file, because the kernel refuses the open. Exactly one of the two fields is
    set, so a job is never both fenced and not, nor neither: "not fenced" always
    says why, for the person who has to decide whether that is acceptable.
    The same answers for a node: whether its runtime can fence jobs at all.
    """

    #: a key of :data:`FENCE_MECHANISMS`; "" when not fenced
    mechanism: str = ""
    #: why not, in plain words; "" when fenced
    problem: str = FENCE_NOT_SAID

    def __post_init__(self) -> None:
        if bool(self.mechanism) == bool(self.problem):
            raise ValueError(f"a fence has a mechanism or a problem, not {self.mechanism!r} and {self.problem!r}")

    @classmethod
    def by(cls, mechanism: str) -> DeviceFence:
        return cls(mechanism=mechanism, problem="")

    @classmethod
    def missing(cls, problem: str) -> DeviceFence:
        return cls(mechanism="", problem=problem)

    @property
    def fenced(self) -> bool:
        return bool(self.mechanism)

    @property
    def how(self) -> str:
        """The mechanism in words ("a cgroup v2 device program"); "" when not fenced."""
        return FENCE_MECHANISMS.get(self.mechanism, self.mechanism)


@dataclass(frozen=True)
class SliceMinors:
    """A MIG slice as its device files know it: its card's device minor and its
    GPU and compute instances' ids (which name its capabilities in ``mig-minors``)."""

    card: int
    gpu_instance: int
    compute_instance: int


@dataclass(frozen=True)
class DeviceGrant:
    """What a job was granted, in the numbers of the device files that reach it.

    A card's device file is ``/dev/nvidia<minor>``, and the minor is not always
    the card's index, so the allocator records the minors the probe read in
    the very reading it picked the cards from, under the allocation lock. A
    card or slice whose numbers that reading did not give is never guessed:
    ``unknown`` says which, and the job cannot be fenced to it.
    """

    #: the device minors of its whole cards
    cards: tuple[int, ...] = ()
    slices: tuple[SliceMinors, ...] = ()
    #: why the grant cannot be told in device numbers; "" when it can
    unknown: str = ""


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
    #: the allocation lock's lease token when the cards were picked; set by the allocator
    lease_token: Optional[int] = None
    #: the owner's uid, recorded so that rules compare accounts, not names
    uid: Optional[int] = None
    #: the command's environment and working directory (process runtime); None: the launcher's
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: the account to run the command as (process runtime); None: the launcher's own
    run_as: Optional[RunAs] = None
    #: how the cards must be placed on the node's topology: None (the best set free
    #: now), "same-switch" or "contiguous" (see tpnode_tui.core.placement.choose). How the
    #: cards are chosen, not what the job is: not recorded with it
    placement: Optional[str] = None
    #: the MIG profile asked for ("1g.18gb"): the job gets one MIG slice of it
    #: instead of whole cards (``cards`` is then 1); None: whole cards
    slice: Optional[str] = None
    #: the MIG slices it was given; set by the allocator, as ``lease_token`` is
    slices: tuple[SliceRef, ...] = ()
    #: its cards and slices in device numbers, for its device fence; set by the
    #: allocator from the reading it picked them from (None: not set)
    granted: Optional[DeviceGrant] = None

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
    #: lease token of the allocation that placed it (None: placed by hand or by an old version)
    lease_token: Optional[int] = None
    #: what could not be understood in its labels or record, in plain words
    problems: tuple[str, ...] = ()
    #: the owner's uid where the job recorded one
    uid: Optional[int] = None
    #: how it ended, where the exit code does not say it all ("killed by SIGKILL after 10 s")
    note: str = ""
    #: the docker container's full id (docker runtime), to tell its processes by their cgroup
    container_id: Optional[str] = None
    #: the job's own cgroup directory (process runtime, where the node allows one):
    #: its cgroup v2, else its v1 devices cgroup; a reservation's is its shell's
    cgroup: Optional[str] = None
    #: the MIG slices it holds (a slice job holds no whole card: ``gpus`` is empty)
    slices: tuple[SliceRef, ...] = ()
    #: whether its processes can open only its own cards' device files, as its runtime says
    device_fence: DeviceFence = DeviceFence()
    #: how many processes run in a reservation's shell (``tpnode-tui shell``): while
    #: any does, the reservation is in use and holds its cards
    shell_processes: int = 0
    #: the file its output is kept in, which its own account may read (process
    #: runtime); empty where the engine keeps it (docker). ``tpnode-tui logs`` shows either
    log: str = ""

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
class JobOutput:
    """A page of what a job wrote to its standard output and error, as its runtime keeps it.

    ``after`` is where the next page starts, to be given back as it is (an
    offset into the log file, or the engine's time of the last line read);
    ``more``: more was written already; ``ended``: the job has ended, so
    nothing is written after what is left. ``log``: the file it is kept in
    (empty where the engine keeps it)."""

    text: str
    after: str
    more: bool = False
    ended: bool = False
    log: str = ""


@dataclass(frozen=True)
class ShellEntry:
    """What ``tpnode-tui shell`` got: the caller's own process moved into a
    reservation's shell cgroup (or not, and why), and the exports to run with."""

    run_id: str
    #: the environment variables that point CUDA at the reservation's cards, as
    #: inside its fence when it is fenced (CUDA numbers the cards from 0 there)
    env: tuple[tuple[str, str], ...]
    #: whether the shell can open only the reservation's cards' device files
    device_fence: DeviceFence
    #: the cgroup the caller was moved into ("" when none could be made)
    cgroup: str = ""
    #: the reservation's cards and MIG slices, for the line the shell opens with
    gpus: tuple[int, ...] = ()
    slices: tuple[SliceRef, ...] = ()

    @property
    def holding(self) -> str:
        return holding_words(self.gpus, self.slices)


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
