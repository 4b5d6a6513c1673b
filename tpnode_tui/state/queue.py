"""Launches waiting for cards, in the order they were asked for.

A launch refused for lack of capacity is "not your turn yet", and a wish
someone waits on must not vanish: the agent keeps the queue in
``queue.json``, each record the request as the door accepted it, read back
with the very parse the door used; a record that still cannot be read is set
aside in ``queue.rejected.json``. How many may wait is bounded per account
and in all. An in-process dashboard keeps its queue in memory. See
docs/architecture.md, section 'The door' ("One parse").
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import BadRequest, TooMany, TpnodeError
from tpnode_tui.model.jobs import QueuedLaunch
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.wire.reader import Reader
from tpnode_tui.state.jsonstore import JsonStore, SetAside

QUEUE_FILE = "queue.json"
#: where a queued launch that cannot be read back is kept, for an operator
REJECTED_FILE = "queue.rejected.json"
QUEUE_VERSION = 1


@dataclass(frozen=True)
class QueueEntry:
    """A queued launch: the request as accepted (its run id given), who asked, and when."""

    request: LaunchRequest
    caller: Caller
    queued_at: float

    @property
    def run_id(self) -> str:
        assert self.request.run_id is not None  # a queued launch always has its run id
        return self.request.run_id

    @property
    def owner(self) -> str:
        """Whose launch it is: the owner an operator named, else the caller."""
        return self.request.owner or self.caller.user

    @property
    def owner_uid(self) -> Optional[int]:
        """The owner's uid where the kernel named them (the caller's own launch);
        None for an owner an operator named, who is compared by name."""
        return self.caller.uid if self.owner == self.caller.user else None

    def public(self, state: str = "queued", waiting_for: Optional[str] = None) -> QueuedLaunch:
        r = self.request
        return QueuedLaunch(
            run_id=self.run_id,
            cards=r.cards,
            owner=self.owner,
            queued_at=self.queued_at,
            kind="job",
            command=r.command,
            image=r.image,
            uid=self.owner_uid,
            state=state,
            waiting_for=waiting_for,
            slice=r.slice,
            placement=r.placement,
        )


@dataclass(frozen=True)
class Bounds:
    """How many launches may wait: one ordinary account's, and everyone's (None: no bound)."""

    per_account: Optional[int] = None
    total: Optional[int] = None


#: no bound on how many launches wait (an in-process node's, a test's)
NO_BOUNDS = Bounds()


class LaunchQueue(Protocol):
    def entries(self) -> list[QueueEntry]: ...

    def add(self, entry: QueueEntry, bounds: Bounds = NO_BOUNDS) -> None:
        """Append; BadRequest when the run id is queued already, TooMany over ``bounds``."""
        ...

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        """Take a request out; None when it is no longer queued."""
        ...

    def problem(self) -> Optional[str]:
        """What an operator must know of the queue, in words: records set aside; None when all is well."""
        ...


def _already(run_id: str) -> BadRequest:
    return BadRequest(f"{run_id} is already queued; cancel it first or choose another run id")


def _check_room(queued: list[QueueEntry], entry: QueueEntry, bounds: Bounds) -> None:
    """Refuse ``entry`` when the queue is full, for its account or for everyone.
    An operator's own launches count toward the total only: operators clear a
    stuck node, and are not limited per account (as with cards)."""
    if any(e.run_id == entry.run_id for e in queued):
        raise _already(entry.run_id)
    who = entry.caller
    if bounds.per_account is not None and not who.operator:
        mine = sum(1 for e in queued if e.caller.uid == who.uid)
        if mine >= bounds.per_account:
            raise TooMany(
                f"{who.user} has {mine} launches queued already, the most one account may "
                f"(TUNEPLANE_MAX_QUEUED_PER_USER={bounds.per_account}): cancel one (tpnode-tui queue "
                "lists them) or wait for one to start"
            )
    if bounds.total is not None and len(queued) >= bounds.total:
        raise TooMany(
            f"the queue holds {len(queued)} launches already, the most this node keeps "
            f"(TUNEPLANE_MAX_QUEUED={bounds.total}): try again once some have started"
        )


class MemoryQueue:
    """The queue of an in-process dashboard: gone when it closes (it asks first)."""

    def __init__(self) -> None:
        self._items: list[QueueEntry] = []

    def entries(self) -> list[QueueEntry]:
        return list(self._items)

    def add(self, entry: QueueEntry, bounds: Bounds = NO_BOUNDS) -> None:
        _check_room(self._items, entry, bounds)
        self._items.append(entry)

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        for n, e in enumerate(self._items):
            if e.run_id == run_id:
                return self._items.pop(n)
        return None

    def problem(self) -> Optional[str]:
        return None


class FileQueue:
    """The agent's queue, ``state_dir/queue.json``.

    Read afresh whenever the file changed, and only then: the agent reads the
    queue after every poll, and a queue of launches with large environments
    read and parsed five times a second once kept the agent busy for everyone.
    """

    def __init__(self, state_dir: Path) -> None:
        self.store: JsonStore[QueueEntry] = JsonStore(
            state_dir,
            QUEUE_FILE,
            section="launches",
            version=QUEUE_VERSION,
            parse=entry_from_json,
            dump=entry_to_json,
            what="launch queue",
            losing="people's queued launches would be dropped without a word",
            set_aside=REJECTED_FILE,
            on_set_aside=self._said,
        )
        #: told once of each record set aside (the service logs it)
        self.on_set_aside: Callable[[SetAside], None] = lambda _record: None
        self._seen: Optional[tuple[int, int, int]] = None
        self._cached: list[QueueEntry] = []

    def _said(self, record: SetAside) -> None:
        self.on_set_aside(record)

    def _stamp(self) -> Optional[tuple[int, int, int]]:
        try:
            st = os.stat(self.store.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def entries(self) -> list[QueueEntry]:
        stamp = self._stamp()
        if stamp is None:
            return []
        if stamp != self._seen:
            self._cached = list(self.store.read().values())
            # kept only if the file did not change while it was read (a set-aside rewrites it)
            self._seen = stamp if self._stamp() == stamp else None
        return list(self._cached)

    def add(self, entry: QueueEntry, bounds: Bounds = NO_BOUNDS) -> None:
        with self.store.transaction() as queued:
            _check_room(list(queued.values()), entry, bounds)
            queued[entry.run_id] = entry

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        with self.store.transaction() as queued:
            return queued.pop(run_id, None)

    def problem(self) -> Optional[str]:
        count = self.store.set_aside_count()
        if not count:
            return None
        path = self.store.set_aside_path
        return (
            f"{count} queued launch{'es' if count != 1 else ''} could not be read back and "
            f"{'were' if count != 1 else 'was'} set aside in {path} (see tpnode-tui events); the queue goes on"
        )


# ── the file's records ───────────────────────────────────────────────────────


def caller_to_json(caller: Caller) -> dict[str, Any]:
    return asdict(caller) | {"groups": list(caller.groups)}


def caller_from_json(r: Reader) -> Caller:
    r.only("uid", "gid", "user", "groups", "pid", "operator")
    return Caller(
        uid=r.whole("uid"),
        gid=r.whole("gid"),
        user=r.text("user"),
        groups=r.wholes("groups"),
        pid=r.opt_whole("pid"),
        operator=r.flag("operator", False),
    )


def entry_to_json(entry: QueueEntry) -> dict[str, Any]:
    return {"request": entry.request.to_json(), "caller": caller_to_json(entry.caller), "queued_at": entry.queued_at}


def entry_from_json(key: str, data: Any) -> QueueEntry:
    """A queued launch from its record, read with the door's own parse; ValueError saying what is wrong with it."""
    try:
        where = f"launch {key!r}"
        r = Reader(data, where).only("request", "caller", "queued_at")
        request = LaunchRequest.parse(Reader(r.obj("request"), f"{where}.request"), None)
        caller = caller_from_json(Reader(r.obj("caller"), f"{where}.caller"))
        entry = QueueEntry(request, caller, r.number("queued_at"))
    except TpnodeError as e:
        raise ValueError(str(e)) from None
    if request.run_id != key:
        raise ValueError(f"launch {key!r} is recorded under the run id {request.run_id!r}")
    return entry
