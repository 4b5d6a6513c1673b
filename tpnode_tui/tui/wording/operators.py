"""What the dashboard says around drain, undrain and evict: the questions and the outcomes.

Each of these acts on someone's work or on a card others are waiting for,
so each asks first, and the question names exactly what will be touched:
evict asks the node for a dry run and lists the processes it would signal,
pid by pid, and signals exactly those. The node decides and words every
refusal; these only lay out what it answered.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from tpnode_tui.model.checks import FAILED, CardCheck
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, Drain, Evicted, EvictReport
from tpnode_tui.text.refusals import UNDRAIN_REFUSES
from tpnode_tui.text.render import card_summary, cards_words, format_mib
from tpnode_tui.tui.wording.card import drain_source
from tpnode_tui.tui.wording.cells import fit

#: widest a command is shown in a question (the detail pane has it in full)
COMMAND_WIDTH = 62

#: outcomes of an eviction that leave the process where it was
NOT_GONE = ("running", "failed")


def _who(e: Evicted) -> str:
    return e.user or (f"uid {e.uid}" if e.uid is not None else "user unknown")


def process_lines(e: Evicted) -> str:
    """Two lines: "pid 4242 · mallory · 18.0 GiB · card 3, intruder", then its command."""
    memory = format_mib(e.used_memory_mib) if e.used_memory_mib is not None else "memory unknown"
    command = fit(e.command or "command not readable", COMMAND_WIDTH)
    return f"  pid {e.pid} · {_who(e)} · {memory} · card {e.card}, {e.belongs}\n      {command}"


def evict_question(report: EvictReport) -> str:
    n = len(report.processes)
    lines = "\n".join(process_lines(e) for e in report.processes)
    if n == 1:
        then = (
            "The node waits up to {g} s for it to end; if it is still running then, SIGKILL is "
            "offered next. Only this pid is signalled, and only while it is still the process "
            "listed here."
        )
    else:
        then = (
            "The node waits up to {g} s for them to end; whatever is still running then is "
            "offered SIGKILL next. Only these pids are signalled, each only while it is still "
            "the process listed here."
        )
    return (
        f"{'This process' if n == 1 else f'These {n} processes'} on card {report.card} would be "
        f"sent SIGTERM:\n\n{lines}\n\n" + then.format(g=f"{report.grace_s:g}")
    )


def kill_question(card: int, survivors: Sequence[Evicted], grace_s: float) -> str:
    n = len(survivors)
    lines = "\n".join(process_lines(e) for e in survivors)
    return (
        f"{'This process' if n == 1 else f'These {n} processes'} on card {card} did not end "
        f"within {grace_s:g} s of SIGTERM:\n\n{lines}\n\nSend SIGKILL? "
        f"{'It is' if n == 1 else 'They are'} sent SIGTERM once more and, if still running "
        f"{grace_s:g} s later, SIGKILL, which cannot be caught: whatever "
        f"{'it has' if n == 1 else 'they have'} not saved is lost."
    )


def fates(processes: Iterable[Evicted]) -> str:
    """Each process and what became of it, one a line."""
    return "\n".join(
        f"pid {e.pid} ({_who(e)}, {fit(e.command or 'command not readable', COMMAND_WIDTH)}): {e.fate}"
        for e in processes
    )


def drain_context(card: CardView) -> str:
    """What draining the card means for what is on it now."""
    if card.job is not None and card.job.live:
        return (
            f"Card {card.index} is held by {card.job.key}"
            + (f" of {card.job.owner}" if card.job.owner else "")
            + ": it keeps running, and the card is not handed out again when it ends. Only an "
            "operator can undrain it (u)."
        )
    now = card_summary(card)
    state = f"{card.state}: {now}" if now and now != card.state else card.state
    return (
        f"Card {card.index} is {state}. Drained, it is never handed out until an operator undrains "
        "it (u). Say why, for the next operator."
    )


def undrain_question(card: CardView, drain: Drain, now: float, snap: Optional[NodeSnapshot]) -> str:
    """Whether to put the card back, with who drained it, why, until when, and why the node may refuse."""
    returns, boot = (snap.return_after_check, snap.boot) if snap is not None else (None, None)
    return (
        f"Card {card.index} was drained {drain_source(drain, now, card.check, returns, boot)}.\n\n"
        f"  {drain.reason}\n\nPut it back in service? It can be handed out again at once. {UNDRAIN_REFUSES}."
    )


def check_words(check: CardCheck) -> tuple[str, str]:
    """A check's notice: its title ("Card 2 passed its check"), then what became of
    the card and each criterion, one a line, with what the node did."""
    head = (
        "passed its check"
        if check.passed
        else "failed its check"
        if check.outcome == FAILED
        else "could not be checked"
    )
    lines = [f"{f.outcome}  {f.name}: {f.words}" for f in check.findings]
    if check.effect:
        lines.append(f"The node: {check.effect}.")
    return f"Card {check.card} {head}", "\n".join(lines)


def evicting_words(card: int, processes: Sequence[Evicted], kill: bool, grace_s: float) -> str:
    pids = ", ".join(str(e.pid) for e in processes)
    then = (
        f"SIGTERM, then SIGKILL after {grace_s:g} s if still running"
        if kill
        else f"SIGTERM; waiting up to {grace_s:g} s for {'it' if len(processes) == 1 else 'them'} to end"
    )
    return f"Evicting pid {pids} from {cards_words([card])}: {then}."
