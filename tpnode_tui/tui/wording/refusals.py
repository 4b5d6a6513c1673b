"""Why a key does nothing now, in one line: the node's own words where the node would refuse.

The footer leaves out the keys not offered now (tui/wording/keys.py), but a
key pressed anyway, on someone else's job or by an account that does not
operate the node, must not do nothing: it says why, as the node would have
said it (tpnode_tui/text/refusals.py, the words the node's rules use too),
or, where nothing is selected for it, what to select. The flows' own guards,
for a key whose situation changed under it, say the same.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView
from tpnode_tui.port.types.readings import You
from tpnode_tui.text.refusals import (
    ON_THE_NODE,
    check_holder,
    drained_already,
    held_for_check,
    no_shells,
    not_a_reservation,
    not_drained,
    not_extended,
    not_queued_by_them,
    not_theirs,
    nothing_to_evict,
    operators_only,
)
from tpnode_tui.tui.wording.jobs import LAUNCH_PREFIX


class Situation(Protocol):
    """What decides which actions are offered now, as the dashboard knows it."""

    @property
    def snapshot(self) -> Optional[NodeSnapshot]: ...

    @property
    def you(self) -> Optional[You]: ...

    @property
    def readonly(self) -> bool: ...

    @property
    def operator(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    @property
    def stale(self) -> bool: ...

    @property
    def has_demo(self) -> bool: ...

    @property
    def shells(self) -> bool: ...

    @property
    def log_shown(self) -> bool: ...

    @property
    def log_card(self) -> Optional[int]: ...

    @property
    def evict_asking(self) -> bool: ...

    @property
    def row(self) -> str: ...

    @property
    def jobs_focused(self) -> bool: ...

    def selected_card(self) -> Optional[CardView]: ...

    def triage_card(self) -> Optional[CardView]: ...

    def job_for_row(self) -> Optional[JobState]: ...

    def stop_target(self) -> Optional[JobState]: ...

    def extend_target(self) -> Optional[JobState]: ...

    def shell_target(self) -> Optional[JobState]: ...

    def selected_launch(self) -> Optional[QueuedLaunch]: ...

    def exited_jobs(self) -> list[JobState]: ...

    def mine(self, owner_uid: Optional[int], owner: str) -> bool: ...


def read_only(what: str) -> str:
    """``what``: the action refused ("stopping")."""
    return f"read-only dashboard: {what} is refused (started with --readonly)"


def _operators(now: Situation) -> str:
    return now.you.operators if now.you is not None else ""


def not_operator(now: Situation, what: str) -> str:
    """The node's refusal of an operator's action (``what``: "drain card 3") to whoever asks."""
    return operators_only(now.you.user if now.you is not None else "you", what, _operators(now))


def _unread(what: str) -> str:
    return f"Nothing can be {what} while the node cannot be read: what it holds now is unknown."


def nothing_to_stop(now: Situation) -> str:
    """Why s does nothing, worded by what is selected: a row of the jobs table
    while the table has the focus, else a card."""
    if now.stale:
        return _unread("stopped")
    if now.jobs_focused:
        row_job = now.job_for_row()
        if now.row.startswith(LAUNCH_PREFIX):
            return "The highlighted row is a launch not started yet, not a running job: c cancels it."
        if row_job is not None:
            return f"The highlighted row, {row_job.run_id}, has already ended: nothing to stop (r reclaims it)."
        return "The highlighted row is not a running job: nothing to stop."
    card = now.selected_card()
    if card is None:
        return "No card is selected: nothing to stop."
    return f"The selected card {card.index} holds no running job to stop."


def _stop(now: Situation) -> str:
    job = now.stop_target()
    if job is None:
        return nothing_to_stop(now)
    return not_theirs(job, "stop", _operators(now), job.gpus)


def _extend(now: Situation) -> str:
    job = now.stop_target()
    if now.stale:
        return _unread("extended")
    if job is None:
        return "Select a running reservation (on its card, or in the jobs table) to extend it."
    if now.extend_target() is None:
        return not_extended(job.key)
    return not_theirs(job, "extend", _operators(now), job.gpus)


def _shell(now: Situation) -> str:
    if not now.shells:
        return "The demo's node is pretend: it runs no shell." if now.has_demo else ON_THE_NODE
    snap = now.snapshot
    if snap is not None and snap.runtime_kind not in ("", "process"):
        return no_shells(snap.runtime_kind)
    if now.stale:
        return _unread("opened")
    job = now.stop_target()
    if job is None:
        return "Select a running reservation (on its card, or in the jobs table) to open a shell on its cards."
    if now.shell_target() is None:
        return not_a_reservation(job.key)
    return not_theirs(job, "open a shell on", _operators(now), job.cards)


def _reclaim(now: Situation) -> str:
    if now.stale:
        return _unread("reclaimed")
    ended = [j for j in (now.snapshot.jobs if now.snapshot is not None else ()) if not j.live]
    if not ended:
        return "Nothing to reclaim: no job has exited."
    return not_theirs(ended[0], "reclaim", _operators(now))


def _cancel(now: Situation) -> str:
    if now.stale:
        return _unread("cancelled")
    launch = now.selected_launch()
    if launch is None:
        return "Select a queued or waiting launch in the jobs table first."
    return not_queued_by_them(launch.run_id, launch.owner, _operators(now))


def _card_or(now: Situation, what: str) -> tuple[Optional[CardView], str]:
    """The card an operator's key acts on, or why there is none."""
    card = now.triage_card()
    if card is not None:
        return card, ""
    return None, _unread("done to a card") if now.stale else f"Select a card to {what}."


def _drain(now: Situation) -> str:
    card, why = _card_or(now, "drain it")
    if card is None or card.drain is None:
        return why
    return drained_already(card.index, card.drain.by, card.drain.reason)


def _undrain(now: Situation) -> str:
    card, why = _card_or(now, "undrain it")
    return why if card is None else not_drained(card.index)


def _check(now: Situation) -> str:
    card, why = _card_or(now, "check it")
    if card is None:
        return why
    holder = check_holder(card)
    return held_for_check(card.index, holder) if holder is not None else f"Card {card.index} can be checked now."


def _evict(now: Situation) -> str:
    card, why = _card_or(now, "evict from it")
    if card is None:
        return why
    if now.evict_asking:
        return f"The processes on card {card.index} are being listed: the question comes next."
    return nothing_to_evict(card.index, card.run_id or "")


def _log_card(now: Situation) -> str:
    if not now.log_shown:
        return "f keeps the node's log to one card: open the log first (e)."
    return "Select a card to keep the log to it."


def _demo(now: Situation) -> str:
    if not now.has_demo:
        return "b, x and X act on the demo's pretend node only (tpnode-tui --demo)."
    return "Select a card first."


#: why each action with a condition is not offered, by the action's name
WHY_NOT: dict[str, Callable[[Situation], str]] = {
    "extend": _extend,
    "stop": _stop,
    "shell": _shell,
    "reclaim": _reclaim,
    "cancel_launch": _cancel,
    "drain": _drain,
    "undrain": _undrain,
    "check": _check,
    "evict": _evict,
    "events_card": _log_card,
    "demo_blind": _demo,
    "demo_external": _demo,
    "demo_xid": _demo,
}


def operator_words(name: str, now: Situation) -> str:
    """What an operator's action is, for the node's refusal: "drain card 3"."""
    card = now.selected_card()
    on = f"card {card.index}" if card is not None else "a card"
    words = {"drain": f"drain {on}", "undrain": f"undrain {on}", "check": f"check {on}"}
    return (words | {"evict": f"evict processes from {on}"}).get(name, name)
