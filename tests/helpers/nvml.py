"""An in-memory stand-in for the ``pynvml`` module (nvidia-ml-py).

It answers like nvidia-ml-py and raises nvidia-ml-py's own error classes, so
the probe's ``except pynvml.NVMLError_NotSupported`` is tested against the
real hierarchy (the real module imports fine without a driver; only
``nvmlInit`` fails). Every call is a dictionary lookup, so benchmarks can use
it as a driver that costs nothing.

    fake = FakeNvml([FakeCard(memory_used_mib=30000), FakeCard(lost=True)])
    fake.cards[0].errors["temperature"] = NVMLError_NotSupported
    release = fake.hang("memory")          # that call blocks until release.set()
    probe = NvmlProbe(nvml=fake)

Field names for ``errors`` and ``hang``: handle, uuid, name, pci, minor (the device minor), memory_v2
(memory info version 2), memory (version 1), utilization, temperature, power, processes, retired_pages, ecc
(the volatile count), ecc_total (the aggregate count), link_gen, link_gen_max, link_width, link_width_max
(the PCIe link), pstate, remapped_rows, clocks_event, clocks_throttle, field_values, supported_events, register_events,
mig_mode, max_mig (the MIG device count), mig_handle (every MIG device handle of the card),
topology (nvmlDeviceGetTopologyCommonAncestor, raised when either card has it), nvlink_state,
nvlink_remote_type, nvlink_remote_pci.

MIG, as nvidia-ml-py answers it (``nvmlDeviceGetMigMode`` -> [current, pending],
``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex``,
which raises NotFound for an empty slot; a MIG device handle answers
``nvmlDeviceGetUUID`` "MIG-...", ``nvmlDeviceGetName`` "NVIDIA H200 MIG 1g.18gb",
``nvmlDeviceGetGpuInstanceId``, ``nvmlDeviceGetComputeInstanceId``, memory
info and its own processes; the card's process infos carry the instance ids):

    card = FakeCard(mig=True, slices=[FakeSlice("3g.71gb", gpu_instance_id=2), None,
                                      FakeSlice("1g.18gb", gpu_instance_id=9, processes=[(4242, 3000)])])
    card.slices[0].errors["memory_v2"] = NVMLError_Unknown     # field names as for a card
    FakeCard(mig=False, mig_pending=True)                       # MIG enabled, waiting for a reset
    consumer_style()                                             # a card that cannot do MIG

In MIG mode the card's utilisation raises NotSupported, as the real call does,
and its process list is every slice's (with their instance ids) followed by
``processes``, whose entries may name their own ids: (pid, MiB, gi, ci).

Topology, as a real node's driver reports it (every pair's common PCIe
ancestor is ``fake.default_ancestor`` unless set; a card has no NVLink, and
every link of it reads NotSupported, until one is wired):

    fake.ancestors[(0, 1)] = NVML_TOPOLOGY_SINGLE   # cards 0 and 1 under one PCIe switch
    fake.nvlink(0, 1, 2)                             # two NVLinks between cards 0 and 1
    fake.nvswitch(18)                                # every card: 18 NVLinks into the NVSwitches

Events, as nvidia-ml-py's event API delivers them (``nvmlEventSetCreate``,
``nvmlDeviceRegisterEvents``, ``nvmlEventSetWait_v2``):

    fake.xid(1, 79)                        # card 1 reports XID 79
    fake.event(0, EVENT_DOUBLE_BIT_ECC)    # another registered event type
    fake.fail_wait(NVMLError_GpuIsLost)    # the next wait raises this
    fake.cards[2].supported_events &= ~EVENT_GPU_UNAVAILABLE   # registering it raises NotSupported

A wait with nothing queued blocks for its timeout and raises
NVMLError_Timeout, as the real call does; an event for a card or type not
registered in that set is not delivered to it.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

import pynvml
from pynvml import (  # noqa: F401  (re-exported for tests)
    NVML_AGGREGATE_ECC,
    NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_TEMPERATURE_GPU,
    NVML_VOLATILE_ECC,
    NVMLError,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_InvalidArgument,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotFound,
    NVMLError_NotSupported,
    NVMLError_Timeout,
    NVMLError_Uninitialized,
    NVMLError_Unknown,
    NVMLLibraryMismatchError,
)

MIB = 1024 * 1024

HW_SLOWDOWN = pynvml.nvmlClocksEventReasonHwSlowdown
HW_THERMAL_SLOWDOWN = pynvml.nvmlClocksEventReasonHwThermalSlowdown
HW_POWER_BRAKE_SLOWDOWN = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
SW_POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap

NVML_TOPOLOGY_INTERNAL = pynvml.NVML_TOPOLOGY_INTERNAL
NVML_TOPOLOGY_SINGLE = pynvml.NVML_TOPOLOGY_SINGLE
NVML_TOPOLOGY_MULTIPLE = pynvml.NVML_TOPOLOGY_MULTIPLE
NVML_TOPOLOGY_HOSTBRIDGE = pynvml.NVML_TOPOLOGY_HOSTBRIDGE
NVML_TOPOLOGY_NODE = pynvml.NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = pynvml.NVML_TOPOLOGY_SYSTEM
NVLINK_GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
NVLINK_SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

EVENT_XID = pynvml.nvmlEventTypeXidCriticalError
EVENT_DOUBLE_BIT_ECC = pynvml.nvmlEventTypeDoubleBitEccError
EVENT_GPU_UNAVAILABLE = pynvml.nvmlEventTypeGpuUnavailableError
RECOVERY_ACTION_FIELD = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_NVML_SUCCESS = pynvml.NVML_SUCCESS
_NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


#: the instance id NVML gives a process on a card not in MIG mode
NO_INSTANCE = 0xFFFFFFFF


@dataclass(eq=False)  # MIG device handles are told apart by identity, like cards
class FakeSlice:
    """One MIG device (a compute instance in a GPU instance) of a FakeCard."""

    profile: str = "1g.18gb"
    gpu_instance_id: int = 9
    compute_instance_id: int = 0
    uuid: Optional[str] = None  # made up from the card and slot when None
    memory_total_mib: int = 16384
    memory_used_mib: int = 13
    #: (pid, used MiB or None)
    processes: list[tuple[int, Optional[int]]] = field(default_factory=list)
    #: field name -> error class that call raises on this MIG device
    errors: dict[str, type] = field(default_factory=dict)
    #: the card it is a slot of, set when its handle is first asked for
    parent: Optional[FakeCard] = field(default=None, repr=False)


@dataclass(eq=False)  # cards are told apart by identity, like handles
class FakeCard:
    name: str = "NVIDIA H200"
    uuid: Optional[str] = None  # made up from the index when None
    pci_bus_id: Optional[str] = None
    #: its device minor (/dev/nvidia<minor>); its index when None, as on most machines
    minor: Optional[int] = None
    memory_total_mib: int = 143771
    memory_used_mib: int = 1
    #: what the driver keeps for itself: counted as used by memory info v1 only
    memory_reserved_mib: int = 0
    utilization_pct: int = 0
    temperature_c: int = 31
    power_w: float = 74.38
    #: (pid, used MiB or None when the driver cannot say)
    processes: list[tuple[int, Optional[int]]] = field(default_factory=list)
    retired_pages_pending: bool = False
    #: uncorrectable ECC errors since the driver loaded (volatile), and over the card's life (aggregate)
    ecc_uncorrected: int = 0
    ecc_uncorrected_total: int = 0
    row_remap_pending: bool = False
    row_remap_failure: bool = False
    clocks_reasons: int = 0
    #: every call on this card raises NVMLError_GpuIsLost
    lost: bool = False
    #: field name -> error class that call raises
    errors: dict[str, type] = field(default_factory=dict)
    #: event types this card can deliver
    supported_events: int = EVENT_XID | EVENT_DOUBLE_BIT_ECC | EVENT_GPU_UNAVAILABLE
    #: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, or None when the driver does not report it
    recovery_action: Optional[int] = None
    #: MIG mode now, and after the next reset (None: the same as now)
    mig: bool = False
    mig_pending: Optional[bool] = None
    #: MIG devices by slot; None is an empty slot
    slices: list[Optional[FakeSlice]] = field(default_factory=list)
    max_mig_devices: int = 7
    #: its PCIe link now, and the most it and the machine can do
    link_gen: int = 5
    link_gen_max: int = 5
    link_width: int = 16
    link_width_max: int = 16
    #: its performance state: 0 at full speed, 8 idle and saving power
    pstate: int = 0
    #: its NVLinks, in order: (what is at the far end, that device's PCI bus id);
    #: None for a link that is down. No links: NVLink is not supported on it.
    nvlinks: list[Optional[tuple[int, str]]] = field(default_factory=list)


@dataclass(eq=False)
class FakeEventSet:
    #: card -> event types registered for it
    registered: dict = field(default_factory=dict)
    freed: bool = False


class FakeNvml:
    """Looks like the ``pynvml`` module to the probe."""

    # the parts of nvidia-ml-py the probe uses, taken from the real module
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_NotFound = NVMLError_NotFound
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVMLError_Timeout = NVMLError_Timeout
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = EVENT_XID
    nvmlEventTypeDoubleBitEccError = EVENT_DOUBLE_BIT_ECC
    nvmlEventTypeGpuUnavailableError = EVENT_GPU_UNAVAILABLE
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = RECOVERY_ACTION_FIELD
    NVML_SUCCESS = _NVML_SUCCESS
    nvmlClocksEventReasonHwSlowdown = HW_SLOWDOWN
    nvmlClocksEventReasonHwThermalSlowdown = HW_THERMAL_SLOWDOWN
    nvmlClocksEventReasonHwPowerBrakeSlowdown = HW_POWER_BRAKE_SLOWDOWN
    NVML_TOPOLOGY_INTERNAL = NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU = NVLINK_GPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVLINK_SWITCH

    def __init__(
        self,
        cards: Optional[list[FakeCard]] = None,
        *,
        init_error: Optional[type] = None,
        init_failures: int = 1,
        count_error: Optional[type] = None,
    ) -> None:
        self.cards = list(cards) if cards is not None else [FakeCard() for _ in range(2)]
        #: nvmlInit raises this the first ``init_failures`` times it is called
        self.init_error = init_error
        self.init_failures = init_failures
        self.count_error = count_error
        self.calls: Counter = Counter()
        #: (card, card) -> nvmlDeviceGetTopologyCommonAncestor's level, either order
        self.ancestors: dict[tuple[int, int], int] = {}
        self.default_ancestor = NVML_TOPOLOGY_SYSTEM
        self._hangs: dict[str, threading.Event] = {}
        #: what the next waits return or raise, in order: (card, type, data) or an error class
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self.event_sets: list[FakeEventSet] = []

    # -- wiring ------------------------------------------------------------------
    def bus_id(self, card: FakeCard) -> str:
        return card.pci_bus_id or f"00000000:{0x18 + self.cards.index(card):02X}:00.0"

    def nvlink(self, a: int, b: int, count: int = 1) -> None:
        """``count`` NVLinks between cards ``a`` and ``b``, seen from both ends."""
        first, second = self.cards[a], self.cards[b]
        for _ in range(count):
            first.nvlinks.append((NVLINK_GPU, self.bus_id(second)))
            second.nvlinks.append((NVLINK_GPU, self.bus_id(first)))

    def nvswitch(self, links: int = 18, switches: int = 4) -> None:
        """Every card's ``links`` NVLinks into the NVSwitches, spread over ``switches``
        (each a PCI device of its own), as on an HGX board."""
        for card in self.cards:
            for link in range(links):
                card.nvlinks.append((NVLINK_SWITCH, f"00000000:{0xC0 + link % switches:02X}:00.0"))

    # -- scripting events ----------------------------------------------------
    def xid(self, index: int, xid: int) -> None:
        self.event(index, EVENT_XID, xid)

    def event(self, index: int, event_type: int, data: int = 0) -> None:
        self._events.put((self.cards[index], event_type, data))

    def fail_wait(self, error: type) -> None:
        self._events.put(error)

    def hang(self, what: str) -> threading.Event:
        """Make the call for ``what`` (a field name, or "init"/"count") block until the event is set."""
        event = threading.Event()
        self._hangs[what] = event
        return event

    def _enter(self, what: str, device: Optional[FakeCard | FakeSlice] = None) -> None:
        self.calls[what] += 1
        event = self._hangs.get(what)
        if event is not None:
            event.wait()
        if device is not None:
            card = device.parent if isinstance(device, FakeSlice) else device
            if card is not None and card.lost:
                raise NVMLError_GpuIsLost()
            error = device.errors.get(what)
            if error is not None:
                raise error()

    def _slot(self, mig: FakeSlice) -> tuple[int, int]:
        assert mig.parent is not None
        return self.cards.index(mig.parent), mig.parent.slices.index(mig)

    # -- library -----------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("init")
        if self.init_error is not None and self.init_failures > 0:
            self.init_failures -= 1
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self._enter("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._enter("count")
        if self.count_error is not None:
            raise self.count_error()
        return len(self.cards)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeCard:
        self._enter("handle_by_uuid")
        for card in self.cards:
            if not card.lost and self.nvmlDeviceGetUUID(card) == uuid:
                self._enter("handle", card)
                return card
        if any(card.lost for card in self.cards):
            raise NVMLError_GpuIsLost()  # as the driver answers while a card is lost: it cannot tell
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeCard:
        if not 0 <= index < len(self.cards):
            raise NVMLError_InvalidArgument()
        card = self.cards[index]
        self._enter("handle", card)
        return card

    # -- identity ------------------------------------------------------------
    def nvmlDeviceGetUUID(self, device: FakeCard | FakeSlice) -> str:
        self._enter("uuid", device)
        if isinstance(device, FakeSlice):
            card, slot = self._slot(device)
            return device.uuid or f"MIG-5a6ef5fb-0000-5000-8000-{card:06d}{slot:06d}"
        return device.uuid or f"GPU-1c0f8a1e-0000-4000-8000-{self.cards.index(device):012d}"

    def nvmlDeviceGetName(self, device: FakeCard | FakeSlice) -> str:
        self._enter("name", device)
        if isinstance(device, FakeSlice):
            assert device.parent is not None
            return f"{device.parent.name} MIG {device.profile}"
        return device.name

    def nvmlDeviceGetPciInfo(self, card: FakeCard) -> SimpleNamespace:
        self._enter("pci", card)
        return SimpleNamespace(busId=self.bus_id(card))

    def nvmlDeviceGetMinorNumber(self, card: FakeCard) -> int:
        self._enter("minor", card)
        return self.cards.index(card) if card.minor is None else card.minor

    # -- topology ------------------------------------------------------------
    def nvmlDeviceGetTopologyCommonAncestor(self, first: FakeCard, second: FakeCard) -> int:
        self._enter("topology", first)
        self._enter("topology", second)
        pair = (self.cards.index(first), self.cards.index(second))
        return self.ancestors.get(pair, self.ancestors.get(pair[::-1], self.default_ancestor))

    def _link(self, card: FakeCard, link: int, what: str) -> Optional[tuple[int, str]]:
        self._enter(what, card)
        if not card.nvlinks:
            raise NVMLError_NotSupported()
        if not 0 <= link < len(card.nvlinks):
            raise NVMLError_InvalidArgument()
        return card.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, card: FakeCard, link: int) -> int:
        return NVML_FEATURE_DISABLED if self._link(card, link, "nvlink_state") is None else NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, card: FakeCard, link: int) -> int:
        far = self._link(card, link, "nvlink_remote_type")
        if far is None:
            raise NVMLError_InvalidArgument()
        return far[0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, card: FakeCard, link: int) -> SimpleNamespace:
        far = self._link(card, link, "nvlink_remote_pci")
        if far is None:
            raise NVMLError_InvalidArgument()
        # the real struct's busId is a char array: bytes, not str
        return SimpleNamespace(busId=far[1].encode())

    # -- use ---------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, card: FakeCard | FakeSlice, version: Optional[int] = None) -> SimpleNamespace:
        total, used = card.memory_total_mib * MIB, card.memory_used_mib * MIB
        reserved = card.memory_reserved_mib * MIB if isinstance(card, FakeCard) else 0
        if version is None:
            self._enter("memory", card)
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        self._enter("memory_v2", card)
        if version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        return SimpleNamespace(version=version, total=total, reserved=reserved, used=used, free=total - used - reserved)

    def nvmlDeviceGetUtilizationRates(self, card: FakeCard) -> SimpleNamespace:
        self._enter("utilization", card)
        if card.mig:
            raise NVMLError_NotSupported()
        return SimpleNamespace(gpu=card.utilization_pct, memory=0)

    def nvmlDeviceGetTemperature(self, card: FakeCard, sensor: int) -> int:
        self._enter("temperature", card)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return card.temperature_c

    def nvmlDeviceGetPowerUsage(self, card: FakeCard) -> int:
        self._enter("power", card)
        return int(round(card.power_w * 1000))

    def nvmlDeviceGetComputeRunningProcesses(self, device: FakeCard | FakeSlice) -> list[SimpleNamespace]:
        self._enter("processes", device)
        if isinstance(device, FakeSlice):
            return [
                _info(pid, mib, device.gpu_instance_id, device.compute_instance_id) for pid, mib in device.processes
            ]
        listed = []
        if device.mig:
            for mig in device.slices:
                if mig is not None:
                    listed += [
                        _info(pid, mib, mig.gpu_instance_id, mig.compute_instance_id) for pid, mib in mig.processes
                    ]
        for pid, mib, *ids in device.processes:
            gi, ci = ids or (NO_INSTANCE, NO_INSTANCE)
            listed.append(_info(pid, mib, gi, ci))
        return listed

    # -- MIG -------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, card: FakeCard) -> list[int]:
        self._enter("mig_mode", card)
        pending = card.mig if card.mig_pending is None else card.mig_pending
        return [int(card.mig), int(pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, card: FakeCard) -> int:
        self._enter("max_mig", card)
        return card.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, card: FakeCard, index: int) -> FakeSlice:
        self._enter("mig_handle", card)
        if not card.mig:
            raise NVMLError_NotSupported()
        if not 0 <= index < card.max_mig_devices:
            raise NVMLError_InvalidArgument()
        mig = card.slices[index] if index < len(card.slices) else None
        if mig is None:
            raise NVMLError_NotFound()
        mig.parent = card
        self._enter("handle", mig)
        return mig

    def nvmlDeviceGetGpuInstanceId(self, device: FakeCard | FakeSlice) -> int:
        self._enter("gpu_instance_id", device)
        if not isinstance(device, FakeSlice):
            raise NVMLError_InvalidArgument()
        return device.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: FakeCard | FakeSlice) -> int:
        self._enter("compute_instance_id", device)
        if not isinstance(device, FakeSlice):
            raise NVMLError_InvalidArgument()
        return device.compute_instance_id

    # -- health --------------------------------------------------------------
    def nvmlDeviceGetRetiredPagesPendingStatus(self, card: FakeCard) -> int:
        self._enter("retired_pages", card)
        return NVML_FEATURE_ENABLED if card.retired_pages_pending else NVML_FEATURE_DISABLED

    def nvmlDeviceGetTotalEccErrors(self, card: FakeCard, error_type: int, counter_type: int) -> int:
        if counter_type == NVML_AGGREGATE_ECC:
            self._enter("ecc_total", card)
            return card.ecc_uncorrected_total if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0
        self._enter("ecc", card)
        if (error_type, counter_type) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            return 0
        return card.ecc_uncorrected

    def nvmlDeviceGetCurrPcieLinkGeneration(self, card: FakeCard) -> int:
        self._enter("link_gen", card)
        return card.link_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, card: FakeCard) -> int:
        self._enter("link_gen_max", card)
        return card.link_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, card: FakeCard) -> int:
        self._enter("link_width", card)
        return card.link_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, card: FakeCard) -> int:
        self._enter("link_width_max", card)
        return card.link_width_max

    def nvmlDeviceGetPerformanceState(self, card: FakeCard) -> int:
        self._enter("pstate", card)
        return card.pstate

    def nvmlDeviceGetRemappedRows(self, card: FakeCard) -> tuple[int, int, int, int]:
        self._enter("remapped_rows", card)
        return (0, 0, int(card.row_remap_pending), int(card.row_remap_failure))

    def nvmlDeviceGetCurrentClocksEventReasons(self, card: FakeCard) -> int:
        self._enter("clocks_event", card)
        return card.clocks_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, card: FakeCard) -> int:
        self._enter("clocks_throttle", card)
        return card.clocks_reasons

    # -- events --------------------------------------------------------------
    def nvmlDeviceGetIndex(self, card: FakeCard) -> int:
        self._enter("index", card)
        return self.cards.index(card)

    def nvmlDeviceGetSupportedEventTypes(self, card: FakeCard) -> int:
        self._enter("supported_events", card)
        return card.supported_events

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("event_set_create")
        event_set = FakeEventSet()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, card: FakeCard, event_types: int, event_set: FakeEventSet) -> None:
        self._enter("register_events", card)
        if event_types & ~card.supported_events:
            raise NVMLError_NotSupported()
        event_set.registered[card] = event_set.registered.get(card, 0) | event_types

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        self._enter("event_wait")
        if event_set.freed:
            raise NVMLError_Uninitialized()
        while True:
            try:
                item = self._events.get(timeout=timeout_ms / 1000)
            except queue.Empty:
                raise NVMLError_Timeout() from None
            if isinstance(item, type):
                raise item()
            card, event_type, data = item
            if event_set.registered.get(card, 0) & event_type:
                return SimpleNamespace(
                    device=card,
                    eventType=event_type,
                    eventData=data,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._enter("event_set_free")
        event_set.freed = True

    def nvmlDeviceGetFieldValues(self, card: FakeCard, field_ids: list[int]) -> list[SimpleNamespace]:
        self._enter("field_values", card)
        values = []
        for field_id in field_ids:
            known = field_id == RECOVERY_ACTION_FIELD and card.recovery_action is not None
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=0,
                    timestamp=0,
                    latencyUsec=0,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=_NVML_SUCCESS if known else _NVML_ERROR_NOT_SUPPORTED,
                    value=SimpleNamespace(uiVal=card.recovery_action if known else 0),
                )
            )
        return values


def _info(pid: int, mib: Optional[int], gi: int, ci: int) -> SimpleNamespace:
    """A process info as nvidia-ml-py gives it (usedGpuMemory None where the driver cannot say)."""
    return SimpleNamespace(
        pid=pid, usedGpuMemory=None if mib is None else mib * MIB, gpuInstanceId=gi, computeInstanceId=ci
    )


def consumer_style(**kw) -> FakeCard:
    """A card that cannot do MIG: the MIG calls raise NotSupported."""
    card = FakeCard(name="NVIDIA GeForce RTX 4090", **kw)
    for what in ("mig_mode", "max_mig", "mig_handle"):
        card.errors.setdefault(what, NVMLError_NotSupported)
    return card


def a100_style(**kw) -> FakeCard:
    """Ampere and Hopper report retired pages as not supported: row remapping replaced them."""
    card = FakeCard(**kw)
    card.errors.setdefault("retired_pages", NVMLError_NotSupported)
    return card


def h200_in_mig_mode() -> list[FakeCard]:
    """The node of tests/captures/h200-mig as NVML would answer it: card 0 in MIG
    mode with five MIG devices (two compute instances of one 3g.71gb GPU
    instance, a 2g.35gb, two 1g.18gb), a process on the first and on the
    fourth; card 1 whole. The same values as the capture's files."""

    def mig(profile: str, gi: int, ci: int, uuid: str, total: int, used: int, processes=()) -> FakeSlice:
        return FakeSlice(profile, gi, ci, f"MIG-{uuid}", total, used, list(processes))

    split = FakeCard(
        uuid="GPU-8f0d4c2e-31b7-6a5e-92c4-7d1e0b3a5f61",
        memory_used_mib=30444,
        temperature_c=36,
        power_w=182.61,
        mig=True,
        slices=[
            mig("1c.3g.71gb", 2, 0, "4b6e2f1a-7c3d-5e8f-9a0b-1c2d3e4f5a6b", 71424, 20493, [(4242, 20480)]),
            mig("2c.3g.71gb", 2, 1, "9d8c7b6a-5f4e-5d3c-8b2a-190817263544", 71424, 20493),
            mig("2g.35gb", 3, 0, "a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5d", 33280, 13),
            mig("1g.18gb", 9, 0, "5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", 16384, 9013, [(5151, 9000)]),
            mig("1g.18gb", 10, 0, "c7d8e9f0-a1b2-5c3d-94e5-f6a7b8c9d0e1", 16384, 13),
        ],
    )
    whole = FakeCard(uuid="GPU-3a91e7c5-0b24-4d6f-a8e3-5c7b2f9d1e04", pci_bus_id="00000000:2A:00.0")
    return [split, whole]
