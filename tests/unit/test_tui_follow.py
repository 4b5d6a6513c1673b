"""How the dashboard follows the node, decided without a screen.

The followers (tpnode_tui/tui/follow/) are plain objects over the Node
port: these tests give them a node that hands out prepared readings and log
entries, fails when told to, and counts its open streams, and a sleep that
records each wait instead of waiting, so the back-off is read off exactly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Callable, Optional, Union

import pytest

from helpers.fleet import T, job, node_snapshot
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.node.follow import RECONNECT_FIRST_S, RECONNECT_MOST_S, Backoff
from tpnode_tui.port.types.readings import NodeView, Reading, You
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.tui.follow.log import EVENTS_KEPT, LogFollower
from tpnode_tui.tui.follow.readings import NodeFollower

ANA = You(user="ana", uid=1001, operator=True, cards_held=0, card_limit=None)
GONE = "no agent answers at /run/tpnode-tui/agent.sock (it went away mid-stream)"

#: one follow of the node: the readings it hands out, then how it ends (None: the stream ends)
Script = tuple[list[Reading], Optional[BaseException]]


class Enough(Exception):
    """Ends a test's follow from inside its wait."""


class ScriptedNode:
    """A node whose every ``views()`` (and ``follow_events()``) plays the next script."""

    in_process = False
    outlives_client = True
    where = "agent at /run/tpnode-tui/agent.sock"

    def __init__(self, *scripts: Script, log: tuple[tuple[list[dict[str, Any]], Optional[BaseException]], ...] = ()):
        self.scripts = list(scripts)
        self.logs = list(log)
        self.open = 0
        self.most_open = 0
        self.hold: Optional[asyncio.Event] = None

    async def views(self) -> AsyncIterator[NodeView]:
        readings, end = self.scripts.pop(0) if self.scripts else ([], AgentUnavailable(GONE))
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            for reading in readings:
                yield NodeView(reading, ANA)
            if self.hold is not None:
                await self.hold.wait()
            if end is not None:
                raise end
        finally:
            await asyncio.sleep(0.01)  # a stream takes a moment to close
            self.open -= 1

    async def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        entries, end = self.logs.pop(0) if self.logs else ([], AgentUnavailable(GONE))
        if opened is not None:
            opened()
        for entry in entries:
            yield entry
        if end is not None:
            raise end


