"""The nvidia-smi probe: for machines where NVML cannot be loaded from Python.

nvidia-smi runs from an argument list in a process group of its own, killed
at ``timeout_s`` and never waited for, since a read is taken under the
allocation lock; a hung nvidia-smi makes the node probe-blind, never free.
An nvidia-smi that could not run ("nobody knows") is never merged with an
empty answer ("nobody holds a card"). The parsers are pure and public and
never raise: a line not understood is skipped, ``[N/A]`` becomes ``None``.
See docs/architecture.md, section 'One look at the node'.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.nvidia import DEFAULT_GPUS_DIR, card_minor
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.probes import health, mig
from tpnode_tui.probes.base import blind_reading
from tpnode_tui.probes.wiring import TOPO_ARGS, TopologyKeeper, smi_topology

SOURCE = "nvidia-smi"

FACTS_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
)
#: The old ``clocks_throttle_reasons`` names, because current drivers still
#: accept them and old ones know no other. A field a card does not support
#: reads ``[N/A]``, so each column is judged on its own.
HEALTH_FIELDS = (
    "index",
    "retired_pages.pending",
    "ecc.errors.uncorrected.volatile.total",
    "clocks_throttle_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
APPS_FIELDS = ("gpu_uuid", "pid", "used_memory")
#: Asked apart from the facts: a driver older than MIG does not know these
#: fields and refuses the whole query that names them.
MIG_FIELDS = ("index", "mig.mode.current", "mig.mode.pending")
_FORMAT = "--format=csv,noheader,nounits"

# Bounded, ASCII-only numbers: int() would take other scripts' digits, and
# refuses strings of more than 4300 digits with an error.
_WHOLE = re.compile(r"[0-9]{1,15}")
_DECIMAL = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")


def _columns(line: str) -> list[str]:
    return [part.strip() for part in line.split(",")]


def _present(value: str) -> Optional[str]:
    """The value, or None where nvidia-smi says it has none ([N/A], [Not Supported], ...)."""
    value = value.strip()
    if not value or value.upper() == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def _first_token(value: str) -> str:
    """The number without a unit, should the output carry units after all."""
    parts = value.split()
    return parts[0] if parts else ""


def _whole(value: str) -> Optional[int]:
    token = _first_token(value)
    return int(token) if _WHOLE.fullmatch(token) else None


def _decimal(value: str) -> Optional[float]:
    token = _first_token(value)
    return float(token) if _DECIMAL.fullmatch(token) else None


def _index(value: str) -> Optional[int]:
    return int(value) if _WHOLE.fullmatch(value) else None


def _on(value: str) -> bool:
    """Yes / Active / a count above zero."""
    word = value.strip().lower()
    count = _whole(word)
    return word in ("yes", "active") or (count is not None and count > 0)


def parse_index_uuid(text: str) -> dict[str, int]:
    """``--query-gpu=index,uuid,...`` output -> {uuid: index}.

    ``--query-compute-apps`` names cards by UUID only. The order processes
    are listed in cannot stand in for the index: it is wrong as soon as a card
    has two processes, or none.
    """
    mapping: dict[str, int] = {}
    for line in text.splitlines():
        cols = _columns(line)
        if len(cols) < 2:
            continue
        index, uuid = _index(cols[0]), _present(cols[1])
        if index is not None and uuid is not None:
            mapping.setdefault(uuid, index)
    return mapping


def parse_gpu_facts(text: str) -> list[CardFacts]:
    """``--query-gpu=`` :data:`FACTS_FIELDS` output -> one CardFacts per card, by index.

    The process list is not part of this query, so it is left unknown
    (``None``) until the compute-apps answer fills it in.
    """
    cards: dict[int, CardFacts] = {}
    for line in text.splitlines():
        cols = _columns(line)
        if len(cols) != len(FACTS_FIELDS):
            continue
        index = _index(cols[0])
        if index is None or index in cards:
            continue
        uuid, name, bus, total, used, util, temp, power = cols[1:]
        cards[index] = CardFacts(
            index=index,
            uuid=_present(uuid),
            name=_present(name),
            pci_bus_id=_present(bus),
            memory_total_mib=_whole(total),
            memory_used_mib=_whole(used),
            utilization_pct=_whole(util),
            temperature_c=_whole(temp),
            power_w=_decimal(power),
            processes=None,
        )
    return [cards[i] for i in sorted(cards)]


def parse_gpu_health(text: str) -> dict[int, tuple[str, ...]]:
    """``--query-gpu=`` :data:`HEALTH_FIELDS` output -> {index: reasons} for unhealthy cards.

    Lines may carry fewer columns than asked for (the seed's four-column
    query still parses); a column that is missing or ``[N/A]`` says nothing.
    """
    out: dict[int, tuple[str, ...]] = {}
    for line in text.splitlines():
        cols = _columns(line)
        index = _index(cols[0])
        if index is None or len(cols) < 2:
            continue
        col = dict(zip(HEALTH_FIELDS[1:], cols[1:]))
        reasons: list[str] = []
        if _on(col.get("retired_pages.pending", "")):
            reasons.append(health.RETIRED_PAGES_PENDING)
        ecc = _whole(col.get("ecc.errors.uncorrected.volatile.total", ""))
        if ecc:
            reasons.append(health.uncorrected_ecc(ecc))
        thermal = _on(col.get("clocks_throttle_reasons.hw_thermal_slowdown", ""))
        brake = _on(col.get("clocks_throttle_reasons.hw_power_brake_slowdown", ""))
        if thermal or brake or _on(col.get("clocks_throttle_reasons.hw_slowdown", "")):
            reasons.append(health.hw_slowdown(thermal=thermal, power_brake=brake))
        if _on(col.get("remapped_rows.pending", "")):
            reasons.append(health.ROW_REMAP_PENDING)
        if _on(col.get("remapped_rows.failure", "")):
            reasons.append(health.ROW_REMAP_FAILED)
        if reasons:
            out.setdefault(index, tuple(reasons))
    return out


def parse_compute_apps(text: str) -> list[tuple[str, ProcessFacts]]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory`` output -> (card uuid, process).

    The pids are the host's: inside a container they belong to another pid
    namespace, which is why memory used, not this list, decides "in use".
    """
    apps: list[tuple[str, ProcessFacts]] = []
    for line in text.splitlines():
        cols = _columns(line)
        if len(cols) != len(APPS_FIELDS):
            continue
        uuid, pid = _present(cols[0]), _index(cols[1])
        if uuid is not None and pid is not None:
            apps.append((uuid, ProcessFacts(pid=pid, used_memory_mib=_whole(cols[2]))))
    return apps


