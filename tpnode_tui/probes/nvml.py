"""The NVML probe: the driver's own library, asked directly. The default.

One call per fact, and typed errors instead of text to parse, so "not
supported on this card" and "fell off the bus" each degrade only what they
affect. A MIG card is read device by device through each MIG device's own
handle. ``pynvml`` is imported when a probe first runs. NVML calls can block
in a wedged driver for minutes, so each runs on the probe's daemon thread,
bounded by ``timeout_s``, and while one that overran is stuck the probe
answers blind at once. See docs/architecture.md, section 'One look at the
node'.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional, TypeVar

from tpnode_tui.core.xid import recovery_words
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.probes import health, mig
from tpnode_tui.probes.base import blind_reading
from tpnode_tui.probes.wiring import TopologyKeeper, read_nvml_topology

SOURCE = "nvml"
_MIB = 1024 * 1024
#: what NVML puts in a GPU or compute instance id that does not apply (a card
#: not in MIG mode): the unsigned int with every bit set
_NO_INSTANCE = 0xFFFFFFFF
#: the highest device minor a card's file can have (254 and 255 are the driver's control files)
_MAX_CARD_MINOR = 253
_T = TypeVar("_T")

#: nvmlInit is reference-counted and meant to be called once per process, not
#: on every poll. Kept per module object so a test's fake never inherits the
#: real library's state. A failed init is not remembered: a driver that was
#: still loading must not leave the node blind until a restart.
_init_lock = threading.Lock()
_initialised: Optional[object] = None
#: how many times NVML was initialised in this process: a card's identity read
#: under one initialisation is not trusted under the next (see NvmlProbe._read)
_generation = 0

#: nvmlInit failures an operator can act on, in their words.
_INIT_PROBLEMS = (
    ("NVMLError_LibraryNotFound", "NVML: library not found (is the NVIDIA driver installed?)"),
    ("NVMLError_DriverNotLoaded", "NVML: driver not loaded (is the nvidia kernel module loaded? see dmesg)"),
    ("NVMLError_NoPermission", "NVML: permission denied (this user cannot open /dev/nvidia*)"),
    (
        "NVMLError_LibRmVersionMismatch",
        "NVML: library and kernel driver versions differ (reload the driver or reboot after an upgrade)",
    ),
)


#: one call for the worker thread, and the future its answer goes to
_Job = tuple[Callable[[], Any], "concurrent.futures.Future[Any]"]


def _settle(answer: asyncio.Future[Any], done: concurrent.futures.Future[Any]) -> None:
    """On the loop: the worker's answer to the reader still waiting for it."""
    if answer.done():
        return  # timed out or cancelled meanwhile
    error = done.exception()
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(done.result())


def _hand_back(
    loop: asyncio.AbstractEventLoop, answer: asyncio.Future[Any], done: concurrent.futures.Future[Any]
) -> None:
    """On the worker: wake the loop with the answer, unless the loop has ended (the program is stopping)."""
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_settle, answer, done)
        except RuntimeError:  # closed in between
            pass


def _expire(answer: asyncio.Future[Any]) -> None:
    """On the loop: the deadline passed before the worker answered."""
    if not answer.done():
        answer.set_exception(asyncio.TimeoutError())


class _Blind(Exception):
    """This read cannot go on; the message becomes the reading's problem."""