class Waits:
    """A sleep that records how long it was asked to wait, and ends the follow after ``most`` waits."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        if len(self.asked) >= self.most:
            raise Enough()


def good(snap: NodeSnapshot, seq: int = 1) -> Reading:
    return Reading(seq=seq, snapshot=snap)


def follower(node: ScriptedNode, waits: Waits, now: float = T, **kwargs: Any) -> NodeFollower:
    return NodeFollower(node, clock=lambda: now, sleep=waits, **kwargs)


def follow_until_enough(f: Union[NodeFollower, LogFollower], *args: Any) -> None:
    async def run() -> None:
        with pytest.raises(Enough):
            await f.follow(*args)

    asyncio.run(run())


# -- readings ----------------------------------------------------------------------


def test_each_reading_is_taken_escaped_and_the_first_snapshot_is_said_to_be_first():
    nasty = node_snapshot(4, jobs=(job("j1", (0,), owner="eve\x1b[2J"),))
    node = ScriptedNode(([good(nasty), good(nasty, 2)], None))
    firsts: list[bool] = []
    f = follower(node, Waits(1), on_reading=firsts.append)
    follow_until_enough(f)
    assert firsts == [True, False]
    assert f.readings == 2 and f.you == ANA
    assert f.snapshot is not None and f.snapshot.jobs[0].owner == "eve\\x1b[2J", "a reading reached the screen raw"


def test_a_node_that_has_not_read_yet_changes_nothing_shown():
    snap = node_snapshot(4)
    started = Reading(seq=1, snapshot=None)  # an agent just (re)started
    node = ScriptedNode(([good(snap)], AgentUnavailable(GONE)), ([started], None))
    calls: list[bool] = []
    f = follower(node, Waits(2), on_reading=calls.append)
    follow_until_enough(f)
    assert calls == [True], "a reading with nothing in it was taken"
    assert f.readings == 1 and f.snapshot is not None
    assert f.stale_since == T, "the node is still gone: it has not read since"


def test_a_failed_poll_keeps_the_last_picture_marked_stale_until_a_poll_succeeds():
    snap = node_snapshot(4)
    failed = Reading(seq=2, snapshot=snap, error="cannot read the state file", stale_since=T - 3)
    node = ScriptedNode(([good(snap), failed, good(snap, 3)], None))
    seen: list[tuple[Optional[float], str, Optional[str], Optional[str]]] = []
    f = follower(node, Waits(1))
    f.on_reading = lambda first: seen.append((f.stale_since, f.stale_error, f.why_stale, f.not_answering("launching")))
    follow_until_enough(f)
    assert seen[0] == (None, "", None, None)
    # the node answers, about a failed poll: it may still be asked
    assert seen[1] == (T - 3, "cannot read the state file", "the last poll failed: cannot read the state file", None)
    assert seen[2] == seen[0], "still stale once a poll succeeded"
    assert f.snapshot is not None and f.readings == 3


def test_an_agent_that_goes_away_is_stale_since_then_and_refuses_every_action_with_why():
    snap = node_snapshot(4)
    node = ScriptedNode(([good(snap)], AgentUnavailable(GONE)))
    lost: list[Optional[float]] = []
    f = follower(node, Waits(1), now=T + 7)
    f.on_lost = lambda: lost.append(f.stale_since)
    follow_until_enough(f)
    assert lost == [T + 7]
    assert f.gone_agent and f.stale_error == GONE and f.why_stale == GONE
    assert f.snapshot is not None, "the last picture stays, marked stale"
    said = f.not_answering("launching")
    assert said is not None and said.startswith("the node's agent is not answering since ")
    assert f"so launching cannot be asked for ({GONE}); the dashboard reconnects by itself." in said


def test_gone_is_since_the_first_loss_and_ends_with_the_next_reading():
    snap = node_snapshot(4)
    clock = [T]
    node = ScriptedNode(
        ([good(snap)], AgentUnavailable(GONE)), ([], AgentUnavailable("still gone")), ([good(snap, 3)], None)
    )
    states: list[tuple[Optional[float], str]] = []
    waits = Waits(3)
    f = NodeFollower(node, clock=lambda: clock[0], sleep=waits)

    def lost() -> None:
        states.append((f.stale_since, f.stale_error))
        clock[0] += 10

    f.on_lost = lost
    follow_until_enough(f)
    assert states[:2] == [(T, GONE), (T, "still gone")], "since the first loss, with the latest reason"
    assert f.gone_since is not None, "the third follow's stream ended: gone again"
    assert states[2] == (T + 20, "the node's readings ended")


def test_the_wait_before_following_again_doubles_up_to_the_most_and_starts_over_after_a_reading():
    snap = node_snapshot(2)
    failing = ([], AgentUnavailable(GONE))
    node = ScriptedNode(failing, failing, failing, failing, ([good(snap)], AgentUnavailable(GONE)), failing)
    waits = Waits(6)
    follow_until_enough(follower(node, waits))
    first, most = RECONNECT_FIRST_S, RECONNECT_MOST_S
    assert waits.asked == [first, 2 * first, 4 * first, most, first, 2 * first]


def test_a_reconnect_wait_of_its_own_is_kept_to():
    node = ScriptedNode()
    waits = Waits(3)
    follow_until_enough(follower(node, waits, reconnect_s=(0.2, 0.3)))
    assert waits.asked == [0.2, 0.3, 0.3]


def test_a_failure_that_is_not_the_node_s_own_is_logged_and_the_node_followed_again(caplog):
    node = ScriptedNode(([], RuntimeError("a bug in decoding")), ([good(node_snapshot(2))], None))
    f = follower(node, Waits(2))
    with caplog.at_level(logging.WARNING, logger="tpnode_tui.tui.follow"):
        follow_until_enough(f)
    assert "the node's readings failed" in caplog.text
    assert f.readings == 1


def test_the_next_follow_begins_only_when_the_last_has_ended():
    """Resumed right after a pause: the paused follow is still closing its stream."""
    snap = node_snapshot(2)
    node = ScriptedNode(([good(snap)], None), ([good(snap, 2)], None))
    node.hold = asyncio.Event()
    f = follower(node, Waits(99))

    async def pause_and_resume() -> None:
        first = asyncio.create_task(f.follow())
        while f.readings < 1:
            await asyncio.sleep(0)
        first.cancel()  # paused: its stream is still open, and takes a moment to close
        second = asyncio.create_task(f.follow())  # resumed at once
        while f.readings < 2:
            await asyncio.sleep(0.001)
        second.cancel()
        await asyncio.gather(first, second, return_exceptions=True)

    asyncio.run(pause_and_resume())
    assert node.most_open == 1, "two follows read the node at once"
    assert node.open == 0


def test_backoff_on_its_own():
    backoff = Backoff(1.0, 3.0)
    waits = Waits(99)
    for _ in range(4):
        asyncio.run(backoff.wait(waits))
    backoff.reset()
    asyncio.run(backoff.wait(waits))
    assert waits.asked == [1.0, 2.0, 3.0, 3.0, 1.0]


# -- the node's log -------------------------------------------------------------------


def entry(n: int, message: str = "") -> dict[str, Any]:
    return {"time": T + n, "kind": "drain", "cards": [3], "message": message or f"entry {n}"}


def test_the_log_is_kept_newest_first_escaped_and_bounded():
    burst = [entry(n) for n in range(EVENTS_KEPT + 5)] + [entry(999, "\x1b]0;owned\x07 [/]")]
    node = ScriptedNode(log=((burst, None),))
    changes: list[bool] = []
    log = LogFollower(node, changed=changes.append, sleep=Waits(1))
    log.open(3)
    follow_until_enough(log, 3)
    assert len(log.entries) == EVENTS_KEPT
    assert log.entries[0]["message"] == "\\x1b]0;owned\\x07 [/]", "raw, or not newest first"
    assert log.entries[-1]["message"] == f"entry {len(burst) - EVENTS_KEPT}", "not the newest kept"
    assert log.problem == "the node stopped sending it"
    assert changes[-1] is False and all(changes[:-1]), "entries arriving are a burst; the end is drawn at once"


def test_following_the_log_again_reads_the_hour_afresh_and_doubles_nothing():
    hour = [entry(1), entry(2)]
    node = ScriptedNode(log=((hour, AgentUnavailable(GONE)), (hour, None)))
    log = LogFollower(node, sleep=Waits(2))
    problems: list[Optional[str]] = []
    log.changed = lambda burst: problems.append(log.problem) if not burst else None
    log.open(None)
    follow_until_enough(log, None)
    assert problems == [GONE, "the node stopped sending it"]
    assert [e["message"] for e in log.entries] == ["entry 2", "entry 1"], "an entry doubled by the reconnect"


def test_every_change_to_the_log_moves_its_version_and_closing_keeps_nothing():
    log = LogFollower(ScriptedNode())
    versions = [log.version]
    log.open(None)
    versions.append(log.version)
    log.entries.appendleft(entry(1))
    log.close()
    versions.append(log.version)
    assert versions == sorted(set(versions)), "a change that leaves the version where it was"
    assert not log.shown and log.card is None and not log.entries and log.problem is None
