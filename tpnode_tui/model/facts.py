"""What a probe reads off the driver: per card, per MIG slice, per process.

A field a driver or probe cannot supply is ``None`` (shown as "N/A"), never an
exception and never a made-up zero: zero MiB used would read as "idle".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.topology import Topology


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
    whole-card fields keep their whole-card meaning: ``utilization_pct`` is
    ``None`` (drivers do not report it in MIG mode, and a zero would read as
    idle); ``memory_used_mib`` is the whole card's, counting what MIG sets aside;
    ``processes`` is every process on the card, never shorter than its slices'
    lists together, so a process whose slice cannot be told is never dropped.
    See docs/architecture.md, section 'One look at the node'.
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
    #: its device minor: its device file is ``/dev/nvidia<minor>``, which is not
    #: always its index; ``None`` when the probe could not read it (then a job
    #: cannot be fenced to it)
    minor: Optional[int] = None
    #: uncorrectable ECC errors over the card's life (NVML's aggregate counter, which a
    #: reboot keeps): what a drain compares a later check with. None: not read, or no ECC
    ecc_uncorrected_total: Optional[int] = None

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
    #: where ``topology`` is None and reading again cannot change that (a
    #: simulated node whose file has none): why, in plain words. None while it
    #: may yet be read (a first read not done, or one that failed): waiting helps
    topology_unknowable: Optional[str] = None

    def card(self, index: int) -> Optional[CardFacts]:
        for c in self.cards:
            if c.index == index:
                return c
        return None

    @property
    def model_name(self) -> str:
        return next((c.name for c in self.cards if c.name), "")
