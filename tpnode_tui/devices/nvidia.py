"""What the NVIDIA driver says about its device files: its majors, the MIG capabilities' minors, a card's minor.

The device cgroup knows a device by type, major and minor, never by path, so
a fence is written in those numbers (the table: docs/architecture.md, section
'What a job may open'). Every file read here is under /proc and every path is
a parameter, so tests point them at files of their own. Their text is
untrusted: a line that does not parse is skipped, a file that cannot be read
is an error naming it, never a traceback.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from tpnode_tui.devices.errors import CannotFence

#: The major of NVIDIA's character devices, fixed by the driver (NV_MAJOR_DEVICE_NUMBER).
NVIDIA_MAJOR = 195
#: /dev/nvidiactl: every process that uses the driver opens it first.
CTL_MINOR = 255
#: /dev/nvidia-modeset: display mode setting, opened by the driver's own tools.
MODESET_MINOR = 254
#: The highest minor a card can have (254 and 255 are the control devices above).
MAX_CARD_MINOR = 253
#: /dev/nvidia-uvm and /dev/nvidia-uvm-tools, the only minors of the nvidia-uvm major.
UVM_MINORS = (0, 1)
#: their names in /proc/devices
UVM_NAME = "nvidia-uvm"
CAPS_NAME = "nvidia-caps"

#: The largest major and minor a dev_t holds (12 and 20 bits): anything larger is not a device number.
MAX_MAJOR = (1 << 12) - 1
MAX_MINOR = (1 << 20) - 1

DEFAULT_PROC_DEVICES = Path("/proc/devices")
DEFAULT_MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")
DEFAULT_GPUS_DIR = Path("/proc/driver/nvidia/gpus")


def _words(path: Path, e: OSError) -> str:
    return f"cannot read {path}: {e.strerror or e}"


# ── /proc/devices ────────────────────────────────────────────────────────────


def parse_proc_devices(text: str) -> dict[str, int]:
    """The character devices' majors by name, from ``/proc/devices``.

    Only the "Character devices:" section counts (a block major of the same
    number is another device). Where a name is listed twice the first stays.
    """
    majors: dict[str, int] = {}
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            section = stripped
            continue
        if section != "Character devices:":
            continue
        number, _, name = stripped.partition(" ")
        name = name.strip()
        if not number.isdecimal() or not name or not 0 < int(number) <= MAX_MAJOR:
            continue
        majors.setdefault(name, int(number))
    return majors


@dataclass(frozen=True)
class NvidiaMajors:
    """The dynamic majors of NVIDIA's modules on this node; None for a module that is not loaded.

    Card files are always major 195 (:data:`NVIDIA_MAJOR`); these two are
    handed out by the kernel at load time, so they are read, never assumed.
    """

    uvm: Optional[int] = None
    caps: Optional[int] = None


def read_majors(path: Path = DEFAULT_PROC_DEVICES) -> NvidiaMajors:
    """The majors of ``nvidia-uvm`` and ``nvidia-caps`` from ``path``; CannotFence when it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise CannotFence(_words(path, e)) from None
    majors = parse_proc_devices(text)
    return NvidiaMajors(uvm=majors.get(UVM_NAME), caps=majors.get(CAPS_NAME))


# ── /proc/driver/nvidia-caps/mig-minors ─────────────────────────────────────

#: A capability scoped to one card ("gpu2/gi1/access"): the N of gpuN is the card's device minor.
_ON_CARD = re.compile(r"gpu(\d{1,3})/")


