"""Drain, undrain, check and evict: what an operator does to a card, and to the processes on it.

Each acts on someone's work or on a card others are waiting for, so each
asks first, and the question names exactly what will be touched: evict asks
the node for a dry run and lists the processes it would signal, pid by pid,
and signals exactly those.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.errors import Conflict, JobNotFound
from tpnode_tui.model.views import Drain, Evicted, EvictReport
from tpnode_tui.text.printable import printable_view
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.drain import DrainScreen
from tpnode_tui.tui.screens.flows.desk import Desk, failed, not_operator, refused
from tpnode_tui.tui.wording.keys import BY_NAME
from tpnode_tui.tui.wording.operators import (
    NOT_GONE,
    check_words,
    drain_context,
    evict_question,
    evicting_words,
    fates,
    kill_question,
    undrain_question,
)


def drain(desk: Desk) -> None:
    """The drain key: why the selected card is taken out of service."""
    if refused(desk, "draining") or not_operator(desk, "drain a card"):
        return
    now = desk.selection()
    card = now.triage_card()
    if card is None:
        desk.notify(BY_NAME["drain"].why_not(now), severity="warning")
        return
    desk.start(_ask_then_drain(desk, DrainScreen(card.index, context=drain_context(card)), card.index), group="action")


async def _ask_then_drain(desk: Desk, form: DrainScreen, card: int) -> None:
    """The node decides (operators only) and words any refusal."""
    reason = await desk.ask(form)
    if reason is None:
        return
    try:
        drained = printable_view(await desk.session.node.drain(card, reason))
    except Exception as e:
        failed(desk, f"Could not drain card {card}", e)
        return
    desk.notify(
        f"Card {card} is out of service: {drained.reason}. It is not handed out until an operator undrains it (u).",
        title="Drained",
    )


def undrain(desk: Desk) -> None:
    """The undrain key: the selected drained card back in service, asked first."""
    if refused(desk, "undraining") or not_operator(desk, "undrain a card"):
        return
    now = desk.selection()
    card = now.triage_card()
    if card is None or card.drain is None:
        desk.notify(BY_NAME["undrain"].why_not(now), severity="warning")
        return
    index = card.index
    question = undrain_question(card, card.drain, desk.session.clock(), now.snapshot)
    desk.start(
        _ask_then_undrain(desk, ConfirmScreen(f"Undrain card {index}?", question, yes="Undrain"), index), "action"
    )


async def _ask_then_undrain(desk: Desk, question: ConfirmScreen, card: int) -> None:
    """Refused while the card still reports a problem, or a drain until a reboot
    has not seen a reboot and a check passed since: the node says which."""
    if not await desk.ask(question):
        return
    try:
        lifted: Drain = printable_view(await desk.session.node.undrain(card))
    except Conflict as e:
        failed(desk, f"Card {card} stays drained", e)
        return
    except Exception as e:
        failed(desk, f"Could not undrain card {card}", e)
        return
    desk.notify(f"Card {card} is back in service (it was drained by {lifted.by}: {lifted.reason}).", title="Undrained")


def check(desk: Desk) -> None:
    """The check key: the selected card checked by the node, as tpnode-tui check does, and its result."""
    if refused(desk, "checking") or not_operator(desk, "check a card"):
        return
    now = desk.selection()
    card = now.triage_card()
    if card is None or not BY_NAME["check"].offered(now):
        desk.notify(BY_NAME["check"].why_not(now), severity="warning")
        return
    desk.start(_check(desk, card.index), group="action")


async def _check(desk: Desk, card: int) -> None:
    """The node decides (operators only, a card no job holds, one check at a time) and
    words any refusal; a check may take minutes where the node runs its own test."""
    desk.notify(f"Checking card {card}: the result comes here and in the detail pane.", title="Check")
    try:
        result: CardCheck = printable_view(await desk.session.node.check(card))
    except Exception as e:
        failed(desk, f"Card {card} was not checked", e)
        return
    title, said = check_words(result)
    desk.notify(said, title=title, severity="information" if result.passed else "warning", timeout=20)


def evict(desk: Desk) -> None:
    """The evict key: the selected card's squatters, listed by a dry run and asked about first."""
    if refused(desk, "evicting") or not_operator(desk, "evict processes") or desk.evict_asking:
        return
    now = desk.selection()
    card = now.triage_card()
    if card is None:
        desk.notify(BY_NAME["evict"].why_not(now), severity="warning")
        return
    desk.evict_asking = True  # the key is not offered again until the dry run has answered
    desk.start(_ask_then_evict(desk, card.index), group="action")


async def _ask_then_evict(desk: Desk, card: int) -> None:
    """A dry run first: the question lists exactly the pids the node would
    signal, and only those are signalled if the answer is yes; what is still
    running after the grace period is offered SIGKILL in a second question."""
    try:
        report: EvictReport = printable_view(await desk.session.node.evict(card, dry_run=True))
    except JobNotFound as e:  # nothing there may be evicted: the node says why for each
        failed(desk, f"Nothing to evict on card {card}", e)
        return
    except Exception as e:
        failed(desk, f"Could not evict from card {card}", e)
        return
    finally:
        desk.evict_asking = False
    card, grace_s = report.card, report.grace_s
    if not await desk.ask(ConfirmScreen(f"Evict from card {card}?", evict_question(report), yes="Send SIGTERM")):
        return
    survivors = await _evict(desk, card, report.processes, kill=False, grace_s=grace_s)
    if not survivors:
        return
    kill = kill_question(card, survivors, grace_s)
    if await desk.ask(ConfirmScreen(f"Kill what is left on card {card}?", kill, yes="Send SIGKILL")):
        await _evict(desk, card, survivors, kill=True, grace_s=grace_s)


async def _evict(desk: Desk, card: int, listed: Sequence[Evicted], *, kill: bool, grace_s: float) -> list[Evicted]:
    """Each listed pid by name, all at once (so the grace period is waited
    once): a pid that is no longer what was listed is refused by the node,
    not signalled. Returns those still running after the grace period."""
    desk.notify(evicting_words(card, listed, kill, grace_s), title="Evicting", timeout=grace_s + 5)
    node = desk.session.node
    answers = await asyncio.gather(
        *(node.evict(card, e.pid, kill=kill, started_at=e.started_at) for e in listed), return_exceptions=True
    )
    done: list[Evicted] = []
    for e, answer in zip(listed, answers):
        if isinstance(answer, EvictReport):
            done += printable_view(answer).processes
        elif isinstance(answer, BaseException):
            failed(desk, f"pid {e.pid} was not evicted", answer)
    if done:
        bad = any(e.outcome in NOT_GONE for e in done)
        desk.notify(
            fates(done),
            title=f"Evicted from card {card}" if not bad else f"Card {card}",
            severity="warning" if bad else "information",
            timeout=15,
        )
    return [e for e in done if e.outcome == "running"]
