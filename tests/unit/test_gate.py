"""The door's counts of each account: connections open now, and new ones a second.

The door itself, against real accounts flooding a real agent, is in
tests/system/test_door_neighbours.py; here its arithmetic, on a clock of the
test's own.
"""

from __future__ import annotations

import logging

from tpnode_tui.agent.gate import REMEMBERED, Door
from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.host.identity import Operators


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def door(clock: Clock, *, most_open: int = 32, rate: int = 3) -> Door:
    limits = LimitSettings(connections_per_user=most_open, connection_rate_per_user=rate)
    return Door(lambda: None, Operators(), limits, clock=clock)


def test_new_connections_come_from_a_bucket_of_the_rate_filled_again_at_the_rate():
    clock = Clock()
    gate = door(clock, rate=3)
    bob = gate._account(60_001)
    assert [gate.why_not(bob) for _ in range(3)] == [None] * 3  # as many at once as a second's worth
    refused = gate.why_not(bob)
    assert refused == (
        f"{bob.user} opened 3 new connections to the agent within a second, the most one account may "
        "(TUNEPLANE_MAX_CONNECTION_RATE_PER_USER=3); wait a moment and ask again"
    )
    clock.now += 1 / 3  # a third of a second: room for one more
    assert gate.why_not(bob) is None and gate.why_not(bob) is not None
    clock.now += 60  # a long quiet: the bucket holds one second's worth, no more
    assert [gate.why_not(bob) for _ in range(4)][3] is not None


def test_connections_open_at_once_are_bounded_apart_from_the_rate():
    clock = Clock()
    gate = door(clock, most_open=2, rate=100)
    bob = gate._account(60_001)
    bob.open = 2
    assert gate.why_not(bob) == (
        f"{bob.user} has 2 connections open to the agent already, the most one account may "
        "(TUNEPLANE_MAX_CONNECTIONS_PER_USER=2); close some, or wait for them to end"
    )
    bob.open = 1
    assert gate.why_not(bob) is None


def test_accounts_with_nothing_open_and_a_full_bucket_are_forgotten_when_many():
    clock = Clock()
    gate = door(clock)
    for uid in range(60_000, 60_000 + REMEMBERED):
        gate.why_not(gate._account(uid))
    gate.accounts[60_000].open = 1  # one still has a connection open
    clock.now += 10
    gate._account(70_000)
    assert set(gate.accounts) == {60_000, 70_000}


def test_an_accounts_refusals_are_said_in_the_agents_log_at_most_once_a_minute(caplog):
    clock = Clock()
    gate = door(clock)
    bob = gate._account(60_001)
    with caplog.at_level(logging.WARNING, logger="tpnode_tui.agent.gate"):
        for _ in range(1000):
            gate._say(60_001, bob, "too many")
            clock.now += 0.125  # 1000 refusals in 125 s
    assert [r.getMessage() for r in caplog.records] == [
        "connections of uid 60001 refused since this was last said: 1; the latest: too many",
        "connections of uid 60001 refused since this was last said: 480; the latest: too many",
        "connections of uid 60001 refused since this was last said: 480; the latest: too many",
    ]
