"""Waiting for what a test expects: ask again and again until it is so, or fail saying what never came.

One loop in three flavours, for where the test waits:

    until(predicate, what)                   plain code (or a thread): sleeps between asks
    await until_async(predicate, what)       in the event loop; ``predicate`` may return an awaitable
    await until_pilot(pilot, condition, what)  a Textual app under its pilot: pauses the pilot, so
                                             the app goes on running and drawing meanwhile

Each returns the first true answer, so a test can wait for a thing and use it
(``[job] = until(ended, "the job ending")``). Past ``timeout`` each raises
AssertionError, naming ``what`` and, where given, what ``show()`` says of the
state things were left in (the pilot's names what the dashboard told the
operator, when the app keeps it). Every wait is a bound, never a speed the test
asserts: a machine shared by many is slow at times, so the bound is generous.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, Optional

#: how long any wait may take by default (seconds)
WAIT_S = 60.0


def _timed_out(what: str, timeout: float, show: Optional[Callable[[], object]]) -> str:
    message = f"timed out after {timeout:g}s waiting for {what}"
    return f"{message}; {show()}" if show is not None else message


def until(
    predicate: Callable[[], Any],
    what: str,
    timeout: float = WAIT_S,
    *,
    every: float = 0.05,
    show: Optional[Callable[[], object]] = None,
    error: type[Exception] = AssertionError,
) -> Any:
    """``predicate()`` until it answers something true; that answer. ``error``:
    what to raise at the bound (a service starter raises TimeoutError, which its
    fixture turns into a skip, or under CI a failure)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise error(_timed_out(what, timeout, show))
        time.sleep(every)


async def until_async(
    predicate: Callable[[], Any],
    what: str,
    timeout: float = WAIT_S,
    *,
    every: float = 0.02,
    show: Optional[Callable[[], object]] = None,
) -> Any:
    """``until`` in the event loop: sleeps without blocking it, and awaits what
    ``predicate()`` returns when that is awaitable (a status read from a client)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return answer
        assert time.monotonic() < deadline, _timed_out(what, timeout, show)
        await asyncio.sleep(every)


async def until_pilot(
    pilot: Any, condition: Callable[[], Any], what: str, timeout: float = WAIT_S, *, every: float = 0.05
) -> Any:
    """``until`` for an app under its pilot: between asks the pilot pauses, so the
    app handles its messages and draws; the failure says what the app told the
    operator when it keeps that (helpers.dashboard.Dashboard's ``said``)."""
    said = getattr(pilot.app, "said", None)
    show = (lambda: f"the dashboard said {said}") if said is not None else None
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        assert time.monotonic() < deadline, _timed_out(what, timeout, show)
        await pilot.pause(every)
