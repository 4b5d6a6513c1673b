"""XIDs: what the driver's error codes mean, what to do about them, and how the kernel log says them.

The NVIDIA device plugin marks a card unhealthy on almost any XID and never
gives it back, though most XIDs are the program's fault and many faults
clear after a reset. So each XID is classified by NVIDIA's catalog (drain,
reboot, application, or only shown), the driver's own recovery action wins
where it says one, and ``NVRM: Xid`` lines of ``/dev/kmsg`` are parsed here.
See docs/architecture.md, section 'Triage' ("XIDs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

#: NVIDIA's catalog: XID -> what it means, in its words
MEANINGS: dict[int, str] = {
    8: "GPU stopped processing",
    13: "graphics engine exception (the program on the card faulted)",
    31: "GPU memory page fault (the program on the card accessed memory it may not)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (the program on the card was ended)",
    44: "graphics engine fault during context switch",
    45: "preemptive cleanup after earlier errors",
    46: "GPU stopped processing",
    48: "double bit ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "GPU memory remapping failure",
    68: "video decoder (NVDEC) exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained memory error (the program using the bad memory was ended)",
    95: "uncontained memory error",
    109: "context switch timeout",
    110: "security fault",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link corrected error",
    136: "link training failed",
    140: "unrecovered ECC error",
    143: "GPU initialization error",
    154: "GPU recovery action changed",
    155: "NVLink software-defined error",
    156: "resource retirement event",
    158: "GPU fatal timeout",
}

#: the program on the card failed, not the card
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 69, 94})
#: a reset cannot reach the card: the node must reboot
REBOOT_XIDS = frozenset({79})

DRAIN, REBOOT, APPLICATION, OTHER, IGNORED = "drain", "reboot", "application", "other", "ignored"

RESET_GPU = "reset the GPU (nvidia-smi -r) once nothing runs on it"
REBOOT_NODE = "reboot the node"

#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (nvmlGpuRecoveryAction_t) in plain words
RECOVERY_ACTIONS: dict[int, Optional[str]] = {
    0: None,
    1: RESET_GPU,
    2: REBOOT_NODE,
    3: "stop the jobs that use peer-to-peer transfers with it (drain P2P)",
    4: "stop the jobs that use peer-to-peer transfers with it, then " + RESET_GPU,
    5: "recover the IMEX domain",
    6: "reset the GPU's PCIe bus",
    7: "reboot the system",
}


def recovery_words(action: Optional[int]) -> Optional[str]:
    """What the driver says the card needs; None for "nothing" or unknown."""
    if action is None:
        return None
    return RECOVERY_ACTIONS.get(action, f"recovery action {action} (see NVIDIA's XID catalog)")


def meaning(xid: int) -> str:
    return MEANINGS.get(xid, "see NVIDIA's XID catalog")


@dataclass(frozen=True)
class Verdict:
    """What to do about one XID on one card (``xid`` None: the card was lost with no XID)."""

    xid: Optional[int]
    #: DRAIN, REBOOT, APPLICATION, OTHER or IGNORED
    kind: str
    meaning: str
    #: what a person should do, in plain words; None when nothing
    action: Optional[str]

    @property
    def drains(self) -> bool:
        return self.kind in (DRAIN, REBOOT)

    def words(self) -> str:
        """ "XID 79: GPU has fallen off the bus; reboot the node"."""
        what = self.meaning if self.xid is None else f"XID {self.xid}: {self.meaning}"
        return what + (f"; {self.action}" if self.action else "")


@dataclass(frozen=True)
class XidRules:
    """Which XIDs drain and which are only logged (from TUNEPLANE_XID_DRAIN and _IGNORE)."""

    drain: frozenset[int]
    ignore: frozenset[int] = frozenset()

    @classmethod
    def of(cls, drain: Iterable[int], ignore: Iterable[int] = ()) -> XidRules:
        return cls(frozenset(drain), frozenset(ignore))

    def judge(self, xid: int, recovery_action: Optional[int] = None) -> Verdict:
        """The verdict on ``xid``; the driver's recovery action, when it names
        one, decides what is to be done and that the card is drained."""
        said = recovery_words(recovery_action)
        if xid in self.ignore:
            return Verdict(xid, IGNORED, meaning(xid), None)
        if said is not None:
            kind = REBOOT if recovery_action in (2, 7) else DRAIN
            return Verdict(xid, kind, meaning(xid), said)
        if xid in self.drain:
            if xid in REBOOT_XIDS:
                return Verdict(xid, REBOOT, meaning(xid), REBOOT_NODE)
            return Verdict(xid, DRAIN, meaning(xid), RESET_GPU)
        if xid in APPLICATION_XIDS:
            return Verdict(
                xid, APPLICATION, meaning(xid), "the program on the card failed; the card is fine and was not drained"
            )
        return Verdict(xid, OTHER, meaning(xid), None)


# ── the kernel log ──────────────────────────────────────────────────────────

#: "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout ..."; older
#: drivers write the address without "PCI:", some add the function (".0")
_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\)"
    r": (?P<xid>\d{1,5}),\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid='?(?P<pid>\d+|<unknown>)'?,\s*(?:name='?(?P<name>[^,']*)'?,\s*)?(?P<text>.*)$")


@dataclass(frozen=True)
class KernelXid:
    """One XID as the driver wrote it to the kernel log."""

    #: the card's PCI address as "domain:bus:device", normalised (see pci_key)
    pci: str
    xid: int
    pid: Optional[int]
    #: the process name the driver gave, as it gave it (untrusted)
    process: Optional[str]
    #: the rest of the driver's message
    text: str


def pci_key(address: str) -> Optional[str]:
    """A PCI address as "domain:bus:device" in lower-case hex without padding,
    so "00000000:3B:00.0" (NVML) and "0000:3b:00" (the kernel log) compare equal."""
    parts = address.strip().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    try:
        domain, bus = int(parts[0], 16), int(parts[1], 16)
        device = int(parts[2].split(".")[0], 16)
    except ValueError:
        return None
    return f"{domain:x}:{bus:x}:{device:x}"


def parse_kmsg(record: str) -> Optional[KernelXid]:
    """The XID in one ``/dev/kmsg`` record (or one plain log line); None for anything else.

    A record is "PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;MESSAGE", possibly followed
    by continuation lines (" KEY=value") that say nothing of XIDs.
    """
    line = record.split("\n", 1)[0]
    head, sep, message = line.partition(";")
    if sep and "," in head and "NVRM" not in head:
        line = message
    match = _XID_LINE.search(line)
    if match is None:
        return None
    pci = pci_key(match["pci"])
    if pci is None:
        return None
    rest = match["rest"].strip()
    pid: Optional[int] = None
    process: Optional[str] = None
    named = _PID.match(rest)
    if named is not None:
        pid = int(named["pid"]) if named["pid"].isdigit() and int(named["pid"]) > 0 else None
        process = named["name"] if named["name"] not in (None, "<unknown>") else None
        rest = named["text"].strip()
    return KernelXid(pci=pci, xid=int(match["xid"]), pid=pid, process=process, text=rest)