def _mig_word(value: str) -> Optional[bool]:
    """Enabled / Disabled; a card that cannot do MIG reads [N/A] or [Not Supported]: whole."""
    word = value.strip().lower()
    if word == "enabled":
        return True
    if word in ("disabled", "n/a", "[n/a]", "[not supported]"):
        return False
    return None


def parse_mig_modes(text: str) -> dict[int, tuple[Optional[bool], Optional[bool]]]:
    """``--query-gpu=`` :data:`MIG_FIELDS` output -> {index: (MIG now, the mode after
    the next reset where it differs, else None)}."""
    modes: dict[int, tuple[Optional[bool], Optional[bool]]] = {}
    for line in text.splitlines():
        cols = _columns(line)
        if len(cols) != len(MIG_FIELDS):
            continue
        index = _index(cols[0])
        if index is None or index in modes:
            continue
        current, pending = _mig_word(cols[1]), _mig_word(cols[2])
        modes[index] = (current, None if current is None or pending == current else pending)
    return modes


# "GPU 0: NVIDIA H200 (UUID: GPU-...)": the name is anybody's text, so the uuid is
# the last parenthesis on the line. "  MIG 1g.18gb     Device  3: (UUID: MIG-...)".
_LIST_CARD = re.compile(r"GPU [0-9]{1,5}: .*\(UUID: (GPU-[^\s()]{1,100})\)\s*")
_LIST_MIG = re.compile(r"\s+MIG (\S{1,40})\s+Device\s+([0-9]{1,4}): \(UUID: (MIG-[^\s()]{1,200})\)\s*")

#: one MIG device as ``nvidia-smi -L`` names it: (its index on the card, profile, uuid)
Listed = tuple[int, str, str]


def parse_mig_list(text: str) -> dict[str, list[Listed]]:
    """``nvidia-smi -L`` output -> {card uuid: its MIG devices}; a card without any
    has an empty list, a card the listing does not name is not in it."""
    cards: dict[str, list[Listed]] = {}
    devices: Optional[list[Listed]] = None
    for line in text.splitlines():
        card = _LIST_CARD.fullmatch(line)
        if card is not None:
            devices = cards.setdefault(card.group(1), [])
            continue
        device = _LIST_MIG.fullmatch(line)
        if device is not None and devices is not None:
            index = int(device.group(2))
            if all(listed[0] != index for listed in devices):
                devices.append((index, device.group(1), device.group(3)))
    return cards


