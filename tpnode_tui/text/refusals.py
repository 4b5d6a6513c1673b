"""The node's refusals, worded once: the rules that refuse say them, and the
dashboard says the same words for a key it does not offer, so a key pressed
on someone else's job is told what the node would have told it.

``operators`` is who operates the node, as the node names them ("root, group
tpnode-operators"); the dashboard has it from the node (``You.operators``),
and leaves it out where an older node did not say.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import CardView
from tpnode_tui.model.words import cards_words


def who_may(owner: str, action: str, operators: str) -> str:
    """ "only alice or an operator may stop it; the operators here: root, group tpnode-operators"."""
    who = f"only {owner} or an operator" if owner else "only an operator"
    here = f"; the operators here: {operators}" if operators else ""
    return f"{who} may {action} it{here}"


def not_theirs(job: JobState, action: str, operators: str, cards: Sequence[int] = ()) -> str:
    """Why ``action`` (stop, extend, reclaim, "open a shell on") on someone else's
    ``job`` is refused; ``cards``: the cards it holds, every one named."""
    owner = job.owner
    if cards:
        verb = "is" if len(set(cards)) == 1 else "are"
        held = f"{cards_words(cards)} {verb} held by {job.key}" + (f" of {owner}" if owner else "")
    elif job.gpus:
        held = f"{job.key} ({cards_words(job.gpus)})" + (f" belongs to {owner}" if owner else " has no recorded owner")
    else:
        held = f"{job.key}" + (f" belongs to {owner}" if owner else " has no recorded owner")
    return f"{held}; {who_may(owner, action, operators)}"


def not_queued_by_them(run_id: str, owner: str, operators: str) -> str:
    """Why cancelling someone else's launch not started yet is refused."""
    return f"{run_id} was queued by {owner or 'an unknown account'}; {who_may(owner, 'cancel', operators)}"


def operators_only(user: str, what: str, operators: str) -> str:
    """Why ``what`` ("drain card 3") is refused to ``user``, who does not operate the node."""
    who = f"an operator ({operators})" if operators else "an operator"
    return f"{user} may not {what}: only {who} may"


#: why a shell is refused through --host: the node would fence the SSH bridge, not your shell
ON_THE_NODE = (
    "a shell runs in the process that asks for it, and through --host that is the SSH bridge, not "
    "your shell: log in to the node (ssh) and run tpnode-tui shell there"
)


def not_a_reservation(name: str) -> str:
    """Why a shell is refused on a job: a job's cards are its command's."""
    return (
        f"{name!r} is a job, not a reservation: a shell runs on a reservation's cards; "
        "reserve cards, or launch the command as a job"
    )


def not_extended(run_id: str) -> str:
    """Why a job is not extended: it ends when its command does."""
    return f"{run_id} is a job, not a reservation: it ends when its command does"


def no_shells(runtime: str) -> str:
    """Why a node whose runtime keeps reservations in containers opens no shell on them."""
    return (
        f"this node's {runtime} runtime holds reservations in containers, and runs no shell on their "
        "cards; use TUNEPLANE_RUNTIME=process, or launch the work as a job"
    )


def drained_already(card: int, by: str, reason: str) -> str:
    return f"card {card} is drained already, by {by}: {reason}"


def check_holder(view: CardView) -> Optional[str]:
    """Who holds the card, or any slice of it ("train of alice"): a check does not disturb them."""
    jobs = [view.job] if view.job is not None else [s.job for s in view.slices if s.job is not None]
    if not jobs:
        return None
    job = jobs[0]
    return f"{job.key} of {job.owner}" if job.owner else job.key


def held_for_check(card: int, holder: str) -> str:
    """Why a card a job holds is not checked (``holder``: "train of alice")."""
    return (
        f"card {card} is held by {holder}: a check would disturb it, and its processes would fail it; "
        "check the card once the job has ended"
    )


#: every reason undrain refuses (service/operators.py), as the help and the question say it
UNDRAIN_REFUSES = (
    "The node refuses while the card still reports a problem or its driver does not report it, and, for a "
    "card drained until the node reboots, before the node has rebooted and a check of the card has passed "
    "since; it names which"
)


def not_drained(card: int) -> str:
    return f"card {card} is not drained"


def nothing_to_evict(card: int, run_id: str = "") -> str:
    """Why nothing on ``card`` is evicted (held by ``run_id``, where one holds it)."""
    held = f" (it is held by {run_id})" if run_id else ""
    return f"card {card} has no process from outside the platform or of someone else to evict{held}"
