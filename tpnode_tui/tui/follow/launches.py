"""The launches this dashboard asked for, and what became of them.

The queue and every launch under way are the node's, listed in each
snapshot whoever asked for them, so the dashboard keeps no queue of its own.
It remembers only which launches it asked for, to say what became of them:
one it queued that leaves the queue is reported as started when its job
shows, else in the words of the node's log (dropped, or cancelled
elsewhere); one it cancelled is not reported again as refused; one whose
cancel came too late is reported as having gone ahead anyway, and is not
offered the queue. A plain object, so all of that is decided without a
screen (tests/unit/test_tui_launches.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Iterable, Literal, Mapping, Optional, Sequence, TypeVar, Union

from tpnode_tui.model.errors import NoCapacity
from tpnode_tui.model.jobs import QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.types.refusals import Cancelled
from tpnode_tui.tui.wording.jobs import WAITING

#: readings to wait for a launch that left the queue to show as a job, before
#: asking the node's log what became of it (a reading begun before it was placed
#: may come after it left the queue)
LEFT_QUEUE_READINGS = 3

Answer = TypeVar("Answer")


@dataclass(frozen=True)
class Refused:
    """The node refused a launch or reservation, or asking failed: to be said, in the node's words."""

    error: BaseException


@dataclass(frozen=True)
class Started:
    """A launch queued from here shows as a job: it left the queue for its cards."""

    run_id: str
    #: what it got, in a few words: "cards 0,1", "slice 1g.18gb of card 1"
    holding: str


@dataclass(frozen=True)
class LeftQueue:
    """A launch queued from here left the queue and shows as no job: the node's log says why."""

    run_id: str
    queued_at: float


@dataclass(frozen=True)
class Notice:
    """What to tell the person at the dashboard."""

    message: str
    title: str
    severity: Literal["information", "warning", "error"] = "information"
    timeout: Optional[float] = None


class LaunchTracker:
    """Which launches and reservations this dashboard asked for, and where each stands."""

    def __init__(self) -> None:
        #: launches and reservations this dashboard asked for and awaits the answer to
        self.asked: set[str] = set()
        #: launches this dashboard queued: run id -> when, said once they leave the queue
        self.queued: dict[str, float] = {}
        #: of those, the ones gone from the queue: run id -> readings seen by then
        self._leaving: dict[str, int] = {}
        #: launches cancelled from here: the cancel said so, not their refusal
        self._cancelled: set[str] = set()
        #: launches whose cancel came too late: their outcome says they went ahead
        self._too_late: set[str] = set()

    async def ask(self, run_id: str, call: Awaitable[Answer]) -> Union[Answer, NoCapacity, Refused, None]:
        """Await a launch or reservation this dashboard asked for: its answer;
        NoCapacity, which may be offered the queue; Refused, to be said; or
        None when there is nothing more to say (a cancel from here said it)."""
        self.asked.add(run_id)
        try:
            return await call
        except NoCapacity as e:
            if run_id in self._too_late:  # cancelled: not to be offered a queue
                self._too_late.discard(run_id)
                return None
            return e
        except Cancelled as e:
            return None if run_id in self._cancelled else Refused(e)
        except Exception as e:
            self._too_late.discard(run_id)
            return Refused(e)
        finally:
            self.asked.discard(run_id)
            self._cancelled.discard(run_id)

    def queued_here(self, run_id: str, at: float) -> None:
        """The node keeps ``run_id`` in its queue, as asked from here at ``at``."""
        self.queued[run_id] = at

    def went_ahead_anyway(self, run_id: str, existing: bool) -> bool:
        """Whether a launch that got its cards had been cancelled from here too
        late: it was placed all the same, and is to be said so (once)."""
        if run_id in self._too_late and not existing:
            self._too_late.discard(run_id)
            return True
        return False

    # -- cancelling from here ---------------------------------------------------------

    def cancelling(self, run_id: str) -> None:
        """A cancel is on its way: the launch's own answer need not say so again."""
        self._cancelled.add(run_id)

    def not_cancelled(self, run_id: str, *, too_late: bool = False) -> None:
        """The cancel was refused; ``too_late``: the launch holds the lock already, and goes ahead."""
        self._cancelled.discard(run_id)
        if too_late:
            self._too_late.add(run_id)

    def cancelled(self, run_id: str) -> None:
        """The node dropped it: nothing more is to be said of it when it leaves the queue."""
        self._forget_queued(run_id)
        if run_id not in self.asked:  # a launch still being asked for hears of it through ask()
            self._cancelled.discard(run_id)

    # -- what became of launches queued from here ------------------------------------------

    def follow(self, snapshot: NodeSnapshot, readings: int) -> list[Union[Started, LeftQueue]]:
        """What a reading says of the launches queued from here: each that shows
        as a job has started; one gone from the queue with no job to show for
        it after LEFT_QUEUE_READINGS readings has left it otherwise, and the
        node's log is to say how (:func:`left_queue_notice`). ``readings``:
        how many readings the dashboard has taken, this one included."""
        queued = {q.run_id for q in snapshot.queue}
        for run_id in self.queued:
            if run_id not in queued and run_id not in self._leaving:
                self._leaving[run_id] = readings
        outcomes: list[Union[Started, LeftQueue]] = []
        for run_id, since in list(self._leaving.items()):
            if run_id in queued:  # listed again (a reading begun earlier came late)
                del self._leaving[run_id]
                continue
            job = next((j for j in snapshot.jobs if j.key == run_id and j.live), None)
            if job is not None:
                self._forget_queued(run_id)
                outcomes.append(Started(run_id, job.holding))
            elif readings - since >= LEFT_QUEUE_READINGS:
                queued_at = self.queued[run_id]
                self._forget_queued(run_id)
                outcomes.append(LeftQueue(run_id, queued_at))
        return outcomes

    def _forget_queued(self, run_id: str) -> None:
        self.queued.pop(run_id, None)
        self._leaving.pop(run_id, None)

    def dropped_on_quit(self, queue: Sequence[QueuedLaunch], *, agent: bool) -> list[tuple[str, str]]:
        """(run id, state) of the launches that quitting would drop.

        In-process the node lives in this dashboard: its queue and every launch
        under way end with it. Through the agent the queue stays with the agent
        and a launch being placed is finished there; only a launch of this
        dashboard still waiting for the lock ends with the asker."""
        if agent:
            return [(q.run_id, q.state) for q in queue if q.run_id in self.asked and q.state == WAITING]
        listed = [(q.run_id, q.state) for q in queue]
        shown = {run_id for run_id, _ in listed}
        return listed + [(run_id, "") for run_id in sorted(self.asked) if run_id not in shown]


def left_queue_notice(run_id: str, entries: Iterable[Mapping[str, Any]]) -> Notice:
    """What became of a launch that left the queue with no job to show for it,
    in the words of the node's log (``entries``, oldest first): the last entry about it."""
    last = next((e for e in reversed(list(entries)) if e.get("target") == run_id), None)
    message = str(last.get("message", "")) if last else ""
    if last is not None and last.get("result") == "dropped":
        return Notice(message, "Queued launch dropped", "error", 12)
    if last is not None and last.get("action") == "launch" and last.get("result") == "ok":
        return Notice(message.removeprefix("queued launch: "), "Queued launch started")
    if last is not None and last.get("action") == "cancel":
        return Notice(message, "Queued launch cancelled", "warning", 12)
    return Notice(f"{run_id} is no longer queued.", "Queued launch")