#: XML 1.0 forbids these (and a lone surrogate cannot even be encoded); a process
#: name carrying one (any user names their own processes) would make the whole
#: document unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

#: what ``nvidia-smi -q -x`` says of one card's MIG devices: the devices by
#: index (instance ids and memory; uuid, profile and processes not in it), and
#: the card's processes with the instances they run in (None: no list given)
XmlMig = tuple[dict[int, SliceFacts], Optional[list[mig.Tagged]]]


def _xml_text(element: ElementTree.Element, path: str) -> str:
    return element.findtext(path) or ""


def parse_mig_xml(text: str) -> Optional[dict[str, XmlMig]]:
    """``nvidia-smi -q -x`` output -> {card uuid: its MIG devices and processes};
    None when it is not such a document at all. A missing element is a fact
    not given (None), never a reason to drop the card or the device."""
    try:
        root = ElementTree.fromstring(_NOT_XML.sub("\ufffd", text))
    except ElementTree.ParseError:
        return None
    if root.tag != "nvidia_smi_log":
        return None
    cards: dict[str, XmlMig] = {}
    for gpu in root.findall("gpu"):
        uuid = _present(_xml_text(gpu, "uuid"))
        if uuid is None or uuid in cards:
            continue
        devices: dict[int, SliceFacts] = {}
        for device in gpu.findall("mig_devices/mig_device"):
            index = _index(_xml_text(device, "index").strip())
            if index is None or index in devices:
                continue
            devices[index] = SliceFacts(
                index=index,
                gpu_instance_id=_index(_xml_text(device, "gpu_instance_id").strip()),
                compute_instance_id=_index(_xml_text(device, "compute_instance_id").strip()),
                memory_total_mib=_whole(_xml_text(device, "fb_memory_usage/total")),
                memory_used_mib=_whole(_xml_text(device, "fb_memory_usage/used")),
                processes=None,
            )
        listed = gpu.find("processes")
        tagged: Optional[list[mig.Tagged]] = None
        if listed is not None:
            tagged = []
            for info in listed.findall("process_info"):
                pid = _index(_xml_text(info, "pid").strip())
                if pid is not None:
                    tagged.append(
                        (
                            _index(_xml_text(info, "gpu_instance_id").strip()),
                            _index(_xml_text(info, "compute_instance_id").strip()),
                            ProcessFacts(pid=pid, used_memory_mib=_whole(_xml_text(info, "used_memory"))),
                        )
                    )
        cards[uuid] = (devices, tagged)
    return cards


def mig_slices(listed: Optional[list[Listed]], described: Optional[XmlMig]) -> Optional[tuple[SliceFacts, ...]]:
    """One card's MIG devices from its ``-L`` lines and its ``-q -x`` element,
    joined by index; None when neither answer says anything of the card.

    A device only one of them names is kept, with what the other would have
    said unknown; a device's processes are those of the card that name its
    instances (unknown without the XML).
    """
    if listed is None and described is None:
        return None
    devices, tagged = described if described is not None else ({}, None)
    by_index = dict(devices)
    for index, profile, uuid in listed or ():
        by_index[index] = replace(
            by_index.get(index, SliceFacts(index=index, processes=None)), uuid=uuid, profile=profile
        )
    return mig.attribute([by_index[i] for i in sorted(by_index)], tagged)


def _with_mig(
    card: CardFacts,
    mode: tuple[Optional[bool], Optional[bool]],
    listing: Optional[dict[str, list[Listed]]],
    described: Optional[dict[str, XmlMig]],
) -> CardFacts:
    """``card`` with its MIG mode and, in MIG mode, its slices and their processes.

    Where the compute processes could not be listed, the processes ``-q -x``
    names on the card stand for them.
    """
    current, pending = mode
    if not current:
        return replace(card, mig_mode=current, mig_pending=pending, slices=None if current is None else ())
    listed = None if listing is None or card.uuid is None else listing.get(card.uuid)
    found = None if described is None or card.uuid is None else described.get(card.uuid)
    slices = mig_slices(listed, found)
    processes = card.processes
    if slices is not None:
        if processes is None and found is not None and found[1] is not None:
            processes = tuple(p for _gi, _ci, p in found[1])
        processes = mig.card_processes(processes, slices)
    return replace(card, processes=processes, mig_mode=True, mig_pending=pending, slices=slices)


