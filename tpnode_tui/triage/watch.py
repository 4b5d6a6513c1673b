"""Watching for XIDs as they happen: NVML events, the kernel log, or the simulated node.

Polling cannot see an XID: a card whose program died of XID 13 reads as
idle a second later. So whoever serves the node runs one watcher beside its
polls, chosen by the probe; a watcher that cannot watch says why
(:attr:`XidWatcher.problem`), since "not watched" must never look like "no
XIDs". Events reach the service's loop in order. See docs/architecture.md,
section 'Triage' ("XIDs").
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Protocol

from tpnode_tui.core.xid import parse_kmsg, pci_key
from tpnode_tui.probes.auto import AutoProbe
from tpnode_tui.probes.nvml import NvmlProbe, _forget_init, _init, _recovery_action
from tpnode_tui.probes.simulated import SimulatedProbe, xid_events
from tpnode_tui.probes.smi import SmiProbe

log = logging.getLogger(__name__)

#: how long one NVML wait or kmsg poll blocks (ms): the bound on noticing a stop
WAIT_MS = 1000
#: after a driver error, how long before registering again
RETRY_S = 5.0
KMSG = Path("/dev/kmsg")


@dataclass(frozen=True)
class XidEvent:
    """One XID (or a lost GPU) on one card, as a watcher saw it."""

    #: the card's index; None when the kernel log names a device that is no card here
    card: Optional[int]
    #: None when the card was lost with no XID (NVML said GPU_IS_LOST or "unavailable")
    xid: Optional[int]
    at: float
    #: "nvml", "kmsg" or "simulated"
    source: str
    #: the process the driver names, and its name as the driver gives it (untrusted)
    pid: Optional[int] = None
    process: Optional[str] = None
    #: the driver's own words (kernel log), untrusted
    text: Optional[str] = None
    #: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION when the event came, where the driver reports it
    recovery_action: Optional[int] = None
    #: the PCI address the kernel log named (for an event on no known card)
    pci: Optional[str] = None
    #: the event's own id, where the source gives one (the simulated scene's): what the
    #: node's log keeps, so one already logged is not delivered again after a restart
    id: Optional[str] = None


Deliver = Callable[[XidEvent], None]


class XidWatcher(Protocol):
    #: "nvml", "kmsg" or "simulated"
    source: str
    #: why XIDs are not being watched now, in plain words; None while they are
    problem: Optional[str]

    async def start(self, deliver: Deliver) -> None: ...

    async def close(self) -> None: ...


class _Threaded:
    """A watcher whose waiting blocks, run on a daemon thread of its own."""

    source = ""

    def __init__(self, retry_s: float = RETRY_S) -> None:
        self.retry_s = retry_s
        self.problem: Optional[str] = "starting"
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._deliver: Optional[Callable[[XidEvent], None]] = None

    async def start(self, deliver: Deliver) -> None:
        loop = asyncio.get_running_loop()

        def hand_over(event: XidEvent) -> None:
            try:
                loop.call_soon_threadsafe(deliver, event)
            except RuntimeError:
                pass  # the loop closed: the service is gone

        self._deliver = hand_over
        self._thread = threading.Thread(target=self._run, name=f"tpnode-xid-{self.source}", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, WAIT_MS / 1000 * 3)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except Exception as e:  # a watcher must never die silently
                self.problem = f"the {self.source} XID watcher failed ({e}); retrying"
                log.warning("XID watcher (%s) failed", self.source, exc_info=True)
            self._stop.wait(self.retry_s)

    def _watch(self) -> None:
        raise NotImplementedError


class NvmlXidWatcher(_Threaded):
    source = "nvml"

    def __init__(self, nvml: Any = None, *, wait_ms: int = WAIT_MS, retry_s: float = RETRY_S) -> None:
        super().__init__(retry_s)
        self._nv = nvml
        self.wait_ms = wait_ms
        #: cards found lost: said once, not again at every registration while they stay lost
        self._lost: set[int] = set()

    def _module(self) -> Any:
        if self._nv is None:
            import pynvml

            self._nv = pynvml
        return self._nv

    def _wanted(self, nv: Any) -> list[int]:
        """Event types in the order they are given up when a card refuses them."""
        types = [nv.nvmlEventTypeXidCriticalError, nv.nvmlEventTypeDoubleBitEccError]
        unavailable = getattr(nv, "nvmlEventTypeGpuUnavailableError", None)
        return types + ([unavailable] if unavailable is not None else [])

    def _register(self, nv: Any, event_set: Any) -> dict[int, Any]:
        """Register every card; index -> handle of those registered. Each card
        on its own: one that is lost is said lost, one the driver refuses
        otherwise is left out, and neither keeps the others from being watched."""
        handles: dict[int, Any] = {}
        skipped: list[str] = []
        for index in range(int(nv.nvmlDeviceGetCount())):
            try:
                handle = self._register_card(nv, event_set, index)
            except nv.NVMLError_GpuIsLost:
                self._lost_card(index)
                continue
            except nv.NVMLError as e:
                skipped.append(f"{index} ({e})")
                continue
            self._lost.discard(index)
            if handle is None:
                skipped.append(f"{index} (no XID events supported)")
            else:
                handles[index] = handle
        if skipped:
            log.warning("XID events are not watched on cards %s", ", ".join(skipped))
        return handles

    def _register_card(self, nv: Any, event_set: Any, index: int) -> Any:
        """The card's handle once registered; None when it supports none of the events."""
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        try:
            supported = int(nv.nvmlDeviceGetSupportedEventTypes(handle))
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            supported = ~0
        types = [t for t in self._wanted(nv) if t & supported]
        while types:
            mask = 0
            for t in types:
                mask |= t
            try:
                nv.nvmlDeviceRegisterEvents(handle, mask, event_set)
                return handle
            except nv.NVMLError_NotSupported:
                types.pop()  # "where supported": give up the last, try again
        return None

    def _watch(self) -> None:
        nv = self._module()
        try:
            _init(nv)
        except Exception as e:  # the probe's own words for a driver that is not there
            self.problem = f"XID events cannot be watched: {e}"
            return
        try:
            event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            self.problem = f"XID events cannot be watched: NVML could not create an event set ({e})"
            return
        try:
            handles = self._register(nv, event_set)
            if not handles:
                self.problem = "XID events cannot be watched: no card accepts event registration"
                return
            self.problem = None
            self._wait(nv, event_set, handles)
        except nv.NVMLError as e:
            # The driver went away or was reloaded: register afresh after a pause.
            self.problem = f"XID events are not watched since the driver said: {e}; retrying"
            _forget_init(nv)
        finally:
            try:
                nv.nvmlEventSetFree(event_set)
            except nv.NVMLError:
                pass

    def _wait(self, nv: Any, event_set: Any, handles: dict[int, Any]) -> None:
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(event_set, self.wait_ms)
            except nv.NVMLError_Timeout:
                continue
            except nv.NVMLError_GpuIsLost:
                # The wait does not say which card: ask each, then register the rest afresh.
                for index, handle in handles.items():
                    try:
                        nv.nvmlDeviceGetIndex(handle)
                    except nv.NVMLError_GpuIsLost:
                        self._lost_card(index)
                    except nv.NVMLError:
                        pass
                return
            self._hand(self._event(nv, data, handles))

    def _event(self, nv: Any, data: Any, handles: dict[int, Any]) -> XidEvent:
        index: Optional[int]
        try:
            index = int(nv.nvmlDeviceGetIndex(data.device))
        except nv.NVMLError:
            index = next((i for i, h in handles.items() if h is data.device), None)
        now = time.time()
        action = _recovery(nv, data.device)
        if data.eventType == nv.nvmlEventTypeDoubleBitEccError:
            return XidEvent(index, 48, now, self.source, text="double bit ECC error", recovery_action=action)
        if data.eventType == getattr(nv, "nvmlEventTypeGpuUnavailableError", None):
            return XidEvent(
                index, None, now, self.source, text="the driver reports the GPU unavailable", recovery_action=action
            )
        return XidEvent(index, int(data.eventData), now, self.source, recovery_action=action)

    def _lost_card(self, index: int) -> None:
        if index not in self._lost:
            self._lost.add(index)
            self._hand(XidEvent(index, None, time.time(), self.source, text="GPU is lost"))

    def _hand(self, event: XidEvent) -> None:
        if self._deliver is not None:
            self._deliver(event)