class _Worker:
    """One daemon thread that makes a probe's NVML calls, one after another."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Optional[_Job]] = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None

    def submit(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        if self._thread is None:
            self._jobs = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, args=(self._jobs,), name="tpnode-nvml", daemon=True)
            self._thread.start()
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Optional[_Job]]) -> None:
        while (job := jobs.get()) is not None:
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the awaiting reader, never lost
                fut.set_exception(e)


def _init(nv: Any) -> None:
    global _initialised, _generation
    with _init_lock:
        if _initialised is nv:
            return
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise _Blind(_init_problem(nv, e)) from None
        _initialised = nv
        _generation += 1


def _forget_init(nv: Any) -> None:
    global _initialised
    with _init_lock:
        if _initialised is nv:
            _initialised = None


def _init_problem(nv: Any, err: Exception) -> str:
    for name, words in _INIT_PROBLEMS:
        cls = getattr(nv, name, None)
        if cls is not None and isinstance(err, cls):
            return words
    return f"NVML could not start: {err}"


def _text(value: Any) -> Optional[str]:
    """Older bindings return bytes where newer ones return str."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _bit(nv: Any, name: str, default: int) -> int:
    """A clocks-event bit, under its current or its deprecated name."""
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nv, prefix + name, None)
        if value is not None:
            return int(value)
    return default


def _memory(nv: Any, handle: Any) -> Any:
    """Memory info, version 2 where the driver has it.

    Version 1 counts what the driver reserves for itself as used: several
    hundred MiB on an idle A100 or H100, above the busy threshold, so every
    idle card would read as held from outside. Version 2 reports it apart,
    and its "used" is the figure nvidia-smi shows.
    """
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(handle, version=version)
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError:
            pass
    return nv.nvmlDeviceGetMemoryInfo(handle)


def _clock_reasons(nv: Any, handle: Any) -> int:
    """Current clocks-event reasons, from the deprecated call where the new
    one is missing from the binding or the driver."""
    current = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if current is not None:
        try:
            return int(current(handle))
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            pass
    return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _recovery_action(nv: Any, handle: Any) -> Optional[int]:
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: what the driver says the card needs
    after an error (None where the driver or the binding does not report it)."""
    field_id = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field_id is None:
        return None
    (value,) = nv.nvmlDeviceGetFieldValues(handle, [field_id])
    if value.nvmlReturn != getattr(nv, "NVML_SUCCESS", 0):
        return None
    return int(value.value.uiVal)


def _ecc_total(nv: Any, handle: Any) -> Optional[int]:
    """Uncorrectable ECC errors over the card's life (the aggregate counter, which a
    reboot keeps); None where the binding has no such counter."""
    aggregate = getattr(nv, "NVML_AGGREGATE_ECC", None)
    if aggregate is None:
        return None
    return int(nv.nvmlDeviceGetTotalEccErrors(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, aggregate))


def _mig_modes(nv: Any, handle: Any) -> tuple[bool, Optional[bool]]:
    """(MIG on now, the mode after the next reset where it differs, else None).

    A card that cannot do MIG (a consumer card: NotSupported) or a driver that
    predates it (the call is missing) is whole, which is an answer, not a
    problem to report.
    """
    try:
        current, pending = nv.nvmlDeviceGetMigMode(handle)
    except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
        return False, None
    on = current == nv.NVML_DEVICE_MIG_ENABLE
    after = pending == nv.NVML_DEVICE_MIG_ENABLE
    return on, None if after == on else after


def _card_processes(nv: Any, handle: Any, split: bool) -> Any:
    """The card's process infos. In MIG mode NVML gives them only to a privileged
    caller, by design: then None, without a word, and the slices' own lists
    make the card's (see :func:`mig.card_processes`)."""
    try:
        return nv.nvmlDeviceGetComputeRunningProcesses(handle)
    except nv.NVMLError_NoPermission:
        if split:
            return None
        raise


def _instance_id(value: Any) -> Optional[int]:
    """A GPU or compute instance id; None where there is none (or the binding gave none)."""
    if value is None or int(value) == _NO_INSTANCE:
        return None
    return int(value)


def _minor(value: Any) -> Optional[int]:
    """A card's device minor (``/dev/nvidia<minor>``); None for what no card file can have:
    minors 254 and 255 are the driver's control files."""
    if value is None or not 0 <= int(value) <= _MAX_CARD_MINOR:
        return None
    return int(value)


