"""The node's topology as each probe reads it, and when a probe reads it again.

Topology is hardware, not occupancy, and slow to read, so a probe reads it
when it starts, when its card count changes and after :data:`MAX_AGE_S`; a
failed read is tried again after :data:`RETRY_S`, leaves the topology unknown
(or keeps the one read before for the same cards), and never blinds the
reading. A fact the driver does not support is unknown, never an exception.
See docs/architecture.md, section 'One look at the node'.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.model.topology import Link, Topology
from tpnode_tui.probes.shapes import shape
from tpnode_tui.probes.topo_matrix import TopologyError, link_from_word, parse_topo_matrix

MAX_AGE_S = 600.0
RETRY_S = 60.0

#: where the kernel tells each PCI device's NUMA node (replaced by tests)
PCI_DEVICES = Path("/sys/bus/pci/devices")

#: nvidia-smi's arguments for the matrix
TOPO_ARGS = ("topo", "-m")


def topology_problem(topology: Optional[Topology], why: Optional[str]) -> Optional[str]:
    """What a reading says of a topology read: ``why`` is what went wrong, all
    of it when ``topology`` is None, part of it otherwise."""
    if why is None:
        return None
    if topology is None:
        return f"topology not known ({why}), so cards are placed without it"
    return f"topology partly not known ({why})"


def with_topology(
    reading: ProbeReading, topology: Optional[Topology], problem: Optional[str], unknowable: Optional[str] = None
) -> ProbeReading:
    """``reading`` carrying ``topology``, and ``problem`` after its own problems;
    ``unknowable``: why no later reading can know it either, where that is so."""
    problems = [p for p in (reading.problem, problem) if p]
    return replace(
        reading,
        topology=topology,
        problem="; ".join(problems) or None,
        topology_unknowable=None if topology is not None else unknowable,
    )


class TopologyKeeper:
    """What one probe last read of the topology, and whether to read it again now."""

    def __init__(
        self, max_age_s: float = MAX_AGE_S, retry_s: float = RETRY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_age_s = max_age_s
        self.retry_s = retry_s
        self._clock = clock
        self._topology: Optional[Topology] = None
        #: what the reading says of it
        self._problem: Optional[str] = None
        #: whether the last read failed (it is tried again sooner)
        self._failed = False
        #: when the last read began, and how many cards there were then
        self._began: Optional[float] = None
        self._count: Optional[int] = None
        #: the card count of the latest reading
        self._seen: Optional[int] = None

    def due(self, count: Optional[int] = None) -> bool:
        """Whether to read the topology now. ``count``: the cards the probe sees
        now, or None when it cannot tell before the read (the latest reading's)."""
        if self._began is None:
            return True
        now = self._seen if count is None else count
        if now is not None and now != self._count:
            return True
        return self._clock() - self._began >= (self.retry_s if self._failed else self.max_age_s)

    def begin(self, count: Optional[int] = None) -> None:
        """A read starts. If it never ends (the probe gave up on it) the next
        one waits its turn like any other, so a read that hangs is not started
        again at every poll."""
        self._began = self._clock()
        self._count = self._seen if count is None else count

    def keep(self, topology: Optional[Topology], why: Optional[str]) -> None:
        """What the read found: the topology (None: not known), and what went
        wrong (all of it without a topology, part of it with one)."""
        self._failed = topology is None and why is not None
        before = self._topology
        if self._failed and before is not None and before.count == self._count:
            self._problem = f"topology not read again ({why}): the one read before is used"
            return
        self._topology, self._problem = topology, topology_problem(topology, why)

    def attach(self, reading: ProbeReading) -> ProbeReading:
        """``reading`` with the topology kept, and what is not known of it (on a
        node without cards nothing is placed, so nothing is said of their wiring)."""
        if reading.count is not None:
            self._seen = reading.count
            if self._began is not None and self._count is None:
                self._count = reading.count  # a read that began not knowing: the count it was read beside
        if reading.count == 0:
            return reading
        return with_topology(reading, self._topology, self._problem)


# -- nvidia-smi topo -m ------------------------------------------------------------------


def smi_topology(text: Optional[str], error: str) -> tuple[Optional[Topology], Optional[str]]:
    """The topology from ``nvidia-smi topo -m``'s output (None: it could not be
    run, and ``error`` says why), and why there is none."""
    if text is None:
        return None, f"nvidia-smi topo -m: {error}"
    try:
        return parse_topo_matrix(text), None
    except TopologyError as e:
        return None, f"nvidia-smi topo -m answered what this probe does not understand: {e}"


# -- the simulated node --------------------------------------------------------------------


def scene_topology(value: Any, count: int) -> tuple[Optional[Topology], Optional[str]]:
    """The scene file's ``"topology"``: a shape's name (``"nvswitch"``,
    ``"pcie-2x4"``, ``"cube-mesh"``), or ``{"links": [[word, ...], ...],
    "numa": [node or null, ...]}`` with one row per card of ``topo -m`` words
    ("X", "NV18", "PIX" ... "SYS"; "" for not known). None when the scene has
    none; the problem is the reading's words for what is wrong with it."""
    if value is None:
        return None, None
    try:
        if isinstance(value, str):
            return shape(value, count), None
        return _scene_links(value, count), None
    except ValueError as e:
        return None, topology_problem(None, f'the simulated node file\'s "topology": {e}')


def _scene_links(value: Any, count: int) -> Topology:
    """A scene's ``{"links": [[word, ...], ...], "numa": [...]}``, checked as strictly as a matrix is read."""
    if not isinstance(value, dict) or not isinstance(value.get("links"), list):
        raise ValueError('must name a shape or be {"links": [[...], ...]}')
    rows = value["links"]
    if len(rows) != count or not all(isinstance(r, list) and len(r) == count for r in rows):
        raise ValueError(f'"links" must have {count} rows of {count} words, one per card')
    links: dict[tuple[int, int], Link] = {}
    for a, row in enumerate(rows):
        for b, word in enumerate(row):
            link = _scene_link(a, b, word)
            if link is not None and a != b:
                links[(a, b)] = link
    return Topology.build(count, links, _scene_numa(value, count))


def _scene_link(a: int, b: int, word: Any) -> Optional[Link]:
    """Card ``a``'s link to card ``b`` as a scene words it; None for "X" or an empty cell."""
    if not isinstance(word, str):
        raise ValueError(f"card {a}'s link to card {b} must be a word, not {word!r}")
    link = link_from_word(word)
    if link is None and word.strip() not in ("X", ""):
        raise ValueError(f"card {a}'s link to card {b}: {word[:20]!r} is not a link (NV#, PIX ... SYS)")
    return link


def _scene_numa(value: dict[str, Any], count: int) -> dict[int, int]:
    """Each card's NUMA node from a scene's "numa" (whole numbers, not bools, or null)."""
    nodes = value.get("numa", [None] * count)
    if not isinstance(nodes, list) or len(nodes) != count or not all(_is_numa_node(n) for n in nodes):
        raise ValueError(f'"numa" must list {count} NUMA nodes (whole numbers, or null)')
    return {card: n for card, n in enumerate(nodes) if n is not None}


def _is_numa_node(n: Any) -> bool:
    return n is None or (type(n) is int and n >= 0)


# -- NVML -------------------------------------------------------------------------------------

#: a PCI address: domain, bus, device, function
_Bus = tuple[int, int, int, int]
_BUS = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")
#: nvmlDeviceGetTopologyCommonAncestor's levels as topo -m names them; a
#: two-GPU board (INTERNAL) is behind one bridge, as PIX says
_ANCESTORS = (
    ("NVML_TOPOLOGY_INTERNAL", 0, "PIX"),
    ("NVML_TOPOLOGY_SINGLE", 10, "PIX"),
    ("NVML_TOPOLOGY_MULTIPLE", 20, "PXB"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", 30, "PHB"),
    ("NVML_TOPOLOGY_NODE", 40, "NODE"),
    ("NVML_TOPOLOGY_SYSTEM", 50, "SYS"),
)


def _bus_key(value: Any) -> Optional[_Bus]:
    """A PCI address as numbers: NVML writes "00000000:18:00.0", sysfs "0000:18:00.0"."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    match = _BUS.fullmatch(text.strip())
    if match is None:
        return None
    domain, bus, device, function = (int(part, 16) for part in match.groups())
    return domain, bus, device, function


def sysfs_numa(bus: _Bus) -> Optional[int]:
    """The NUMA node the kernel gives a PCI device; None where it gives none (-1) or cannot be read."""
    domain, number, device, function = bus
    path = PCI_DEVICES / f"{domain:04x}:{number:02x}:{device:02x}.{function}" / "numa_node"
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if re.fullmatch(r"[0-9]{1,5}", text) else None


class _Lost(Exception):
    """The GPU fell off the bus: what is not read of it stays unknown."""


class _Missing(Exception):
    """The driver or the binding has no such call: nothing it would tell is known."""


class _NvmlTopology:
    """One read of the topology through NVML, on the probe's worker thread."""

    def __init__(self, nv: Any, count: int) -> None:
        self.nv = nv
        self.count = count
        self.failures: list[str] = []
        self.mismatch = getattr(nv, "NVMLLibraryMismatchError", nv.NVMLError)

    def ask(self, card: int, what: str, name: str, *args: Any) -> Any:
        """The call's answer; None when the card does not support it or it failed
        (noted). Raises _Lost for a lost GPU and _Missing for a call that is not there."""
        nv = self.nv
        call = getattr(nv, name, None)
        if call is None:
            raise _Missing
        try:
            return call(*args)
        except nv.NVMLError_GpuIsLost:
            raise _Lost from None
        except nv.NVMLError_FunctionNotFound:
            raise _Missing from None
        except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
            return None
        except (nv.NVMLError, self.mismatch) as e:
            self.failures.append(f"card {card}: {what} ({e})")
            return None

    def read(self) -> tuple[Topology, Optional[str]]:
        handles: dict[int, Any] = {}
        buses: dict[int, _Bus] = {}
        for card in range(self.count):
            try:
                handle = self.ask(card, "its handle", "nvmlDeviceGetHandleByIndex", card)
                pci = self.ask(card, "its PCI bus id", "nvmlDeviceGetPciInfo", handle) if handle is not None else None
            except (_Lost, _Missing):
                continue
            if handle is not None:
                handles[card] = handle
                bus = _bus_key(pci.busId) if pci is not None else None
                if bus is not None:
                    buses[card] = bus
        nvlinks = self._nvlinks(handles, {bus: card for card, bus in buses.items()})
        links: dict[tuple[int, int], Link] = {}
        for (a, b), path in self._paths(handles).items():
            links[(a, b)] = Link(nvlinks.pop((a, b), 0), path)
        for pair, count in nvlinks.items():  # NVLinked, PCIe path not known
            links[pair] = Link(count)
        numa = {card: node for card, bus in buses.items() if (node := sysfs_numa(bus)) is not None}
        problem = None
        if self.failures:
            more = f" and {len(self.failures) - 1} more" if len(self.failures) > 1 else ""
            problem = f"NVML could not read {self.failures[0]}{more}"
        return Topology.build(self.count, links, numa), problem

    def _paths(self, handles: dict[int, Any]) -> dict[tuple[int, int], str]:
        """Each pair's PCIe path from nvmlDeviceGetTopologyCommonAncestor."""
        words = {getattr(self.nv, name, default): word for name, default, word in _ANCESTORS}
        paths: dict[tuple[int, int], str] = {}
        cards = sorted(handles)
        for i, a in enumerate(cards):
            for b in cards[i + 1 :]:
                try:
                    level = self.ask(
                        a, f"its PCIe path to card {b}", "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b]
                    )
                except _Lost:
                    continue
                except _Missing:
                    return paths
                if level in words:
                    paths[(a, b)] = words[level]
        return paths

    def _nvlinks(self, handles: dict[int, Any], by_bus: dict[_Bus, int]) -> dict[tuple[int, int], int]:
        """NVLinks between pairs: direct ones, and through NVSwitches (two cards
        on the node's NVLink fabric share as many as the fewer of their switch
        links). A link is seen from either end; the larger count stands."""
        direct: dict[tuple[int, int], int] = {}
        to_switch: dict[int, int] = {}
        for card, handle in handles.items():
            try:
                peers, switches = self._card_nvlinks(card, handle, by_bus)
            except _Lost:
                continue
            except _Missing:
                break
            if switches:
                to_switch[card] = switches
            for peer, count in peers.items():
                pair = (min(card, peer), max(card, peer))
                direct[pair] = max(direct.get(pair, 0), count)
        switched = sorted(to_switch)
        for i, a in enumerate(switched):
            for b in switched[i + 1 :]:
                direct[(a, b)] = direct.get((a, b), 0) + min(to_switch[a], to_switch[b])
        return direct

    def _card_nvlinks(self, card: int, handle: Any, by_bus: dict[_Bus, int]) -> tuple[dict[int, int], int]:
        """One card's active NVLinks: to each peer card, and to NVSwitches."""
        nv = self.nv
        enabled = getattr(nv, "NVML_FEATURE_ENABLED", 1)
        switch_type = getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        peers: dict[int, int] = {}
        switches = 0
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            state = self.ask(card, f"the state of NVLink {link}", "nvmlDeviceGetNvLinkState", handle, link)
            if state != enabled:
                continue
            try:
                remote = self.ask(
                    card, f"what NVLink {link} reaches", "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link
                )
            except _Missing:  # an older driver: a peer is told by its bus id alone
                remote = None
            if remote == switch_type:
                switches += 1
                continue
            pci = self.ask(card, f"the far end of NVLink {link}", "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            far = _bus_key(pci.busId) if pci is not None else None
            peer = by_bus.get(far) if far is not None else None
            if peer is not None and peer != card:
                peers[peer] = peers.get(peer, 0) + 1
        return peers, switches


def read_nvml_topology(nv: Any, count: int) -> tuple[Optional[Topology], Optional[str]]:
    """The topology of ``count`` cards through NVML (``nv``: the pynvml module),
    and what of it could not be read. PCIe paths from nvmlDeviceGetTopologyCommonAncestor;
    NVLinks from nvmlDeviceGetNvLinkState for each link up to NVML_NVLINK_MAX_LINKS,
    the far end told by nvmlDeviceGetNvLinkRemoteDeviceType (an NVSwitch) and
    nvmlDeviceGetNvLinkRemotePciInfo (which card); NUMA nodes from sysfs by
    each card's PCI address. Not from nvmlDeviceGetNumaNodeId: that names the
    NUMA node of the GPU's own memory on platforms where a GPU is one (Grace
    Hopper), not the socket it hangs off, and would tell every card apart.
    Runs on the probe's worker thread."""
    if count <= 0:
        return None, None
    return _NvmlTopology(nv, count).read()