def _said(raw: bytes) -> str:
    """The first line nvidia-smi printed, to put in an error message."""
    line = next((ln.strip() for ln in raw.decode(errors="replace").splitlines() if ln.strip()), "")
    return line if len(line) <= 200 else line[:197] + "..."


def _processes_by_card(
    cards: Sequence[CardFacts], facts: str, apps: str, listing: Optional[dict[str, list[Listed]]]
) -> dict[int, list[ProcessFacts]]:
    """Each card's compute processes, from ``--query-compute-apps`` (which names cards by uuid)."""
    held: dict[int, list[ProcessFacts]] = {c.index: [] for c in cards}
    where = parse_index_uuid(facts)
    # A process may be listed under its MIG device's uuid: it is on that card.
    for card_uuid, devices in (listing or {}).items():
        if card_uuid in where:
            for _index_on_card, _profile, mig_uuid in devices:
                where.setdefault(mig_uuid, where[card_uuid])
    for uuid, proc in parse_compute_apps(apps):
        index = where.get(uuid)
        if index in held:
            held[index].append(proc)
    return held


def _processes_on(held: Optional[dict[int, list[ProcessFacts]]], card: int) -> Optional[tuple[ProcessFacts, ...]]:
    """Card ``card``'s processes; None (unknown) when they could not be listed."""
    return None if held is None else tuple(held[card])


def _minor(card: CardFacts, gpus_dir: Path) -> Optional[int]:
    """The card's device minor, as the driver writes it in ``gpus_dir/<bus id>/information``
    ("Device Minor"): nvidia-smi's queries have no field for it. None (unknown,
    never the index) where the file cannot be read or names none."""
    if card.pci_bus_id is None:
        return None
    try:
        return card_minor(card.pci_bus_id, gpus_dir)
    except CannotFence:
        return None


