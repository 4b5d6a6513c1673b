"""The node's log as the service writes it: every action, allowed or not, and what happened to the cards.

Every action is written before its answer is given, refusals included (the
door's and the service's), naming the caller as the kernel did, and every
entry is handed at once to whoever follows the log; reading it back (audit,
events, follow) is here too. The log must survive the accounts it records:
others' text is cut and made printable, repeated refusals fold (FOLD_S), and
an ordinary account's entries go to its own shelf. See docs/architecture.md,
section 'The door' ("Refusals and the audit").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Optional, TypeVar

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import BadRequest, NoCapacity, NotAllowed, TooMany, TpnodeError
from tpnode_tui.port.types.events import AuditPage, AuditRequest, EventsPage, EventsRequest
from tpnode_tui.port.types.jobs import LaunchResult
from tpnode_tui.service.changes import Changes
from tpnode_tui.state.nodelog import NodeLog
from tpnode_tui.text.printable import printable

T = TypeVar("T")

log = logging.getLogger(__name__)

#: the most entries one answer holds when the node's limits are not given (TUNEPLANE_MAX_PAGE's default)
DEFAULT_PAGE = 1000
#: how many new log entries a follower may fall behind before it misses some
FOLLOW_BACKLOG = 1000
#: how long repeated refusals of one kind from one account fold into one line
FOLD_S = 60.0
#: the longest message a log entry keeps: someone else's text quoted in an error is cut
MESSAGE_MOST = 500
#: the longest target (a run id, a card) an entry keeps
TARGET_MOST = 80
#: threads that read the log for answers: a page of a large log is read in a
#: thread, and many asked at once wait for this one, never for the threads the
#: polls use. One, not more: reading is Python's work under the GIL, so a second
#: thread reads hardly faster and takes turns from the event loop (measured:
#: with two, another account's status under a flood had a p99 past a second)
READERS = 1


#: how a launch or reservation asked of the node ended, as /metrics counts them
#: (``tpnode_launches_total``'s ``result``, docs/metrics.md): placed now or from
#: the queue, queued, or each way a request ends without cards (:func:`result_of`'s
#: words, written as a label), given up by its asker, or dropped from the queue
LAUNCH_RESULTS = (
    "placed",
    "queued",
    "no_capacity",
    "over_a_limit",
    "refused",
    "bad_request",
    "failed",
    "abandoned",
    "dropped",
)


def result_of(error: BaseException) -> str:
    """How a refused or failed action is logged, by its kind."""
    if isinstance(error, NoCapacity):
        return "no capacity"
    if isinstance(error, TooMany):
        return "over a limit"
    if isinstance(error, NotAllowed):
        return "refused"
    if isinstance(error, BadRequest):
        return "bad request"
    return "failed"


def cut(text: str, most: int) -> str:
    """Someone else's text as a log entry keeps it: printable, and at most ``most`` characters."""
    text = printable(text)
    return text if len(text) <= most else text[: most - 1] + "…"


@dataclass
class _Fold:
    """Refusals of one kind from one account, counted since the first was written."""

    caller: Caller
    action: str
    result: str
    first: float
    count: int = 0
    last: float = 0.0
    message: str = ""
    handle: Optional[asyncio.TimerHandle] = field(default=None, repr=False)


