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

Field names for ``errors`` and ``hang``: handle, uuid, name, pci, memory_v2
(memory info version 2), memory (version 1), utilization, temperature, power, processes, retired_pages, ecc,
remapped_rows, clocks_event, clocks_throttle, field_values, supported_events, register_events,
topology (nvmlDeviceGetTopologyCommonAncestor, raised when either card has it), nvlink_state,
nvlink_remote_type, nvlink_remote_pci.

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


@dataclass(eq=False)  # cards are told apart by identity, like handles
class FakeCard:
    name: str = "NVIDIA H200"
    uuid: Optional[str] = None  # made up from the index when None
    pci_bus_id: Optional[str] = None
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
    ecc_uncorrected: int = 0
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
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
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

    def _enter(self, what: str, card: Optional[FakeCard] = None) -> None:
        self.calls[what] += 1
        event = self._hangs.get(what)
        if event is not None:
            event.wait()
        if card is not None:
            if card.lost:
                raise NVMLError_GpuIsLost()
            error = card.errors.get(what)
            if error is not None:
                raise error()

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

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeCard:
        if not 0 <= index < len(self.cards):
            raise NVMLError_InvalidArgument()
        card = self.cards[index]
        self._enter("handle", card)
        return card

    # -- identity ------------------------------------------------------------
    def nvmlDeviceGetUUID(self, card: FakeCard) -> str:
        self._enter("uuid", card)
        return card.uuid or f"GPU-1c0f8a1e-0000-4000-8000-{self.cards.index(card):012d}"

    def nvmlDeviceGetName(self, card: FakeCard) -> str:
        self._enter("name", card)
        return card.name

    def nvmlDeviceGetPciInfo(self, card: FakeCard) -> SimpleNamespace:
        self._enter("pci", card)
        return SimpleNamespace(busId=self.bus_id(card))

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
    def nvmlDeviceGetMemoryInfo(self, card: FakeCard, version: Optional[int] = None) -> SimpleNamespace:
        total, used = card.memory_total_mib * MIB, card.memory_used_mib * MIB
        reserved = card.memory_reserved_mib * MIB
        if version is None:
            self._enter("memory", card)
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        self._enter("memory_v2", card)
        if version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        return SimpleNamespace(
            version=version, total=total, reserved=reserved, used=used, free=total - used - reserved
        )

    def nvmlDeviceGetUtilizationRates(self, card: FakeCard) -> SimpleNamespace:
        self._enter("utilization", card)
        return SimpleNamespace(gpu=card.utilization_pct, memory=0)

    def nvmlDeviceGetTemperature(self, card: FakeCard, sensor: int) -> int:
        self._enter("temperature", card)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return card.temperature_c

    def nvmlDeviceGetPowerUsage(self, card: FakeCard) -> int:
        self._enter("power", card)
        return int(round(card.power_w * 1000))

    def nvmlDeviceGetComputeRunningProcesses(self, card: FakeCard) -> list[SimpleNamespace]:
        self._enter("processes", card)
        return [
            SimpleNamespace(
                pid=pid,
                usedGpuMemory=None if mib is None else mib * MIB,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
            for pid, mib in card.processes
        ]

    # -- health --------------------------------------------------------------
    def nvmlDeviceGetRetiredPagesPendingStatus(self, card: FakeCard) -> int:
        self._enter("retired_pages", card)
        return NVML_FEATURE_ENABLED if card.retired_pages_pending else NVML_FEATURE_DISABLED

    def nvmlDeviceGetTotalEccErrors(self, card: FakeCard, error_type: int, counter_type: int) -> int:
        self._enter("ecc", card)
        if (error_type, counter_type) != (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC):
            return 0
        return card.ecc_uncorrected

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
                return SimpleNamespace(device=card, eventType=event_type, eventData=data,
                                       gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._enter("event_set_free")
        event_set.freed = True

    def nvmlDeviceGetFieldValues(self, card: FakeCard, field_ids: list[int]) -> list[SimpleNamespace]:
        self._enter("field_values", card)
        values = []
        for field_id in field_ids:
            known = field_id == RECOVERY_ACTION_FIELD and card.recovery_action is not None
            values.append(SimpleNamespace(
                fieldId=field_id, scopeId=0, timestamp=0, latencyUsec=0, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                nvmlReturn=_NVML_SUCCESS if known else _NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(uiVal=card.recovery_action if known else 0)))
        return values


def a100_style(**kw) -> FakeCard:
    """Ampere and Hopper report retired pages as not supported: row remapping replaced them."""
    card = FakeCard(**kw)
    card.errors.setdefault("retired_pages", NVMLError_NotSupported)
    return card
