"""Each card's last hour in fixed rings: bounded however long the service runs.

Driven with a made-up clock: an hour of polls takes seconds, not an hour.
"""

from __future__ import annotations

import tracemalloc

from tpnode_tui.model.facts import CardFacts
from tpnode_tui.triage.history import COARSE_STEP_S, FINE_S, HOUR_S, CardHistory, History

CARDS = 64
INTERVAL_S = 0.2
START = 1_000_000_000.0


def readings(step: int, cards: int = CARDS) -> list[tuple[int, CardFacts]]:
    """Every card at poll ``step``: utilisation climbing with time, memory by card."""
    return [
        (
            i,
            CardFacts(
                index=i,
                utilization_pct=step % 101,
                memory_used_mib=1000 + i,
                temperature_c=40 + i % 7,
                power_w=300.0 + i,
            ),
        )
        for i in range(cards)
    ]


def test_an_hour_of_64_cards_at_0_2_s_stays_within_the_rings():
    bound = CARDS * CardHistory(INTERVAL_S).nbytes  # every card's rings, allocated once
    polls_per_hour = int(HOUR_S / INTERVAL_S)
    tracemalloc.start()
    try:
        history = History(INTERVAL_S)
        history.record(START, readings(0))
        at_first_poll, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Allocated once, at the first poll: the rings and a little bookkeeping.
    assert history.nbytes() == bound and bound <= at_first_poll < bound + 256 * 1024
    for step in range(1, polls_per_hour):
        history.record(START + step * INTERVAL_S, readings(step))
    assert history.nbytes() == bound
    # An hour in, the rings are full: five more minutes of polls keep nothing new
    # (traced only now, since tracing every allocation of the hour is slow).
    tracemalloc.start()
    try:
        for step in range(polls_per_hour, polls_per_hour + int(FINE_S / INTERVAL_S)):
            history.record(START + step * INTERVAL_S, readings(step))
        added, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert added < 64 * 1024, added
    assert history.nbytes() == bound < 5 * 1024 * 1024


def test_the_last_five_minutes_at_full_resolution_and_ten_second_averages_before():
    history = History(INTERVAL_S)
    polls = int(HOUR_S / INTERVAL_S)
    for step in range(polls):
        history.record(START + step * INTERVAL_S, readings(step, cards=4))
    now = START + (polls - 1) * INTERVAL_S
    samples = history.samples(3, now)
    fine = [s for s in samples if s.seconds == 0]
    coarse = [s for s in samples if s.seconds == COARSE_STEP_S]
    assert len(fine) + len(coarse) == len(samples)
    assert fine[0].at >= now - FINE_S - INTERVAL_S and fine[-1].at == now
    assert all(b.at - a.at < INTERVAL_S * 1.01 for a, b in zip(fine, fine[1:]))
    assert coarse[0].at > now - HOUR_S and coarse[-1].at + COARSE_STEP_S <= fine[0].at
    assert all(b.at - a.at == COARSE_STEP_S for a, b in zip(coarse, coarse[1:]))
    first = coarse[0]
    steps = [s for s in range(polls) if first.at <= START + s * INTERVAL_S < first.at + COARSE_STEP_S]
    assert first.utilization_pct == sum(s % 101 for s in steps) / len(steps)
    assert (first.memory_used_mib, first.temperature_c, first.power_w) == (1003, 43, 303.0)


def test_an_unreadable_value_stays_unknown_and_older_than_an_hour_is_gone():
    history = History(1.0)
    history.record(START, [(0, CardFacts(index=0, utilization_pct=None, memory_used_mib=5))])
    history.record(START + 1, [(0, None)])  # the driver stopped reporting the card
    early = history.samples(0, START + 1)
    assert [(s.utilization_pct, s.memory_used_mib) for s in early] == [(None, 5), (None, None)]
    assert history.samples(0, START + HOUR_S + 2) == []
    assert history.samples(7, START) == []