class Journal:
    def __init__(
        self, node_log: Optional[NodeLog], clock: Callable[[], float], changes: Changes, *, page: int = DEFAULT_PAGE
    ) -> None:
        self.log = node_log
        self.clock = clock
        self.changes = changes
        #: the most entries one audit or events answer holds (TUNEPLANE_MAX_PAGE)
        self.page = page
        self._followers: set[asyncio.Queue[dict[str, Any]]] = set()
        #: told of every entry as it is written (the notices): each only files it, at once
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        #: launches and reservations by result since the service started (for /metrics)
        self.launch_results: collections.Counter[str] = collections.Counter()
        self._folds: dict[tuple[int, str, str], _Fold] = {}
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="tpnode-log")

    # ── writing ──────────────────────────────────────────────────────────────

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
        """Log one action of ``caller``'s, as it ended. A refusal like one logged
        in the last FOLD_S seconds (one account, one action, one result) is
        counted into that one instead, and said when the time is up."""
        if action in ("launch", "reserve"):
            self.launch_results[counted or result.replace(" ", "_")] += 1
        if result != "ok" and self._folded(caller, action, result, message):
            return
        if cards:
            fields["cards"] = sorted(set(cards))
        self._write(caller, action, cut(target, TARGET_MOST), result, cut(message, MESSAGE_MOST), **fields)

    def _write(self, caller: Caller, action: str, target: str, result: str, message: str, **fields: Any) -> None:
        self.event(
            "action",
            message,
            account=None if caller.operator else caller.uid,
            action=action,
            target=target,
            result=result,
            uid=caller.uid,
            user=caller.user,
            pid=caller.pid,
            **fields,
        )

    def refused(self, caller: Caller, action: str, says: str, target: str, error: TpnodeError) -> None:
        """Log a request refused before its action began: one the door could not
        read, over a limit, naming who asks, or a read the node refused. ``says``
        is what the operation does, in the table's words, so the line reads
        "bob asked to stop a running job or reservation: ..." whatever the error."""
        self.record(caller, action, target, result_of(error), f"{caller.user} asked to {says}: {error}")

    def _folded(self, caller: Caller, action: str, result: str, message: str) -> bool:
        """Whether this refusal folds into one logged in the last FOLD_S seconds;
        the first of a kind starts the count and is logged as it is."""
        key = (caller.uid, action, result)
        now = self.clock()
        fold = self._folds.get(key)
        if fold is not None and now - fold.first < FOLD_S:
            fold.count += 1
            fold.last = now
            fold.message = message
            return True
        if fold is not None:
            self._flush(key)
        fold = _Fold(caller, action, result, first=now)
        self._folds[key] = fold
        with contextlib.suppress(RuntimeError):  # no event loop (a plain call): said when the next one comes
            fold.handle = asyncio.get_running_loop().call_later(FOLD_S, self._flush, key)
        return False

    def _flush(self, key: tuple[int, str, str]) -> None:
        """Say how many refusals a fold took, in one line, and forget it."""
        fold = self._folds.pop(key, None)
        if fold is None:
            return
        if fold.handle is not None:
            fold.handle.cancel()
        if not fold.count:
            return
        span = f"{_clock(fold.first)} to {_clock(fold.last)}"
        self._write(
            fold.caller,
            fold.action,
            "*",
            fold.result,
            cut(
                f"{fold.count} more like the one before from {fold.caller.user} ({fold.action}, {fold.result}), "
                f"{span}; the last: {fold.message}",
                MESSAGE_MOST,
            ),
            count=fold.count,
            first=fold.first,
            last=fold.last,
        )

    def flush(self) -> None:
        """Say every fold's count now (the service is closing)."""
        for key in list(self._folds):
            self._flush(key)

    def event(self, kind: str, message: str, *, account: Optional[int] = None, **fields: Any) -> dict[str, Any]:
        """Write one entry to the node's log (``account``'s own shelf, for an
        ordinary account's action) and hand it to everyone following it."""
        if self.log is not None:
            entry = self.log.append(kind, message, account=account, **fields)
        else:
            entry = {"time": self.clock(), "kind": kind, "message": message, **fields}
        for follower in self._followers:
            if follower.full():
                follower.get_nowait()  # a follower that stopped reading loses the oldest
            follower.put_nowait(entry)
        for listener in self.listeners:
            try:
                listener(entry)
            except Exception:  # what hears the log never stops it being written
                log.warning("could not hand on a log entry", exc_info=True)
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
        shown_as: Callable[[T], Optional[str]] = lambda _r: None,
    ) -> T:
        """Run ``work``, and log the attempt, allowed or not, before answering.
        ``asked`` are the cards the request names, for an attempt that failed.
        ``shown_as``: the kind of the entry ``work`` wrote of its effect on the
        cards (a drain's "drain"), if it did: the events show that one, and the
        action only in the audit, so one change is not shown twice.

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
                task.add_done_callback(lambda t: self._ended(caller, action, target, t, done, cards, asked, shown_as))
            else:
                self.record(caller, action, target, "abandoned", f"{caller.user} went away before {target} was placed")
            raise
        except Exception:
            self._ended(caller, action, target, task, done, cards, asked, shown_as)
            raise
        self._ended(caller, action, target, task, done, cards, asked, shown_as)
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
        shown_as: Callable[[T], Optional[str]],
    ) -> None:
        """Log how an action ended (allowed, refused, failed), and show its effect."""
        if task.cancelled():
            self.record(caller, action, target, "abandoned", f"{target}: stopped before it ended")
            return
        e = task.exception()
        if e is not None:
            self.record(caller, action, target, result_of(e), str(e) or type(e).__name__, cards=asked)
            return
        outcome = task.result()
        queued = isinstance(outcome, LaunchResult) and outcome.queued is not None
        effect = shown_as(outcome)
        self.record(
            caller,
            action,
            target,
            "ok",
            done(outcome),
            counted="queued" if queued else "placed",
            cards=cards(outcome),
            **({"shown_as": effect} if effect else {}),
        )
        self.changes.acted()

    # ── reading ──────────────────────────────────────────────────────────────

    def logged(self, kinds: frozenset[str]) -> Optional[list[dict[str, Any]]]:
        """The node's own entries of ``kinds``, oldest first, from every kept file
        of its shelf (blocking): what the service logged before it last started.
        None where no log is kept."""
        if self.log is None:
            return None
        return list(self.log.read(kinds=set(kinds), accounts=()))

    def _limit(self, asked: Optional[int]) -> int:
        return self.page if asked is None else max(1, min(asked, self.page))

    def _since(self, since_s: Optional[float]) -> Optional[float]:
        return None if since_s is None else self.clock() - since_s

    async def audit(self, caller: Caller, request: AuditRequest) -> AuditPage:
        """The logged actions of the last ``since_s`` seconds (all kept, for
        None), oldest first, at most a page (the newest before ``before``):
        everyone's for an operator, else the caller's own (read from their own
        shelf and the node's only), and the node's on their jobs."""
        if self.log is None:
            return AuditPage((), caller.operator)
        log = self.log
        since, limit = self._since(request.since_s), self._limit(request.limit)

        def read() -> tuple[list[dict[str, Any]], bool]:
            entries = log.read(
                since=since, before=request.before, kinds={"action"}, accounts=None if caller.operator else [caller.uid]
            )
            return _newest((e for e in entries if caller.operator or _theirs(caller, e)), limit)

        entries, more = await asyncio.get_running_loop().run_in_executor(self._readers, read)
        return AuditPage(tuple(entries), caller.operator, more)

    def _visible(self, caller: Caller, entry: dict[str, Any], card: Optional[int]) -> bool:
        """Actions are the caller's own unless they operate (as for audit); what
        happened to the cards is everyone's to see, but for what an account's own
        jobs did (``owner_uid``: kept on that account's shelf), which is its own
        and the operators', as reading the shelves gives it."""
        if not caller.operator:
            if entry.get("kind") == "action" and not _theirs(caller, entry):
                return False
            if entry.get("kind") != "action" and entry.get("owner_uid", caller.uid) != caller.uid:
                return False
        if entry.get("kind") == "action" and entry.get("shown_as"):
            return False  # its effect on the cards has its own entry: the audit has the action
        if card is not None:
            cards = entry.get("cards")
            return isinstance(cards, list) and card in cards
        return True

    def _events(self, caller: Caller, request: EventsRequest) -> tuple[list[dict[str, Any]], bool]:
        """A page of the node's log: blocking (it reads every kept file of the
        shelves the caller may see), so it runs in a reader thread."""
        if self.log is None:
            return [], False
        entries = self.log.read(
            since=self._since(request.since_s),
            before=request.before,
            accounts=None if caller.operator else [caller.uid],
        )
        return _newest((e for e in entries if self._visible(caller, e, request.card)), self._limit(request.limit))

    async def events(self, caller: Caller, request: EventsRequest) -> EventsPage:
        """The node's log of the last ``since_s`` seconds (all of it for None),
        oldest first, at most a page (the newest before ``before``): health
        events, XIDs, drains, intruders, ends and expiries, evictions, and the
        actions the caller may see; only those about ``card`` when one is given."""
        entries, more = await asyncio.get_running_loop().run_in_executor(self._readers, self._events, caller, request)
        return EventsPage(tuple(entries), more)

    async def follow_events(self, caller: Caller, request: EventsRequest) -> AsyncIterator[dict[str, Any]]:
        """What :meth:`events` shows for ``since_s`` (nothing for None), then every
        entry as it is written, none twice and none missed in between. A follower
        that falls FOLLOW_BACKLOG entries behind loses the oldest."""
        follower: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=FOLLOW_BACKLOG)
        self._followers.add(follower)
        try:
            past: list[dict[str, Any]] = []
            if request.since_s is not None:
                past = list((await self.events(caller, request)).entries)
            # Entries written while the past was read are in both: skip them once.
            overlap = {json.dumps(e, sort_keys=True) for e in past[-FOLLOW_BACKLOG:]}
            for entry in past:
                yield entry
            while True:
                entry = await follower.get()
                if overlap and json.dumps(entry, sort_keys=True) in overlap:
                    continue
                overlap = set()
                if self._visible(caller, entry, request.card):
                    yield entry
        finally:
            self._followers.discard(follower)

    def close(self) -> None:
        self.flush()
        self._readers.shutdown(wait=False, cancel_futures=True)


def _theirs(caller: Caller, entry: dict[str, Any]) -> bool:
    """An action is the caller's to see when they asked for it, or when it was done
    to a job of theirs without them (``owner_uid``: the node releasing an idle
    reservation), so they learn where their cards went."""
    return entry.get("uid") == caller.uid or entry.get("owner_uid") == caller.uid


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when))


def _newest(entries: Iterator[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The newest ``limit`` of ``entries`` (oldest first), and whether there were
    more: only as many are ever held, however long the log."""
    kept = collections.deque(entries, maxlen=limit + 1)
    more = len(kept) > limit
    if more:
        kept.popleft()
    return list(kept), more