def _process(info: Any) -> ProcessFacts:
    used = info.usedGpuMemory
    return ProcessFacts(pid=int(info.pid), used_memory_mib=None if used is None else int(used) // _MIB)


def _tagged(infos: Any) -> list[mig.Tagged]:
    """A MIG card's process infos with the instance ids each carries (older bindings carry none)."""
    return [
        (
            _instance_id(getattr(p, "gpuInstanceId", None)),
            _instance_id(getattr(p, "computeInstanceId", None)),
            _process(p),
        )
        for p in infos
    ]


@dataclass(frozen=True)
class _Identity:
    """What names a card and does not change while NVML stays initialised: its
    UUID, its name, its PCI bus id and its device minor. NVML numbers the
    cards once, when it is initialised, so these are read once per card and
    initialisation rather than at every poll (four of a card's sixteen driver
    calls); everything that says who uses a card, or how it is, is read every time."""

    uuid: Optional[str]
    name: Optional[str]
    pci_bus_id: Optional[str]
    minor: Optional[int]


class _CardReader:
    """Reads one card field by field, so one failing field costs only itself.
    ``known``: the card's identity read before under this initialisation, if any;
    ``identity`` is the one read or kept, once :meth:`read` returned."""

    def __init__(self, nv: Any, index: int, notes: list[str], known: Optional[_Identity] = None) -> None:
        self.nv = nv
        self.index = index
        self.notes = notes
        self.identity = known
        #: whether :attr:`identity` was read whole, each field answered or unsupported (worth keeping)
        self.identity_whole = known is not None

    def field(self, what: str, fn: Callable[..., _T], *args: Any) -> Optional[_T]:
        """The field's value; None when the card does not support it or it
        failed (noted). A lost GPU is not a field problem: it ends the card.

        NVMLLibraryMismatchError is what nvidia-ml-py raises instead of an
        NVMLError when it is newer than the driver and lacks a call's old version.
        """
        nv = self.nv
        try:
            return fn(*args)
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError_NotSupported:
            return None
        except (nv.NVMLError, getattr(nv, "NVMLLibraryMismatchError", nv.NVMLError)) as e:
            self.notes.append(f"card {self.index}: NVML could not read {what} ({e})")
            return None

    def read(self) -> CardFacts:
        nv, index = self.nv, self.index
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as e:
            # A card NVML cannot open cannot be seen, so it must not be handed out.
            return CardFacts(
                index=index, processes=None, health=(f"NVML cannot open this card ({e})",), mig_mode=None, slices=None
            )

        mig_mode, mig_pending = self.field("the MIG mode", _mig_modes, nv, handle) or (None, None)
        memory = self.field("memory use", _memory, nv, handle)
        who = self.identity or self.read_identity(handle)
        # In MIG mode the card's utilisation covers none of its slices: not asked.
        util = None if mig_mode else self.field("utilization", nv.nvmlDeviceGetUtilizationRates, handle)
        milliwatts = self.field("power draw", nv.nvmlDeviceGetPowerUsage, handle)
        procs = self.field("the process list", _card_processes, nv, handle, bool(mig_mode))
        processes = None if procs is None else tuple(_process(p) for p in procs)
        slices: Optional[tuple[SliceFacts, ...]] = () if mig_mode is False else None
        if mig_mode:
            slices = self.slices(handle)
            if slices is not None:
                slices = mig.attribute(slices, None if procs is None else _tagged(procs))
                processes = mig.card_processes(processes, slices)
        return CardFacts(
            index=index,
            uuid=who.uuid,
            name=who.name,
            pci_bus_id=who.pci_bus_id,
            minor=who.minor,
            memory_total_mib=int(memory.total) // _MIB if memory is not None else None,
            memory_used_mib=int(memory.used) // _MIB if memory is not None else None,
            utilization_pct=int(util.gpu) if util is not None else None,
            temperature_c=self.field("the temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
            power_w=round(milliwatts / 1000.0, 2) if milliwatts is not None else None,
            processes=processes,
            health=self.faults(handle),
            ecc_uncorrected_total=self.field("the ECC error count", _ecc_total, nv, handle),
            mig_mode=mig_mode,
            mig_pending=mig_pending,
            slices=slices,
        )

    def read_identity(self, handle: Any) -> _Identity:
        nv = self.nv
        noted = len(self.notes)
        pci = self.field("the PCI bus id", nv.nvmlDeviceGetPciInfo, handle)
        self.identity = _Identity(
            uuid=_text(self.field("the UUID", nv.nvmlDeviceGetUUID, handle)),
            name=_text(self.field("the name", nv.nvmlDeviceGetName, handle)),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            minor=_minor(self.field("the device minor", nv.nvmlDeviceGetMinorNumber, handle)),
        )
        self.identity_whole = len(self.notes) == noted  # a field that failed is asked again next time
        return self.identity

    def slices(self, handle: Any) -> Optional[tuple[SliceFacts, ...]]:
        """The card's MIG devices, slot by slot. An empty slot (NotFound) has
        none; a slot NVML cannot open is kept as a slice with nothing known
        about it, since it may hold someone's work. A lost GPU ends the card."""
        nv = self.nv
        count = self.field("the MIG device count", nv.nvmlDeviceGetMaxMigDeviceCount, handle)
        if count is None:
            return None
        found = []
        for slot in range(int(count)):
            try:
                device = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError_NotFound:
                continue
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError as e:
                self.notes.append(f"card {self.index}: NVML could not open MIG device {slot} ({e})")
                found.append(SliceFacts(index=slot, processes=None))
                continue
            found.append(self.slice(slot, device))
        return tuple(found)

    def slice(self, slot: int, device: Any) -> SliceFacts:
        """One MIG device, field by field like the card."""
        nv = self.nv
        its = f"MIG device {slot}'s"
        memory = self.field(f"{its} memory use", _memory, nv, device)
        procs = self.field(f"{its} processes", nv.nvmlDeviceGetComputeRunningProcesses, device)
        return SliceFacts(
            index=slot,
            uuid=_text(self.field(f"{its} UUID", nv.nvmlDeviceGetUUID, device)),
            profile=mig.profile_of(_text(self.field(f"{its} name", nv.nvmlDeviceGetName, device))),
            gpu_instance_id=_instance_id(self.field(f"{its} GPU instance id", nv.nvmlDeviceGetGpuInstanceId, device)),
            compute_instance_id=_instance_id(
                self.field(f"{its} compute instance id", nv.nvmlDeviceGetComputeInstanceId, device)
            ),
            memory_total_mib=int(memory.total) // _MIB if memory is not None else None,
            memory_used_mib=int(memory.used) // _MIB if memory is not None else None,
            processes=None if procs is None else tuple(_process(p) for p in procs),
        )

    def faults(self, handle: Any) -> tuple[str, ...]:
        nv = self.nv
        reasons: list[str] = []
        pending = self.field("retired pages", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        if pending == nv.NVML_FEATURE_ENABLED:
            reasons.append(health.RETIRED_PAGES_PENDING)
        ecc = self.field(
            "ECC errors",
            nv.nvmlDeviceGetTotalEccErrors,
            handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        if ecc:
            reasons.append(health.uncorrected_ecc(int(ecc)))
        rows = self.field("row remapping", nv.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            _corrected, _uncorrected, remap_pending, remap_failed = rows
            if remap_pending:
                reasons.append(health.ROW_REMAP_PENDING)
            if remap_failed:
                reasons.append(health.ROW_REMAP_FAILED)
        clocks = self.field("clock slowdown reasons", _clock_reasons, nv, handle)
        if clocks:
            thermal = _bit(nv, "HwThermalSlowdown", 0x40)
            brake = _bit(nv, "HwPowerBrakeSlowdown", 0x80)
            if clocks & (_bit(nv, "HwSlowdown", 0x8) | thermal | brake):
                reasons.append(health.hw_slowdown(thermal=bool(clocks & thermal), power_brake=bool(clocks & brake)))
        action = recovery_words(self.field("the recovery action", _recovery_action, nv, handle))
        if action is not None:
            reasons.append(health.recovery_needed(action))
        return tuple(reasons)


class NvmlProbe:
    """Reads every card through NVML. ``nvml`` replaces the ``pynvml`` module (tests)."""

    source = SOURCE

    def __init__(self, timeout_s: float = 10.0, *, nvml: Optional[ModuleType] = None) -> None:
        self.timeout_s = timeout_s
        self._nvml: Any = nvml
        self._worker = _Worker()
        #: a call that overran its timeout and has not returned yet
        self._stuck: Optional[concurrent.futures.Future[Any]] = None
        #: the topology, read on the worker thread when due (see probes/wiring.py)
        self._topology = TopologyKeeper()
        #: each card's identity, and the NVML initialisation it was read under (see _Identity)
        self._identities: dict[int, _Identity] = {}
        self._identities_of = 0

    async def start(self) -> Optional[str]:
        """Initialise NVML now: None when it is ready, else why not, in plain words."""
        try:
            await self._call(lambda: _init(self._module()))
        except _Blind as e:
            return str(e)
        return None

    async def read(self) -> ProbeReading:
        try:
            return await self._call(self._read)
        except _Blind as e:
            return blind_reading(SOURCE, str(e))

    async def close(self) -> None:
        self._worker.stop()

    @property
    def nvml(self) -> Any:
        """The nvidia-ml-py module this probe asks (a test's fake, or None: import pynvml)."""
        return self._nvml

    async def _call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the worker, within the deadline.

        The worker hands its answer to the loop itself (one wake-up), rather
        than through ``asyncio.wait_for`` over ``asyncio.wrap_future``, whose
        chained futures and waiter were about half of what a reading of 8 idle
        cards cost the loop, more than the driver calls (bench/run.py, section 1).
        """
        if self._stuck is not None and not self._stuck.done():
            raise _Blind(
                f"NVML is still stuck in a call that did not answer within {self.timeout_s:g} s "
                "(not asking again until it returns)"
            )
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[_T] = loop.create_future()
        fut = self._worker.submit(fn)
        fut.add_done_callback(lambda done: _hand_back(loop, answer, done))
        deadline = loop.call_later(self.timeout_s, _expire, answer)
        try:
            return await answer
        except asyncio.TimeoutError:
            self._stuck = fut
            raise _Blind(f"NVML did not answer within {self.timeout_s:g} s") from None
        except asyncio.CancelledError:
            fut.cancel()  # not started yet: it never will be
            raise
        finally:
            deadline.cancel()

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise _Blind("NVML: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)") from None
            self._nvml = pynvml
        return self._nvml

    def _read(self) -> ProbeReading:
        """The whole reading, on the worker thread."""
        nv = self._module()
        _init(nv)
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            # The driver may have been unloaded under us: initialise afresh next time.
            _forget_init(nv)
            raise _Blind(f"NVML could not count the cards ({e})") from None
        if self._identities_of != _generation or len(self._identities) > count:
            self._identities, self._identities_of = {}, _generation  # numbered anew, or cards gone
        notes: list[str] = []
        cards = tuple(self._card(nv, i, notes) for i in range(count))
        if self._topology.due(count):
            self._topology.begin(count)
            self._topology.keep(*read_nvml_topology(nv, count))
        return self._topology.attach(health.reading(SOURCE, cards, notes))

    def _card(self, nv: Any, index: int, notes: list[str]) -> CardFacts:
        reader = _CardReader(nv, index, notes, self._identities.get(index))
        try:
            facts = reader.read()
        except nv.NVMLError_GpuIsLost:
            self._identities.pop(index, None)  # whatever comes back at this index is read afresh
            return CardFacts(index=index, processes=None, health=(health.GPU_LOST,), mig_mode=None, slices=None)
        if reader.identity is not None and reader.identity_whole:
            self._identities[index] = reader.identity
        else:
            self._identities.pop(index, None)
        return facts