def _recovery(nv: Any, handle: Any) -> Optional[int]:
    try:
        return _recovery_action(nv, handle)
    except Exception:
        return None


class KmsgXidWatcher(_Threaded):
    """``NVRM: Xid`` lines of the kernel log; ``card_of`` maps a PCI address to a card."""

    source = "kmsg"

    def __init__(
        self,
        card_of: Callable[[str], Optional[int]],
        path: Path = KMSG,
        *,
        wait_ms: int = WAIT_MS,
        retry_s: float = RETRY_S,
    ) -> None:
        super().__init__(retry_s)
        self.card_of = card_of
        self.path = Path(path)
        self.wait_ms = wait_ms

    def _watch(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            self.problem = (
                f"XID events are not watched: cannot read {self.path} ({e.strerror or e}); the agent reads it as root"
            )
            return
        try:
            try:
                os.lseek(fd, 0, os.SEEK_END)  # only what happens from now on
            except OSError:
                pass  # not a seekable log (a pipe in tests): read it as it comes
            self.problem = None
            pending = b""
            while not self._stop.is_set():
                ready, _, _ = select.select([fd], [], [], self.wait_ms / 1000)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError as e:
                    if e.errno == errno.EPIPE:
                        continue  # records were overwritten before they were read: go on
                    raise
                if not chunk:
                    if not self._stop.wait(self.wait_ms / 1000):
                        continue
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(line.decode("utf-8", "replace"))
        finally:
            os.close(fd)

    def _line(self, line: str) -> None:
        if not line or line[0] == " ":
            return  # a continuation line ("SUBSYSTEM=pci"), never an XID
        found = parse_kmsg(line)
        if found is None or self._deliver is None:
            return
        card = self.card_of(found.pci)
        self._deliver(
            XidEvent(
                card,
                found.xid,
                time.time(),
                self.source,
                pid=found.pid,
                process=found.process,
                text=found.text,
                pci=found.pci,
            )
        )


#: the scene file's (modification and change times, size, inode): what a stat tells of a change
_Stamp = tuple[int, int, int, int]


class SimulatedXidWatcher:
    """The scene file's ``xid_events``, looked at every ``interval_s``; each id once,
    across restarts too: the scene is the driver's history, there at every start,
    so the ids the node's log already names (``logged``) are not delivered again.

    Looked at, not read: the whole scene is parsed (in a thread) only when a
    stat says the file changed, and at least every ``reread_s`` whatever the
    stat says (a rewrite of the same size within the file system's clock tick
    shows no change). Reading and parsing it five times a second was the
    largest part of an idle simulated node's cost to whoever serves it
    (bench/run.py, sections 4 and 6); a stat is a microsecond.
    """

    source = "simulated"

    def __init__(
        self, path: Path, *, interval_s: float = 0.2, reread_s: float = 1.0, logged: Iterable[tuple[int, str]] = ()
    ) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.reread_s = reread_s
        self.problem: Optional[str] = None
        #: (card, id) of every event delivered, or logged before this watcher started
        self._seen: set[tuple[int, str]] = set(logged)
        self._task: Optional[asyncio.Task[None]] = None
        #: the file's stamp when last parsed without a problem, and when that was
        self._read_stamp: Optional[_Stamp] = None
        self._read_at = 0.0

    async def start(self, deliver: Deliver) -> None:
        self._task = asyncio.ensure_future(self._run(deliver))

    def _stamp(self) -> Optional[_Stamp]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # the read says why
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)

    async def _run(self, deliver: Deliver) -> None:
        while True:
            stamp = self._stamp()
            due = stamp is None or stamp != self._read_stamp or time.monotonic() - self._read_at >= self.reread_s
            if not due:
                await asyncio.sleep(self.interval_s)
                continue
            self._read_stamp, self._read_at = None, time.monotonic()
            try:
                events = await asyncio.to_thread(xid_events, self.path)
                self.problem = None
                self._read_stamp = stamp
            except ValueError as e:
                events = []
                self.problem = f"XID events are not watched: {e}"
            for raised in events:
                if (raised.card, raised.id) not in self._seen:
                    self._seen.add((raised.card, raised.id))
                    deliver(
                        XidEvent(
                            raised.card,
                            raised.xid,
                            time.time(),
                            self.source,
                            pid=raised.pid,
                            recovery_action=raised.recovery_action,
                            id=raised.id,
                        )
                    )
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


