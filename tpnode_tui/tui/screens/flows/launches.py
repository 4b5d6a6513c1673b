"""Launch and reserve: the form, the node's answer, the queue it offers, and what became of a launch queued here.

The queue and every launch under way are the node's, listed in each
snapshot; the dashboard remembers only which it asked for
(tui/follow/launches.py), to say what became of them.
"""

from __future__ import annotations

from dataclasses import replace

from tpnode_tui.model.errors import NoCapacity, TpnodeError
from tpnode_tui.model.jobs import Launched
from tpnode_tui.port.types.jobs import LaunchRequest, LaunchResult, new_run_id
from tpnode_tui.tui.follow.launches import LeftQueue, Refused, Started, left_queue_notice
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.launch import LaunchScreen
from tpnode_tui.tui.screens.dialogs.reserve import ReserveScreen
from tpnode_tui.tui.screens.flows.desk import Desk, failed, refused
from tpnode_tui.tui.wording.questions import capacity_line, free_profiles, queue_question, starts_when


def _capacity_line(desk: Desk) -> str:
    follower = desk.session.follower
    return capacity_line(follower.snapshot, follower.stale_error if follower.stale_since is not None else None)


def _total(desk: Desk) -> int:
    snap = desk.session.follower.snapshot
    return snap.occupancy.total if snap else 0


def launch(desk: Desk) -> None:
    """The launch key: the form, then the launch (one worker, from the form to the answer)."""
    if refused(desk, "launching"):
        return
    snap = desk.session.follower.snapshot
    form = LaunchScreen(
        total=_total(desk),
        docker=snap is not None and snap.runtime_kind == "docker",
        default_command=desk.session.default_command,
        run_id=new_run_id(),
        context=_capacity_line(desk),
        slices=free_profiles(snap),
    )
    desk.start(_ask_then_launch(desk, form), group="launch")


async def _ask_then_launch(desk: Desk, form: LaunchScreen) -> None:
    request = await desk.ask(form)
    if request is not None:
        await submit(desk, request)


async def submit(desk: Desk, request: LaunchRequest) -> None:
    """Launch; the node lists it (and it can be cancelled) while under way.
    With no room now, offer the queue."""
    assert request.run_id is not None
    session = desk.session
    result = await session.launches.ask(request.run_id, session.node.launch(request))
    if isinstance(result, Refused):
        failed(desk, "Launch refused", result.error)
    elif isinstance(result, NoCapacity):
        title, body = queue_question(result, request.run_id, request.cards, session.follower.snapshot, request.slice)
        if await desk.ask(ConfirmScreen(title, body, yes="Queue it")):
            await enqueue(desk, request)
    elif isinstance(result, LaunchResult) and result.launched is not None:
        report_launched(desk, result.launched, "Launched")


async def enqueue(desk: Desk, request: LaunchRequest) -> None:
    """Ask again, agreeing to wait in the node's queue: the node tries once
    more, and keeps it in line if there is still no room."""
    assert request.run_id is not None
    session = desk.session
    result = await session.launches.ask(request.run_id, session.node.launch(replace(request, queue=True)))
    if isinstance(result, Refused):
        failed(desk, "Launch refused", result.error)
    elif isinstance(result, LaunchResult) and result.queued is not None:
        session.launches.queued_here(result.queued.run_id, session.clock())
        kept = (
            "The node's agent keeps it, with or without this dashboard."
            if session.agent
            else "It lives in this dashboard: quitting asks first."
        )
        when = starts_when(session.follower.snapshot, request.cards, request.slice)
        desk.notify(
            f"{result.queued.run_id} is queued; it starts {when}, after the launches queued before it. {kept}",
            title="Queued",
        )
    elif isinstance(result, LaunchResult) and result.launched is not None:
        report_launched(desk, result.launched, "Launched")
    elif isinstance(result, NoCapacity):  # only from a node that keeps no queue
        failed(desk, "Launch refused", result)


def report_launched(desk: Desk, result: Launched, what: str) -> None:
    cards = result.holding
    run_id = result.job.run_id
    if desk.session.launches.went_ahead_anyway(run_id, result.existing):
        desk.notify(
            f"{run_id} was cancelled while its launch was under way, and it got {cards} "
            "anyway; stop it (s) if it is not wanted.",
            title="Cancelled too late",
            severity="warning",
            timeout=12,
        )
    elif result.existing:
        desk.notify(f"{run_id} already holds {cards}; nothing new was started.", title=what)
    else:
        desk.notify(f"{run_id} got {cards}.", title=what)
    if result.warning:
        desk.notify(result.warning, title="Unverified cards", severity="warning", timeout=12)


def reserve(desk: Desk) -> None:
    """The reserve key: a reservation is a launch too, listed by the node, and cancellable, while under way."""
    if refused(desk, "reserving"):
        return
    follower = desk.session.follower
    you = follower.you
    form = ReserveScreen(
        total=_total(desk),
        owner=you.user if you else "",
        operator=you is not None and you.operator,
        run_id=new_run_id("rsv"),
        context=_capacity_line(desk),
        slices=free_profiles(follower.snapshot),
    )
    desk.start(_ask_then_reserve(desk, form), group="launch")


async def _ask_then_reserve(desk: Desk, form: ReserveScreen) -> None:
    request = await desk.ask(form)
    if request is None:
        return
    assert request.run_id is not None
    session = desk.session
    result = await session.launches.ask(request.run_id, session.node.reserve(request))
    if isinstance(result, Refused):
        failed(desk, "Reservation refused", result.error)
    elif isinstance(result, NoCapacity):
        failed(desk, "Reservation refused", result)
    elif isinstance(result, Launched):
        report_launched(desk, result, f"Reserved for {result.job.owner or request.owner}")


def follow_queued(desk: Desk) -> None:
    """After each reading: say when a launch queued from here has left the queue,
    started (it shows as a job), or dropped or cancelled elsewhere (the node's log says why)."""
    follower = desk.session.follower
    if follower.snapshot is None:
        return
    for outcome in desk.session.launches.follow(follower.snapshot, follower.readings):
        if isinstance(outcome, Started):
            desk.notify(f"{outcome.run_id} got {outcome.holding}.", title="Queued launch started")
        else:
            desk.start(_left_queue(desk, outcome), group="queued")


async def _left_queue(desk: Desk, left: LeftQueue) -> None:
    session = desk.session
    try:
        entries, _everyone = await session.node.audit(max(60.0, session.clock() - left.queued_at + 60))
    except TpnodeError as e:
        desk.notify(
            f"{left.run_id} is no longer queued, and the node's log cannot be read to say why: {e}",
            title="Queued launch",
            severity="warning",
            timeout=12,
        )
        return
    notice = left_queue_notice(left.run_id, entries)
    desk.notify(notice.message, title=notice.title, severity=notice.severity, timeout=notice.timeout)
