"""What the dashboard says became of the launches it asked for, decided without a screen.

The launch tracker (tpnode_tui/tui/follow/launches.py) is a plain object: these
tests hand it the node's answers and snapshots (made by the real occupancy
rules, tests/helpers/fleet.py) and read what it decides: what to offer, what
to say, and what to leave unsaid.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Awaitable, TypeVar

from helpers.fleet import T, job, node_snapshot
from tpnode_tui.model.errors import NoCapacity, NotAllowed
from tpnode_tui.model.jobs import QueuedLaunch
from tpnode_tui.port.types.refusals import Cancelled
from tpnode_tui.tui.follow.launches import (
    LEFT_QUEUE_READINGS,
    LaunchTracker,
    LeftQueue,
    Notice,
    Refused,
    Started,
    left_queue_notice,
)

Answer = TypeVar("Answer")


def run(awaitable: Awaitable[Answer]) -> Answer:
    async def wait() -> Answer:
        return await awaitable

    return asyncio.run(wait())


async def answer(value: Answer) -> Answer:
    return value


async def raises(error: BaseException) -> None:
    raise error


def launch(run_id: str, state: str = "queued") -> QueuedLaunch:
    return QueuedLaunch(run_id=run_id, cards=1, owner="ana", queued_at=T - 5, state=state)


def queue_of(*launches: QueuedLaunch, jobs=()):
    return replace(node_snapshot(4, jobs=tuple(jobs)), queue=launches)


# -- asking ---------------------------------------------------------------------------


def test_an_answer_is_handed_back_and_the_launch_is_no_longer_awaited():
    tracker = LaunchTracker()
    seen_while_asked: list[set[str]] = []

    async def node_answers() -> str:
        seen_while_asked.append(set(tracker.asked))
        return "placed"

    assert run(tracker.ask("run-1", node_answers())) == "placed"
    assert seen_while_asked == [{"run-1"}], "asked for while the node answers"
    assert tracker.asked == set()


def test_no_capacity_is_handed_back_to_be_offered_the_queue():
    tracker = LaunchTracker()
    full = NoCapacity("no capacity now: need 1 card, 0 free")
    assert run(tracker.ask("run-1", raises(full))) is full


def test_a_refusal_or_a_failure_is_to_be_said():
    tracker = LaunchTracker()
    refused = NotAllowed("bob may not launch: over the card limit")
    outcome = run(tracker.ask("run-1", raises(refused)))
    assert isinstance(outcome, Refused) and outcome.error is refused
    broken = RuntimeError("the agent's answer could not be read")
    outcome = run(tracker.ask("run-2", raises(broken)))
    assert isinstance(outcome, Refused) and outcome.error is broken


def test_a_launch_cancelled_from_here_is_not_said_again_as_refused():
    tracker = LaunchTracker()

    async def cancelled_meanwhile() -> None:
        tracker.cancelling("run-1")  # the cancel says so itself
        raise Cancelled("run-1 was cancelled")

    assert run(tracker.ask("run-1", cancelled_meanwhile())) is None
    # cancelled by someone else: this dashboard has said nothing yet, so it is said
    outcome = run(tracker.ask("run-1", raises(Cancelled("run-1 was cancelled by ana"))))
    assert isinstance(outcome, Refused), "the cancel from here was remembered past its launch"


def test_a_cancel_that_came_too_late_is_said_once_when_the_launch_gets_its_cards():
    tracker = LaunchTracker()
    tracker.cancelling("run-1")
    tracker.not_cancelled("run-1", too_late=True)  # it held the lock already
    assert tracker.went_ahead_anyway("run-1", existing=False)
    assert not tracker.went_ahead_anyway("run-1", existing=False), "said twice"
    assert not LaunchTracker().went_ahead_anyway("run-2", existing=False), "never cancelled"


def test_a_cancel_too_late_for_a_launch_that_then_finds_no_room_offers_no_queue():
    tracker = LaunchTracker()
    tracker.not_cancelled("run-1", too_late=True)
    assert run(tracker.ask("run-1", raises(NoCapacity("no capacity now")))) is None, "offered the queue"
    full = NoCapacity("no capacity now")
    assert run(tracker.ask("run-1", raises(full))) is full, "the next launch of that run id is offered it"


def test_a_cancel_refused_in_time_leaves_the_launch_s_own_answer_to_be_said():
    tracker = LaunchTracker()
    tracker.cancelling("run-1")
    tracker.not_cancelled("run-1")  # not found, or not allowed: the launch goes on
    assert isinstance(run(tracker.ask("run-1", raises(Cancelled("cancelled by ana")))), Refused)


# -- leaving the queue ----------------------------------------------------------------------


def test_a_queued_launch_that_shows_as_a_job_has_started_and_is_said_once():
    tracker = LaunchTracker()
    tracker.queued_here("run-1", T)
    assert tracker.follow(queue_of(launch("run-1")), readings=1) == []
    placed = queue_of(jobs=[job("run-1", (2, 3))])
    assert tracker.follow(placed, readings=2) == [Started("run-1", "cards 2,3")]
    assert tracker.follow(placed, readings=3) == [], "said twice"
    assert tracker.queued == {}


def test_a_launch_gone_from_the_queue_with_no_job_is_left_to_the_node_s_log_after_a_few_readings():
    tracker = LaunchTracker()
    tracker.queued_here("run-1", T - 30)
    gone = queue_of()
    for n in range(1, LEFT_QUEUE_READINGS + 1):
        assert tracker.follow(gone, readings=n) == [], f"reading {n}: a job may still show"
    assert tracker.follow(gone, readings=LEFT_QUEUE_READINGS + 1) == [LeftQueue("run-1", T - 30)]
    assert tracker.follow(gone, readings=LEFT_QUEUE_READINGS + 9) == []


def test_a_launch_listed_again_by_a_late_reading_is_counted_from_when_it_leaves_again():
    tracker = LaunchTracker()
    tracker.queued_here("run-1", T)
    tracker.follow(queue_of(), readings=1)
    tracker.follow(queue_of(launch("run-1")), readings=2)  # a reading begun earlier came late
    tracker.follow(queue_of(), readings=3)
    assert tracker.follow(queue_of(), readings=2 + LEFT_QUEUE_READINGS) == []
    assert tracker.follow(queue_of(), readings=3 + LEFT_QUEUE_READINGS) == [LeftQueue("run-1", T)]


def test_a_launch_someone_else_queued_is_none_of_this_dashboard_s_business():
    tracker = LaunchTracker()
    tracker.follow(queue_of(launch("theirs")), readings=1)
    assert tracker.follow(queue_of(jobs=[job("theirs", (0,))]), readings=9) == []


def test_a_launch_cancelled_from_here_is_not_reported_as_leaving_the_queue():
    tracker = LaunchTracker()
    tracker.queued_here("run-1", T)
    tracker.cancelling("run-1")
    tracker.cancelled("run-1")
    assert tracker.follow(queue_of(), readings=1 + 2 * LEFT_QUEUE_READINGS) == []
    assert tracker.queued == {}


def test_the_node_s_log_says_what_became_of_a_launch_that_left_the_queue():
    def entry(**fields):
        return {"time": T, "kind": "action", "target": "run-1", **fields}

    dropped = entry(action="launch", result="dropped", message="queued launch run-1 left the queue: gone")
    assert left_queue_notice("run-1", [dropped]) == Notice(
        "queued launch run-1 left the queue: gone", "Queued launch dropped", "error", 12
    )
    started = entry(action="launch", result="ok", message="queued launch: run-1 got card 2")
    assert left_queue_notice("run-1", [dropped, started]) == Notice("run-1 got card 2", "Queued launch started")
    cancelled = entry(action="cancel", result="ok", message="ana cancelled run-1")
    assert left_queue_notice("run-1", [cancelled]) == Notice(
        "ana cancelled run-1", "Queued launch cancelled", "warning", 12
    )
    other = {**started, "target": "run-2"}
    assert left_queue_notice("run-1", [other]) == Notice("run-1 is no longer queued.", "Queued launch")


# -- quitting -----------------------------------------------------------------------------


def test_in_process_quitting_drops_every_launch_not_started_and_those_still_being_asked_for():
    tracker = LaunchTracker()
    tracker.asked.add("asked-not-listed-yet")
    queue = (launch("queued-by-bob"), launch("waiting", state="waiting"))
    assert tracker.dropped_on_quit(queue, agent=False) == [
        ("queued-by-bob", "queued"),
        ("waiting", "waiting"),
        ("asked-not-listed-yet", ""),
    ]


def test_through_the_agent_quitting_drops_only_this_dashboard_s_launch_waiting_for_the_lock():
    tracker = LaunchTracker()
    tracker.asked |= {"mine-waiting", "mine-placing"}
    queue = (
        launch("queued-by-bob"),
        launch("mine-waiting", state="waiting"),
        launch("mine-placing", state="placing"),
        launch("theirs-waiting", state="waiting"),
    )
    assert tracker.dropped_on_quit(queue, agent=True) == [("mine-waiting", "waiting")]
    assert LaunchTracker().dropped_on_quit(queue, agent=True) == []