def watcher_for(
    probe: Any, card_of: Callable[[str], Optional[int]], logged: Callable[[], Iterable[tuple[int, str]]] = tuple
) -> tuple[Optional[XidWatcher], str]:
    """The watcher that fits ``probe``, or None and why XIDs cannot be watched
    with it. ``logged``: the (card, id) of the events the node's log names (read
    for a watcher whose source replays its events at every start)."""
    if isinstance(probe, AutoProbe):
        if probe.found is None:
            return None, "XID events are not watched: no probe can read the GPUs yet"
        probe = probe.found
    if isinstance(probe, NvmlProbe):
        return NvmlXidWatcher(probe.nvml), ""
    if isinstance(probe, SmiProbe):
        return KmsgXidWatcher(card_of), ""
    if isinstance(probe, SimulatedProbe):
        return SimulatedXidWatcher(probe.path, logged=logged()), ""
    source = getattr(probe, "source", "this")
    return None, f"XID events are not watched: the {source} probe reports none"


def card_by_pci(cards: Any) -> Callable[[str], Optional[int]]:
    """card_of for a reading's cards: a PCI address -> the card with that bus id."""
    table = {pci_key(c.pci_bus_id): c.index for c in cards if c.pci_bus_id}
    return lambda pci: table.get(pci_key(pci))
