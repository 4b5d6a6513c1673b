"""The node's log as the service writes it: every action, allowed or not, and what happened to the cards.

Every action is written to the node's log before its answer is given,
refusals included, and every entry (an action's, or one about the cards: XIDs,
drains, intruders, health, ends, evictions) is handed at once to everyone
following the log. Reading it back is here too: the audit of actions, the
events of a card, and a follow that misses nothing in between.
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Optional, TypeVar

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import NoCapacity, NotAllowed
from tpnode_tui.port.types import LaunchResult
from tpnode_tui.service.changes import Changes
from tpnode_tui.state.nodelog import NodeLog

T = TypeVar("T")

#: how many log entries one audit or events answer holds at most (the newest)
AUDIT_LIMIT = 10_000
#: how many new log entries a follower may fall behind before it misses some
FOLLOW_BACKLOG = 1000


class Journal:
    def __init__(self, node_log: Optional[NodeLog], clock: Callable[[], float], changes: Changes) -> None:
        self.log = node_log
        self.clock = clock
        self.changes = changes
        self._followers: set[asyncio.Queue[dict[str, Any]]] = set()
        #: launches and reservations by result since the service started (for /metrics)
        self.launch_results: collections.Counter[str] = collections.Counter()

    def record(
        self,
        caller: Caller,
        action: str,
        target: str,
        result: str,
        message: str,
        *,
        counted: Optional[str] = None,
        cards: Iterable[int] = (),
        **fields: object,
    ) -> None:
        if action in ("launch", "reserve"):
            self.launch_results[counted or result.replace(" ", "_")] += 1
        if cards:
            fields["cards"] = sorted(set(cards))
        self.event(
            "action",
            message,
            action=action,
            target=target,
            result=result,
            uid=caller.uid,
            user=caller.user,
            pid=caller.pid,
            **fields,
        )

    def event(self, kind: str, message: str, **fields: Any) -> dict[str, Any]:
        """Write one entry to the node's log and hand it to everyone following it."""
        if self.log is not None:
            entry = self.log.append(kind, message, **fields)
        else:
            entry = {"time": self.clock(), "kind": kind, "message": message, **fields}
        for follower in self._followers:
            if follower.full():
                follower.get_nowait()  # a follower that stopped reading loses the oldest
            follower.put_nowait(entry)
        return entry

    async def audited(
        self,
        caller: Caller,
        action: str,
        target: str,
        work: Awaitable[T],
        done: Callable[[T], str],
        cards: Callable[[T], Iterable[int]] = lambda _r: (),
        asked: Iterable[int] = (),
        finish: bool = True,
    ) -> T:
        """Run ``work``, and log the attempt, allowed or not, before answering.
        ``asked`` are the cards the request names, for an attempt that failed.

        ``finish``: once asked, it is done even if the asker goes away (a drain
        half-written, or signals sent with nobody logging them, would be worse),
        and logged as it ended. Launches say False: one still waiting for the
        lock is dropped when its asker goes (see
        :meth:`~tpnode_tui.service.launches.Launches._place`)."""
        task = asyncio.ensure_future(work)
        try:
            result = await (asyncio.shield(task) if finish else task)
        except asyncio.CancelledError:
            if finish:  # logged as it ends, whenever that is
                task.add_done_callback(lambda t: self._ended(caller, action, target, t, done, cards, asked))
            else:
                self.record(caller, action, target, "abandoned", f"{caller.user} went away before {target} was placed")
            raise
        except Exception:
            self._ended(caller, action, target, task, done, cards, asked)
            raise
        self._ended(caller, action, target, task, done, cards, asked)
        return result

    def _ended(
        self,
        caller: Caller,
        action: str,
        target: str,
        task: asyncio.Future[T],
        done: Callable[[T], str],
        cards: Callable[[T], Iterable[int]],
        asked: Iterable[int],
    ) -> None:
        """Log how an action ended (allowed, refused, failed), and show its effect."""
        if task.cancelled():
            self.record(caller, action, target, "abandoned", f"{target}: stopped before it ended")
            return
        e = task.exception()
        if e is not None:
            how = "no capacity" if isinstance(e, NoCapacity) else "refused" if isinstance(e, NotAllowed) else "failed"
            self.record(caller, action, target, how, str(e) or type(e).__name__, cards=asked)
            return
        outcome = task.result()
        queued = isinstance(outcome, LaunchResult) and outcome.queued is not None
        self.record(
            caller, action, target, "ok", done(outcome), counted="queued" if queued else "placed", cards=cards(outcome)
        )
        self.changes.acted()

    def audit(self, caller: Caller, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        """The logged actions of the last ``since_s`` seconds (all of them for
        None), newest last: everyone's for an operator, else the caller's own
        (and the node's on their jobs); and whether they are everyone's."""
        if self.log is None:
            return [], caller.operator
        since = None if since_s is None else self.clock() - since_s
        entries = collections.deque(
            (e for e in self.log.read(since=since, kinds={"action"}) if caller.operator or _theirs(caller, e)),
            maxlen=AUDIT_LIMIT,
        )
        return list(entries), caller.operator

    def _visible(self, caller: Caller, entry: dict[str, Any], card: Optional[int]) -> bool:
        """Actions are the caller's own unless they operate (as for audit); what
        happened to the cards is everyone's to see."""
        if entry.get("kind") == "action" and not caller.operator and not _theirs(caller, entry):
            return False
        if card is not None:
            cards = entry.get("cards")
            return isinstance(cards, list) and card in cards
        return True

    def events(
        self, caller: Caller, since_s: Optional[float] = None, card: Optional[int] = None
    ) -> list[dict[str, Any]]:
        """The node's log of the last ``since_s`` seconds (all of it for None),
        oldest first, at most the newest AUDIT_LIMIT: health events, XIDs,
        drains, intruders, ends and expiries, evictions, and the actions the
        caller may see; only those about ``card`` when one is given.

        Reads every kept log file (up to TUNEPLANE_LOG_MAX_MB a file): blocking,
        so the agent calls it in a thread; only the newest are ever held."""
        if self.log is None:
            return []
        since = None if since_s is None else self.clock() - since_s
        return list(
            collections.deque(
                (e for e in self.log.read(since=since) if self._visible(caller, e, card)), maxlen=AUDIT_LIMIT
            )
        )

    async def follow_events(
        self, caller: Caller, card: Optional[int] = None, since_s: Optional[float] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """What :meth:`events` shows for ``since_s`` (nothing for None), then every
        entry as it is written, none twice and none missed in between. A follower
        that falls FOLLOW_BACKLOG entries behind loses the oldest."""
        follower: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=FOLLOW_BACKLOG)
        self._followers.add(follower)
        try:
            past = await asyncio.to_thread(self.events, caller, since_s, card) if since_s is not None else []
            # Entries written while the past was read are in both: skip them once.
            overlap = {json.dumps(e, sort_keys=True) for e in past[-FOLLOW_BACKLOG:]}
            for entry in past:
                yield entry
            while True:
                entry = await follower.get()
                if overlap and json.dumps(entry, sort_keys=True) in overlap:
                    continue
                overlap = set()
                if self._visible(caller, entry, card):
                    yield entry
        finally:
            self._followers.discard(follower)


def _theirs(caller: Caller, entry: dict[str, Any]) -> bool:
    """An action is the caller's to see when they asked for it, or when it was done
    to a job of theirs without them (``owner_uid``: the node releasing an idle
    reservation), so they learn where their cards went."""
    return entry.get("uid") == caller.uid or entry.get("owner_uid") == caller.uid
