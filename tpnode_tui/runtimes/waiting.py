"""Processes waited for in the event loop, on a pidfd: no thread is kept per process.

A thread parked in ``wait()`` lasts as long as the process does, and some of
the processes a launcher starts are a caller's to stop or to keep running:
with a thread each, one account could use up the threads everyone's requests
share. A pidfd becomes readable when its process ends, so the loop waits on
it like on a socket, and collects the process then.

Never with a wait that blocks: a process that ended while traced (any
account may trace its own) is a zombie only its tracer may collect, for as
long as the tracer likes. Until it lets go the loop asks again, less and less
often, and nothing else waits.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Optional

#: how soon, then at most how often, an ended process a tracer holds is asked for again
_HELD_FIRST_S, _HELD_MOST_S = 0.1, 30.0


def collect(proc: subprocess.Popen[bytes]) -> None:
    """Collect ``proc`` when it ends, from this thread's event loop, so it never
    lingers as a zombie; nothing waits for it meanwhile."""
    _when_ended(proc, asyncio.get_running_loop())


def _when_ended(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A future done once ``proc`` has ended and been collected."""
    ended: asyncio.Future[None] = loop.create_future()
    fd = os.pidfd_open(proc.pid)

    def collected(again_s: float) -> None:
        if proc.poll() is None:  # ended, but held by its tracer: asked again later
            loop.call_later(again_s, collected, min(2 * again_s, _HELD_MOST_S))
        elif not ended.done():
            ended.set_result(None)

    def readable() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        collected(_HELD_FIRST_S)

    loop.add_reader(fd, readable)
    return ended


async def exit_status(proc: subprocess.Popen[bytes], timeout_s: float) -> Optional[int]:
    """``proc``'s exit status once it ends, or None after ``timeout_s``: it is then
    killed, and collected whenever it does end (a process in a hung file system
    cannot die until that returns)."""
    ended = _when_ended(proc, asyncio.get_running_loop())
    try:
        await asyncio.wait_for(asyncio.shield(ended), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        return None
    except BaseException:
        proc.kill()
        raise
    return proc.returncode
