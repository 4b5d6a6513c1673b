"""Whether a card may go back into service: each criterion of a check, and what a drain for a reboot asks.

Pure: what the check's own process read of the driver (:class:`CheckFacts`),
the drain, the boots, the XIDs since and the operator's command are judged
into findings, one a criterion, in words a person acts on. A criterion the
card does not have is not asked; one that could not be read is not told and
keeps the check from passing: unknown is not fine. The criteria: see
docs/architecture.md, section 'Checks: drain, check, return'.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tpnode_tui.core.xid import meaning, recovery_words
from tpnode_tui.model.checks import MET, NOT_ASKED, NOT_MET, UNTOLD, CardCheck, CheckFacts, CommandRun, Finding
from tpnode_tui.model.views import Drain
from tpnode_tui.text.render import clock_time, format_duration


def _missing(name: str, what: str, unread: dict[str, str]) -> Finding:
    """A fact tier A has not: not told when it could not be read, else not asked (the card has no such fact)."""
    for fact, why in unread.items():
        if fact == what:
            return Finding(name, UNTOLD, f"{what} could not be read ({why})")
    return Finding(name, NOT_ASKED, f"the card does not report {what}")


def _ecc(facts: CheckFacts, drain: Optional[Drain], unread: dict[str, str]) -> Finding:
    """No uncorrectable ECC error since the drain; with no count from the drain, none since the driver loaded."""
    if drain is not None and drain.ecc is not None:
        if facts.ecc_total is None:
            return _missing("ecc", "the ECC error count", unread)
        rise = facts.ecc_total - drain.ecc
        if rise > 0:
            return Finding(
                "ecc",
                NOT_MET,
                f"{rise} more uncorrectable ECC errors since the drain ({facts.ecc_total}, was {drain.ecc})",
            )
        return Finding("ecc", MET, "no uncorrectable ECC error since the drain")
    if facts.ecc_volatile is None:
        return _missing("ecc", "the ECC errors since the driver loaded", unread)
    if facts.ecc_volatile > 0:
        return Finding("ecc", NOT_MET, f"{facts.ecc_volatile} uncorrectable ECC errors since the driver last loaded")
    return Finding("ecc", MET, "no uncorrectable ECC error since the driver last loaded")


def _remap(facts: CheckFacts, unread: dict[str, str]) -> Finding:
    if facts.remap_failed is None or facts.remap_pending is None:
        return _missing("row remapping", "row remapping", unread)
    if facts.remap_failed:
        return Finding("row remapping", NOT_MET, "row remapping failed: the card must be serviced")
    if facts.remap_pending:
        return Finding("row remapping", NOT_MET, "row remapping pending: reset the GPU (nvidia-smi -r)")
    return Finding("row remapping", MET, "no row remapping pending or failed")


def _recovery(facts: CheckFacts, unread: dict[str, str]) -> Finding:
    if facts.recovery_action is None:
        return _missing("recovery", "the recovery action", unread)
    said = recovery_words(facts.recovery_action)
    if said is not None:
        return Finding("recovery", NOT_MET, f"the driver asks to {said}")
    return Finding("recovery", MET, "the driver asks for no recovery")


def _pcie(facts: CheckFacts, unread: dict[str, str]) -> Finding:
    """The link at its maximum width, and generation. A card saving power (a
    performance state below P0, as an idle card is) lowers its link's
    generation, which is no fault: then only its width is judged, and a test
    that loads the card (the check command) shows the rest."""
    link = (facts.link_gen, facts.link_width, facts.link_gen_max, facts.link_width_max)
    named = (
        "the PCIe link generation",
        "the PCIe link width",
        "the most PCIe link generation",
        "the most PCIe link width",
    )
    for value, what in zip(link, named):
        if value is None:
            return _missing("pcie", what, unread)
    gen, width, most_gen, most_width = (v or 0 for v in link)
    if width < most_width:
        return Finding("pcie", NOT_MET, f"PCIe link x{width}, below its maximum width x{most_width}")
    if gen >= most_gen:
        return Finding("pcie", MET, f"PCIe link at gen {gen} x{width}, its maximum")
    if facts.pstate:
        return Finding(
            "pcie",
            MET,
            f"PCIe link x{width}, its maximum width; gen {gen} of {most_gen}: the card saves power in P{facts.pstate}",
        )
    return Finding("pcie", NOT_MET, f"PCIe link at gen {gen} x{width}, below its maximum gen {most_gen}")


def _processes(facts: CheckFacts, unread: dict[str, str]) -> Finding:
    if facts.processes is None:
        return _missing("processes", "the process list", unread)
    if facts.processes:
        return Finding("processes", NOT_MET, "processes on it: pid " + ", ".join(map(str, facts.processes)))
    return Finding("processes", MET, "no process on it")


def read_findings(facts: Optional[CheckFacts], problem: Optional[str], drain: Optional[Drain]) -> tuple[Finding, ...]:
    """Tier A: what the driver said of the card (``facts``; None: it could not be
    asked, and ``problem`` says why), against its ``drain`` where it has one."""
    if facts is None or not facts.reached:
        why = problem if facts is None else facts.problem
        return (Finding("answers", UNTOLD, f"the driver could not be asked: {why}"),)
    if not facts.answered:
        return (Finding("answers", NOT_MET, f"the card does not answer by its uuid {facts.uuid}: {facts.problem}"),)
    unread = dict(facts.unread)
    return (
        Finding("answers", MET, f"the card answers by its uuid {facts.uuid}"),
        _ecc(facts, drain, unread),
        _remap(facts, unread),
        _recovery(facts, unread),
        _pcie(facts, unread),
        _processes(facts, unread),
    )


def reboot_finding(drain: Optional[Drain], boot_now: Optional[str]) -> Optional[Finding]:
    """For a drain whose cure is a reboot: whether the node has rebooted since (its boot id changed)."""
    if drain is None or not drain.reboot:
        return None
    if drain.boot is None:
        return Finding("reboot", UNTOLD, "the boot it was drained in was not recorded: a reboot since cannot be told")
    if boot_now is None:
        return Finding("reboot", UNTOLD, "this boot's id cannot be read: a reboot since the drain cannot be told")
    if boot_now == drain.boot:
        return Finding("reboot", NOT_MET, "the node has not rebooted since the drain, and only a reboot cures it")
    return Finding("reboot", MET, "the node has rebooted since the drain")


def xid_finding(
    seen: Sequence[tuple[int, float]], since: float, since_words: str, watching: Optional[str], now: float
) -> Finding:
    """No XID on the card after ``since`` (``since_words``: "the drain at 14:02");
    ``seen``: (XID, when) as watched; ``watching``: why XIDs are not watched now, if not."""
    after = [(xid, at) for xid, at in seen if at > since]
    if after:
        xid, at = max(after, key=lambda pair: pair[1])
        return Finding("xid", NOT_MET, f"XID {xid} at {clock_time(at, now)} ({meaning(xid)}), after {since_words}")
    if watching is not None:
        return Finding("xid", UNTOLD, f"whether an XID came since {since_words} cannot be told: {watching}")
    return Finding("xid", MET, f"no XID since {since_words}")


def command_finding(run: CommandRun) -> Finding:
    """Tier B: the operator's command passes the card when it exits 0."""
    if run.problem is not None:
        return Finding("command", UNTOLD, f"{run.command} could not be run: {run.problem}")
    took = format_duration(run.seconds)
    if run.timed_out:
        return Finding("command", NOT_MET, f"{run.command} did not end within its time-out and was killed after {took}")
    if run.exit_code == 0:
        return Finding("command", MET, f"{run.command} exited 0 after {took}")
    how = f"exit code {run.exit_code}" if (run.exit_code or 0) >= 0 else f"signal {-(run.exit_code or 0)}"
    last = f"; it said: {run.tail[-1]}" if run.tail else ""
    return Finding("command", NOT_MET, f"{run.command} ended with {how} after {took}{last}")


def stays_drained(drain: Drain, boot_now: Optional[str], last: Optional[CardCheck], now: float) -> Optional[str]:
    """Why a drain whose cure is a reboot may not be lifted yet, or None once the node has
    rebooted since and a check of the card has passed in this boot."""
    if not drain.reboot:
        return None
    card, when = drain.card, clock_time(drain.at, now)
    force = f"undrain {card} --force puts it back all the same"
    if drain.boot is None or boot_now is None:
        which = "its boot was not recorded" if drain.boot is None else "this boot's id cannot be read"
        return f"card {card} stays drained until the node has rebooted ({drain.reason}), and {which}; {force}"
    if boot_now == drain.boot:
        return (
            f"card {card} stays drained until the node has rebooted: {drain.reason}. It was drained at {when} "
            f"and the node has not rebooted since; reboot it, then check the card (tpnode-tui check {card}); {force}"
        )
    if last is None or not last.passed or last.boot != boot_now or last.at < drain.at:
        return (
            f"card {card} was drained at {when} until the node rebooted ({drain.reason}); it has rebooted since, "
            f"but no check of the card has passed since: check it (tpnode-tui check {card}); {force}"
        )
    return None
