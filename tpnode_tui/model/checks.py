"""A card's check before it goes back into service: what was read, what was found, what became of it.

A drain says a card must not be handed out; nothing on the card says when it
may be again. A check (``tpnode-tui check CARD``, operators) asks: tier A
reads the driver (NVML, in a process of its own that is killed at its
deadline) by the card's uuid; tier B, where the operator set one, runs their
own test of the card (``TUNEPLANE_CHECK_COMMAND``). Each criterion is one
:class:`Finding`; the check passes only when every one is met, and a
criterion that could not be told is not taken for met.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: how a check ended: every criterion met | one not met | none failed, but one could not be told
PASSED, FAILED, UNKNOWN = "passed", "failed", "unknown"
OUTCOMES = (PASSED, FAILED, UNKNOWN)

#: one criterion: met | not met | not told (it could not be read) | not asked (the card or
#: its driver has no such fact: a card without ECC, a driver that reports no recovery action)
MET, NOT_MET, UNTOLD, NOT_ASKED = "ok", "failed", "unknown", "n/a"
FINDINGS = (MET, NOT_MET, UNTOLD, NOT_ASKED)


@dataclass(frozen=True)
class CheckFacts:
    """What tier A read of one card, through NVML by its uuid (or from the simulated node's file).

    A fact the card or its driver does not have is None; one that could not be
    read is None too, and ``unread`` says which and why, so the two are never
    confused: "no ECC on this card" is an answer, "ECC could not be read" is not.
    """

    uuid: str
    #: whether the driver finds a card by this uuid and answers for it
    answered: bool
    #: why it does not answer, in plain words (None when it does)
    problem: Optional[str] = None
    #: whether the driver could be asked at all (False: NVML did not start, the node's
    #: fault and not this card's, and ``problem`` says why)
    reached: bool = True
    #: uncorrectable ECC errors over the card's life (NVML's aggregate counter, kept across reboots)
    ecc_total: Optional[int] = None
    #: uncorrectable ECC errors since the driver last loaded (its volatile counter)
    ecc_volatile: Optional[int] = None
    remap_pending: Optional[bool] = None
    remap_failed: Optional[bool] = None
    #: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 reset, 2 reboot ... (core/xid.py)
    recovery_action: Optional[int] = None
    link_gen: Optional[int] = None
    link_gen_max: Optional[int] = None
    link_width: Optional[int] = None
    link_width_max: Optional[int] = None
    #: its performance state, 0 (P0, full speed) to 15: a card saving power lowers its link's generation
    pstate: Optional[int] = None
    #: the pids of the compute processes on it
    processes: Optional[tuple[int, ...]] = None
    #: (fact, why) for each fact that could not be read
    unread: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Finding:
    """One criterion of a check, and what was found."""

    #: what was looked at: "answers", "reboot", "xid", "ecc", "row remapping", "recovery",
    #: "pcie", "processes", "command"
    name: str
    #: MET, NOT_MET, UNTOLD or NOT_ASKED
    outcome: str
    #: what was found, in plain words
    words: str

    @property
    def against(self) -> bool:
        """Whether it keeps the check from passing."""
        return self.outcome in (NOT_MET, UNTOLD)


@dataclass(frozen=True)
class CommandRun:
    """Tier B: the operator's own test of the card, as it ran."""

    #: the command as run (the card's uuid and index put in), words joined as a shell would read them
    command: str
    #: its exit code; None when it did not end by itself (killed at its time-out) or never started
    exit_code: Optional[int]
    seconds: float
    #: its last lines (standard output and error together), made printable, at most a few KiB
    tail: tuple[str, ...] = ()
    timed_out: bool = False
    #: why it could not be started
    problem: Optional[str] = None


@dataclass(frozen=True)
class CardCheck:
    """One check of one card, as it ended: kept as the card's last check, logged, served."""

    card: int
    #: the uuid the driver was asked for (None when the node's reading gave none)
    uuid: Optional[str]
    #: who asked for it
    by: str
    began: float
    #: when it ended
    at: float
    #: the boot it ran in (/proc/sys/kernel/random/boot_id), None when it could not be read
    boot: Optional[str]
    #: PASSED, FAILED or UNKNOWN
    outcome: str
    findings: tuple[Finding, ...]
    command: Optional[CommandRun] = None
    #: what the node did with the card after it, in plain words ("" when nothing)
    effect: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    @property
    def against(self) -> tuple[Finding, ...]:
        """The criteria that kept it from passing."""
        return tuple(f for f in self.findings if f.against)

    def summary(self) -> str:
        """What became of the card, after its name: "passed its check", "failed its check:
        PCIe link at gen 3 x16, below its maximum gen 5 x16; ...", "could not be checked: ..."."""
        if self.passed:
            return "passed its check"
        said = "failed its check" if self.outcome == FAILED else "could not be checked"
        return f"{said}: " + "; ".join(f.words for f in self.against)


def outcome_of(findings: tuple[Finding, ...]) -> str:
    """FAILED when a criterion is not met; else UNKNOWN when one could not be told; else PASSED."""
    if any(f.outcome == NOT_MET for f in findings):
        return FAILED
    if any(f.outcome == UNTOLD for f in findings):
        return UNKNOWN
    return PASSED
