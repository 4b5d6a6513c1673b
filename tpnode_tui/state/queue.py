"""Launches waiting for cards, in the order they were asked for.

A launch refused for lack of capacity is not a failure, it is "not your turn
yet": its owner chose to wait, so the request is kept and tried again after
every poll. The rules for trying (in :mod:`tpnode_tui.service.launches`)
come from the reference's dequeue loop: the first request that does not fit
stops the round, so a stream of 1-card jobs cannot starve an 8-card one; a
request that can never fit or fails otherwise leaves the queue with its reason.

The queue is a list of wishes, not of holdings (the runtime says who holds
what), but a wish someone waits on must not vanish: the agent keeps it in the
state dir (``queue.json``, 0600, written like the state file), so it survives
the dashboard that queued it closing and the agent restarting. It holds what
the launch needs to run as its owner later (environment included), which is
why only the agent reads it; what everyone sees of it is :class:`QueuedLaunch`.
An in-process dashboard keeps its queue in memory, and asks before quitting.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JobSpec, QueuedLaunch, RunAs
from tpnode_tui.model.validation import check_profile
from tpnode_tui.state.jsonstore import JsonStore

QUEUE_FILE = "queue.json"
QUEUE_VERSION = 1


@dataclass(frozen=True)
class QueueEntry:
    spec: JobSpec
    caller: Caller
    queued_at: float

    def public(self, state: str = "queued", waiting_for: Optional[str] = None) -> QueuedLaunch:
        s = self.spec
        return QueuedLaunch(
            run_id=s.run_id,
            cards=s.cards,
            owner=s.owner,
            queued_at=self.queued_at,
            kind=s.kind,
            command=s.command,
            image=s.image,
            uid=s.uid,
            state=state,
            waiting_for=waiting_for,
            slice=s.slice,
            placement=s.placement,
        )


class LaunchQueue(Protocol):
    def entries(self) -> list[QueueEntry]: ...

    def add(self, entry: QueueEntry) -> None:
        """Append; BadRequest when the run id is queued already."""
        ...

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        """Take a request out; None when it is no longer queued."""
        ...


def _already(run_id: str) -> BadRequest:
    return BadRequest(f"{run_id} is already queued; cancel it first or choose another run id")


class MemoryQueue:
    """The queue of an in-process dashboard: gone when it closes (it asks first)."""

    def __init__(self) -> None:
        self._items: list[QueueEntry] = []

    def entries(self) -> list[QueueEntry]:
        return list(self._items)

    def add(self, entry: QueueEntry) -> None:
        if any(e.spec.run_id == entry.spec.run_id for e in self._items):
            raise _already(entry.spec.run_id)
        self._items.append(entry)

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        for n, e in enumerate(self._items):
            if e.spec.run_id == run_id:
                return self._items.pop(n)
        return None


class FileQueue:
    """The agent's queue, ``state_dir/queue.json``: read afresh on every use."""

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
        )

    def entries(self) -> list[QueueEntry]:
        return list(self.store.read().values())

    def add(self, entry: QueueEntry) -> None:
        with self.store.transaction() as queued:
            if entry.spec.run_id in queued:
                raise _already(entry.spec.run_id)
            queued[entry.spec.run_id] = entry

    def remove(self, run_id: str) -> Optional[QueueEntry]:
        with self.store.transaction() as queued:
            return queued.pop(run_id, None)


# ── the file's records ───────────────────────────────────────────────────────


def entry_to_json(entry: QueueEntry) -> dict[str, Any]:
    spec = asdict(entry.spec)
    # Written only when asked for, so a queue of whole-card launches reads as
    # it always did; slices are chosen at launch, never queued.
    if spec.get("slice") is None:
        spec.pop("slice", None)
    if not spec.get("slices"):
        spec.pop("slices", None)
    return {"spec": spec, "caller": asdict(entry.caller), "queued_at": entry.queued_at}


def _check(ok: bool, key: str, what: str) -> None:
    if not ok:
        raise ValueError(f"launch {key!r}: {what}")


def _strs(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def entry_from_json(key: str, data: Any) -> QueueEntry:
    """A queued launch from its record; ValueError saying what is wrong with it."""
    _check(
        isinstance(data, dict) and set(data) == {"spec", "caller", "queued_at"},
        key,
        "is not an object of spec, caller and queued_at",
    )
    spec, caller = data["spec"], data["caller"]
    _check(isinstance(spec, dict) and isinstance(caller, dict), key, "spec and caller must be objects")
    _check(isinstance(data["queued_at"], (int, float)), key, "queued_at must be a number")
    try:
        run_as = spec.get("run_as")
        if run_as is not None:
            _check(_ints(run_as.get("groups")), key, "run_as.groups must be whole numbers")
            run_as = RunAs(**dict(run_as, groups=tuple(run_as["groups"])))
        env = spec.get("env")
        if env is not None:
            _check(
                isinstance(env, list) and all(_strs(p) and len(p) == 2 for p in env),
                key,
                "env must be a list of [name, value] pairs",
            )
            env = tuple((k, v) for k, v in env)
        _check(_strs(spec.get("command", [])), key, "command must be a list of strings")
        _check(spec.get("slice") is None or isinstance(spec["slice"], str), key, "slice must be a MIG profile")
        if spec.get("slice") is not None:
            try:
                check_profile(spec["slice"])
            except BadRequest as e:
                raise ValueError(f"launch {key!r}: {e}") from None
        _check(not spec.get("slices"), key, "slices are chosen when it is placed, never queued")
        parsed = JobSpec(**dict(spec, command=tuple(spec.get("command", [])), env=env, run_as=run_as, slices=()))
        _check(_ints(caller.get("groups", [])), key, "caller.groups must be whole numbers")
        who = Caller(**dict(caller, groups=tuple(caller.get("groups", []))))
    except TypeError as e:
        raise ValueError(f"launch {key!r}: {e}") from None
    _check(parsed.run_id == key, key, f"is recorded under the run id {parsed.run_id!r}")
    _check(
        isinstance(parsed.cards, int) and not isinstance(parsed.cards, bool) and parsed.cards > 0,
        key,
        "cards must be a positive whole number",
    )
    _check(
        all(isinstance(v, str) for v in (parsed.owner, parsed.kind, who.user)),
        key,
        "owner, kind and caller.user must be strings",
    )
    _check(
        all(isinstance(v, int) and not isinstance(v, bool) for v in (who.uid, who.gid)),
        key,
        "caller.uid and caller.gid must be whole numbers",
    )
    return QueueEntry(spec=parsed, caller=who, queued_at=float(data["queued_at"]))