@dataclass(frozen=True)
class MigMinors:
    """The nvidia-caps minors the driver lists: each capability's name and minor.

    The driver lists every capability it could ever hand out (``config``,
    ``monitor``, and the access capability of each GPU instance and compute
    instance of each card it supports: thousands of lines), whether the
    instance exists or not; ``nvidia-modprobe`` makes the device files from
    this list. Looked up by name and by card, so the list is indexed once.
    """

    entries: tuple[tuple[str, int], ...] = ()
    _by_name: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _by_card: Mapping[Optional[int], tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, int] = {}
        by_card: dict[Optional[int], list[int]] = {}
        for name, minor in self.entries:
            by_name.setdefault(name, minor)
            by_card.setdefault(self.card_of(name), []).append(minor)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_card", {card: tuple(minors) for card, minors in by_card.items()})

    def minor(self, name: str) -> Optional[int]:
        """The minor of capability ``name`` (the first, where it is listed twice); None when it is not listed."""
        return self._by_name.get(name)

    def access(self, card: int, gpu_instance: int, compute_instance: Optional[int] = None) -> Optional[int]:
        """The minor of the access capability of a GPU instance (or of one of its compute instances)."""
        ci = "" if compute_instance is None else f"/ci{compute_instance}"
        return self.minor(f"gpu{card}/gi{gpu_instance}{ci}/access")

    def on_card(self, card: Optional[int]) -> tuple[int, ...]:
        """The minors of card ``card``'s capabilities; for None, those of the node-wide ones (config, monitor)."""
        return self._by_card.get(card, ())

    @staticmethod
    def card_of(name: str) -> Optional[int]:
        """The card minor a capability belongs to ("gpu2/gi1/access": 2); None for a node-wide one ("config")."""
        found = _ON_CARD.match(name)
        return int(found.group(1)) if found else None


@functools.lru_cache(maxsize=2)
def parse_mig_minors(text: str) -> MigMinors:
    """``mig-minors``'s lines ("config 1", "gpu0/gi1/ci0/access 4"); a malformed line is skipped.

    The driver's list is thousands of lines and the same for as long as the
    driver is loaded, and each fence reads it. The file is read every time;
    only the parsing of a text already parsed is remembered, which is a pure
    function of that text and so can never be stale.
    """
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdecimal() or int(fields[1]) > MAX_MINOR:
            continue
        entries.append((fields[0], int(fields[1])))
    return MigMinors(tuple(entries))


def read_mig_minors(path: Path = DEFAULT_MIG_MINORS) -> MigMinors:
    """The MIG capabilities' minors from ``path``; CannotFence when it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise CannotFence(_words(path, e)) from None
    return parse_mig_minors(text)


# ── /proc/driver/nvidia/gpus/<bus id>/information ───────────────────────────

#: A PCI address as nvidia-smi and NVML give it ("00000000:3B:00.0") or as /proc names it ("0000:3b:00.0").
_BUS_ID = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_DEVICE_MINOR = re.compile(r"Device Minor:\s*(\d{1,3})\s*")


def proc_bus_id(bus_id: str) -> str:
    """The directory name the driver gives a card under /proc ("0000:3b:00.0") for its bus id.

    nvidia-smi and NVML write the domain with eight digits and upper-case
    letters; the driver's directory uses four and lower case. Anything that is
    not a PCI address is refused, so a bus id can never name another path.
    """
    found = _BUS_ID.fullmatch(bus_id.strip())
    if found is None:
        raise CannotFence(f"{bus_id!r} is not a PCI bus id (such as 00000000:3B:00.0)")
    domain, bus, device, function = found.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def parse_device_minor(text: str) -> Optional[int]:
    """The "Device Minor:" of a card's ``information`` file; None when it names none (or one out of range)."""
    for line in text.splitlines():
        found = _DEVICE_MINOR.fullmatch(line.strip())
        if found is not None and int(found.group(1)) <= MAX_CARD_MINOR:
            return int(found.group(1))
    return None


def card_minor(bus_id: str, gpus_dir: Path = DEFAULT_GPUS_DIR) -> int:
    """The device minor of the card at ``bus_id`` (its file is /dev/nvidia<minor>).

    The minor is not the card's index: nvidia-smi numbers cards by PCI order,
    the driver gives minors in the order it found them, and the two differ on
    some machines. CannotFence, naming the file, when it cannot be read.
    """
    path = gpus_dir / proc_bus_id(bus_id) / "information"
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise CannotFence(_words(path, e)) from None
    minor = parse_device_minor(text)
    if minor is None:
        raise CannotFence(f"{path} names no Device Minor between 0 and {MAX_CARD_MINOR}")
    return minor