class SmiProbe:
    """Reads every card by running nvidia-smi; each card's device minor from ``gpus_dir``."""

    source = SOURCE

    def __init__(self, timeout_s: float = 10.0, binary: str = "nvidia-smi", gpus_dir: Path = DEFAULT_GPUS_DIR) -> None:
        self.timeout_s = timeout_s
        self.binary = binary
        self.gpus_dir = gpus_dir
        #: nvidia-smi processes killed at a deadline, with when, until seen to exit
        self._stragglers: list[tuple[subprocess.Popen[bytes], float]] = []
        #: the topology, from ``nvidia-smi topo -m`` run beside the queries when due
        self._topology = TopologyKeeper()

    async def read(self) -> ProbeReading:
        path = shutil.which(self.binary)
        if path is None:
            return blind_reading(SOURCE, f"{self.binary}: not found on PATH")
        if stuck := self._still_stuck():
            return blind_reading(SOURCE, stuck)
        started = time.monotonic()
        topology = self._topology.due()
        if topology:
            self._topology.begin()
        (
            (facts, facts_err),
            (health_text, health_err),
            (apps, apps_err),
            (modes_text, modes_err),
            (topo, topo_err),
        ) = await asyncio.gather(
            self._run(path, "--query-gpu=" + ",".join(FACTS_FIELDS), _FORMAT),
            self._run(path, "--query-gpu=" + ",".join(HEALTH_FIELDS), _FORMAT),
            self._run(path, "--query-compute-apps=" + ",".join(APPS_FIELDS), _FORMAT),
            self._run(path, "--query-gpu=" + ",".join(MIG_FIELDS), _FORMAT),
            self._run(path, *TOPO_ARGS) if topology else _not_asked(),
        )
        if topology:
            self._topology.keep(*smi_topology(topo, topo_err))
        if facts is None:
            return blind_reading(SOURCE, facts_err)
        cards = parse_gpu_facts(facts)
        if not cards and facts.strip():
            first = facts.strip().splitlines()[0][:200]
            return blind_reading(SOURCE, f"nvidia-smi answered something this probe does not understand: {first!r}")

        notes: list[str] = []
        modes: Optional[dict[int, tuple[Optional[bool], Optional[bool]]]] = None
        if modes_text is None:
            notes.append(f"MIG mode could not be read ({modes_err})")
        else:
            modes = parse_mig_modes(modes_text)
        split = modes is not None and any(modes.get(c.index, (None,))[0] for c in cards)
        listing, described = await self._mig(path, started, notes) if split else (None, None)

        held: Optional[dict[int, list[ProcessFacts]]] = None
        if apps is None:
            notes.append(f"compute processes could not be listed ({apps_err})")
        else:
            held = _processes_by_card(cards, facts, apps, listing)
        reasons: dict[int, tuple[str, ...]] = {}
        if health_text is None:
            notes.append(f"card health could not be read ({health_err})")
        else:
            reasons = parse_gpu_health(health_text)

        return self._topology.attach(
            health.reading(
                SOURCE,
                tuple(
                    _with_mig(
                        replace(
                            c,
                            processes=_processes_on(held, c.index),
                            health=reasons.get(c.index, ()),
                            minor=_minor(c, self.gpus_dir),
                        ),
                        (None, None) if modes is None else modes.get(c.index, (None, None)),
                        listing,
                        described,
                    )
                    for c in cards
                ),
                notes,
            )
        )

    async def _mig(
        self, path: str, started: float, notes: list[str]
    ) -> tuple[Optional[dict[str, list[Listed]]], Optional[dict[str, XmlMig]]]:
        """``-L`` and ``-q -x`` side by side, within what is left of this read's deadline."""
        left = self.timeout_s - (time.monotonic() - started)
        if left <= 0:
            notes.append(f"MIG devices could not be read: nothing was left of the {self.timeout_s:g} s timeout")
            return None, None
        (list_text, list_err), (xml_text, xml_err) = await asyncio.gather(
            self._run(path, "-L", timeout_s=left), self._run(path, "-q", "-x", timeout_s=left)
        )
        listing = described = None
        if list_text is None:
            notes.append(f"MIG devices could not be listed ({list_err})")
        else:
            listing = parse_mig_list(list_text)
        if xml_text is None:
            notes.append(f"MIG devices could not be described ({xml_err})")
        else:
            described = parse_mig_xml(xml_text)
            if described is None:
                notes.append(
                    "MIG devices could not be described (nvidia-smi -q -x answered something "
                    "this probe does not understand)"
                )
        return listing, described

    async def close(self) -> None:
        """Reap what has exited; a straggler that has not is left to the system."""
        self._still_stuck()

    def _still_stuck(self) -> Optional[str]:
        """Why no nvidia-smi may be started now, or None; reaps the stragglers that exited."""
        self._stragglers = [(p, at) for p, at in self._stragglers if p.poll() is None]
        if not self._stragglers:
            return None
        proc, killed_at = self._stragglers[0]
        return (
            f"nvidia-smi (pid {proc.pid}) was killed {time.monotonic() - killed_at:.0f} s ago "
            "for not answering and has not exited, so the driver may be hung; no other "
            "nvidia-smi is started until it exits"
        )

    async def _run(self, path: str, *args: str, timeout_s: Optional[float] = None) -> tuple[Optional[str], str]:
        """nvidia-smi's stdout, or None and why it could not answer (by ``timeout_s``,
        else the probe's timeout)."""
        try:
            proc = subprocess.Popen(
                [path, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            return None, f"nvidia-smi could not be run ({e.strerror or e})"
        try:
            answer = await asyncio.to_thread(_communicate, proc, self.timeout_s if timeout_s is None else timeout_s)
        except BaseException:
            # The caller gave up on this read: end it now, not at the deadline.
            _kill_group(proc)
            raise
        if answer is None:
            self._stragglers.append((proc, time.monotonic()))
            return None, f"nvidia-smi did not answer within {self.timeout_s:g} s"
        out, err = answer
        if proc.returncode != 0:
            said = _said(err) or _said(out)
            return None, f"nvidia-smi exited with status {proc.returncode}" + (f": {said}" if said else "")
        return out.decode(errors="replace"), ""


async def _not_asked() -> tuple[Optional[str], str]:
    """Stands for ``topo -m`` in a read that does not run it."""
    return None, ""


def _communicate(proc: subprocess.Popen[bytes], timeout_s: float) -> Optional[tuple[bytes, bytes]]:
    """Its output once it has exited; None at the deadline, when it is killed and let go.

    Letting go means closing this end of its pipes and not waiting for the
    process: ``communicate`` gives up at the deadline whatever the process
    does, so this returns by then.
    """
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to nvidia-smi and everything in its process group.

    Only while it has not been reaped: until then its pid, which is the
    group's id, cannot belong to anyone else.
    """
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
