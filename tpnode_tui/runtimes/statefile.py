"""The process runtime's state file: the only record of which cards its jobs hold.

Processes carry no labels, so the platform's knowledge of them lives in one
JSON document, ``jobs.json``, kept as every such document in the state dir
is (:mod:`tpnode_tui.state.jsonstore`): changed only under an exclusive ``flock`` on
its own lock file, so two launchers (the dashboard and a CLI) cannot both
read the old list and each write back a copy missing the other's job; written
by atomic replace, so a crash leaves the old document or the new one; and a
file that cannot be understood is refused, never written over. Read as "no
jobs", it would hand every card to the next launch while the jobs it listed
still run; written over, they would be lost for good.

What is particular to this file is the record: every field is checked, and
an unknown one refused, because a record not fully understood might hold
cards nobody can see.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from tpnode_tui.model.jobs import FENCE_MECHANISMS, JOB_KINDS, DeviceGrant, SliceMinors, SliceRef
from tpnode_tui.model.validation import MIG_UUID_PATTERN, PROFILE_PATTERN
from tpnode_tui.runtimes.jobprocs import CGROUP_PREFIX
from tpnode_tui.state.jsonstore import DEFAULT_LOCK_TIMEOUT_S, JsonStore

STATE_VERSION = 1
STATE_FILE = "jobs.json"
LOCK_FILE = f"{STATE_FILE}.lock"

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "LOCK_FILE",
    "STATE_FILE",
    "STATE_VERSION",
    "JobRecord",
    "StateFile",
    "record_from_json",
]


@dataclass(frozen=True)
class JobRecord:
    """One job as the state file records it.

    ``pid`` is the job's supervisor, and ``pid_start_ticks`` and ``boot_id`` say
    which process that pid meant: pids are reused, and signalling or counting
    as running whatever process holds the number now would be wrong. The start
    is kept in clock ticks since boot (from ``/proc``), not as a wall-clock
    time, because a wall-clock start time is derived from the boot time, which
    moves whenever the system clock is stepped or slewed; a job running for
    days would then stop matching its own record and its cards would look free.
    """

    name: str
    run_id: str
    gpus: tuple[int, ...]
    kind: str
    owner: str
    command: tuple[str, ...]
    #: unix seconds, for display
    started_at: float
    expires_at: Optional[float]
    pid: int
    pid_start_ticks: int
    boot_id: str
    log: str
    #: ``None`` until the supervisor records how the command ended
    exit_code: Optional[int] = None
    #: the allocation lock's lease token when the cards were picked (read from
    #: "fence" too, its name in a record written before; see _OLD_NAMES)
    lease_token: Optional[int] = None
    #: True while the supervisor waits for ``start``: the job holds its cards
    #: ("created") but its command has not run yet
    gated: bool = False
    #: the PID namespace the pid belongs to (``/proc/self/ns/pid`` of the
    #: launcher); a reader in another namespace cannot look the pid up
    pid_ns: str = ""
    #: the directory of the job's own cgroup (v2), "" when it has none: then
    #: only its session can be found, and a process that left it (setsid) is not
    cgroup: str = ""
    #: how the job ended, in plain words, where the exit code does not say it
    #: all (e.g. "killed by SIGKILL after 10 s")
    note: str = ""
    #: the owner's uid, so that rules compare accounts, not names (None: not recorded)
    uid: Optional[int] = None
    #: the MIG slices the job holds (``gpus`` is then empty); a record made before
    #: slices has none, and one without slices is written without the field, so
    #: such a record still reads where slices are not known
    slices: tuple[SliceRef, ...] = ()
    #: its cards and slices in device numbers, as the allocator read them when it
    #: picked them (None: not recorded); what its fence was made of
    granted: Optional[DeviceGrant] = None
    #: how the launcher fenced it to its cards' device files, when it did
    #: (a key of FENCE_MECHANISMS), written before its command ran
    fence_mechanism: str = ""
    #: why it is not fenced, when it is not; both "": recorded before jobs were fenced
    fence_problem: str = ""
    #: its cgroup of the v1 devices hierarchy (the fence "cgroup-v1"), "" when it has none
    devices_cgroup: str = ""

    def to_json(self) -> dict[str, Any]:
        """Its JSON form; a field a record made before it existed would not have is
        left out while it is empty, so such a record reads the same either way."""
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        data["command"] = list(self.command)
        data["slices"] = [asdict(ref) for ref in self.slices]
        if self.granted is not None:
            data["granted"] = {
                "cards": list(self.granted.cards),
                "slices": [asdict(part) for part in self.granted.slices],
                "unknown": self.granted.unknown,
            }
        for key in ("slices", "granted", "fence_mechanism", "fence_problem", "devices_cgroup"):
            if not data[key]:
                del data[key]
        return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_slice(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= {"card", "uuid", "profile"}
        and {"card", "uuid"} <= set(value)
        and _is_int(value["card"])
        and value["card"] >= 0
        and isinstance(value["uuid"], str)
        and MIG_UUID_PATTERN.fullmatch(value["uuid"]) is not None
        and isinstance(value.get("profile", ""), str)
        and (value.get("profile", "") == "" or PROFILE_PATTERN.fullmatch(value["profile"]) is not None)
    )


def _is_minor(value: Any) -> bool:
    return _is_int(value) and 0 <= value <= 0xFFFFF


def _is_grant(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"cards", "slices", "unknown"}
        and isinstance(value["cards"], list)
        and all(_is_minor(m) for m in value["cards"])
        and isinstance(value["slices"], list)
        and all(
            isinstance(part, dict)
            and set(part) == {"card", "gpu_instance", "compute_instance"}
            and all(_is_minor(v) for v in part.values())
            for part in value["slices"]
        )
        and isinstance(value["unknown"], str)
    )


def _grant(value: dict[str, Any]) -> DeviceGrant:
    return DeviceGrant(
        cards=tuple(value["cards"]),
        slices=tuple(SliceMinors(**part) for part in value["slices"]),
        unknown=value["unknown"],
    )


def _is_own_cgroup(value: Any) -> bool:
    """Only a cgroup this runtime made: stopping the job kills everything in it."""
    return isinstance(value, str) and (
        value == ""
        or (
            value.startswith("/")
            and "\0" not in value
            and ".." not in PurePosixPath(value).parts
            and PurePosixPath(value).name.startswith(CGROUP_PREFIX)
        )
    )


_CHECKS: dict[str, tuple[Any, str]] = {
    "name": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "run_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "gpus": (
        lambda v: isinstance(v, list) and all(_is_int(i) and i >= 0 for i in v),
        "a list of card indices",
    ),
    "kind": (lambda v: v in JOB_KINDS, f"one of {', '.join(JOB_KINDS)}"),
    "owner": (lambda v: isinstance(v, str), "a string"),
    "command": (
        lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
        "a list of strings",
    ),
    "started_at": (_is_number, "a number"),
    "expires_at": (lambda v: v is None or _is_number(v), "a number or null"),
    "pid": (lambda v: _is_int(v) and v > 0, "a positive whole number"),
    "pid_start_ticks": (lambda v: _is_int(v) and v >= 0, "a whole number"),
    "boot_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "log": (lambda v: isinstance(v, str), "a string"),
    "exit_code": (lambda v: v is None or _is_int(v), "a whole number or null"),
    "lease_token": (lambda v: v is None or (_is_int(v) and v >= 0), "a whole number or null"),
    "gated": (lambda v: isinstance(v, bool), "true or false"),
    "pid_ns": (lambda v: isinstance(v, str), "a string"),
    "cgroup": (_is_own_cgroup, f'"" or the absolute path of a cgroup named {CGROUP_PREFIX}*'),
    "note": (lambda v: isinstance(v, str), "a string"),
    "uid": (lambda v: v is None or (_is_int(v) and v >= 0), "a whole number or null"),
    "slices": (
        lambda v: isinstance(v, list) and all(_is_slice(i) for i in v) and len({i["uuid"] for i in v}) == len(v),
        'a list of distinct MIG slices ({"card": N, "uuid": "MIG-...", "profile": "1g.18gb"})',
    ),
    "granted": (
        lambda v: v is None or _is_grant(v),
        'null or {"cards": [minors], "slices": [{"card", "gpu_instance", "compute_instance"}], "unknown": "..."}',
    ),
    "fence_mechanism": (lambda v: v == "" or v in FENCE_MECHANISMS, f'"" or one of {", ".join(FENCE_MECHANISMS)}'),
    "fence_problem": (lambda v: isinstance(v, str), "a string"),
    "devices_cgroup": (_is_own_cgroup, f'"" or the absolute path of a cgroup named {CGROUP_PREFIX}*'),
}


#: A field's name in a record an earlier version wrote -> its name now. The old
#: name is read, never written: a record rewritten is written with the new one.
_OLD_NAMES = {"fence": "lease_token"}


def _renamed(key: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each field an earlier version wrote under an old name under its
    name now; ValueError for a record that has both, which no version writes."""
    for old, new in _OLD_NAMES.items():
        if old in data and new in data:
            raise ValueError(f"job {key!r} has both {new!r} and its old name {old!r}")
    return {_OLD_NAMES.get(name, name): value for name, value in data.items()}


def record_from_json(key: str, data: Any) -> JobRecord:
    """A record from its JSON form; ValueError saying what is wrong with it.

    Every field is checked, and an unknown one is refused rather than dropped:
    a record that cannot be fully understood might hold cards nobody can see,
    and rewriting the file without a field would lose it silently.
    """
    if not isinstance(data, dict):
        raise ValueError(f"job {key!r} is not a JSON object")
    data = _renamed(key, data)
    names = {f.name for f in fields(JobRecord)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"job {key!r} has unknown fields {unknown}")
    optional = {f.name for f in fields(JobRecord) if f.default is not MISSING}
    for name in names:
        if name not in data:
            if name in optional:
                continue
            raise ValueError(f"job {key!r} has no {name!r}")
        check, wanted = _CHECKS[name]
        if not check(data[name]):
            raise ValueError(f"job {key!r} field {name!r} is {data[name]!r}, expected {wanted}")
    if data["name"] != key:
        raise ValueError(f"job {key!r} is recorded under the name {data['name']!r}")
    if data.get("fence_mechanism") and data.get("fence_problem"):
        raise ValueError(f"job {key!r} is recorded both fenced and not ({data['fence_problem']!r})")
    values = dict(
        data,
        gpus=tuple(data["gpus"]),
        command=tuple(data["command"]),
        slices=tuple(SliceRef(i["card"], i["uuid"], i.get("profile", "")) for i in data.get("slices", [])),
        granted=None if data.get("granted") is None else _grant(data["granted"]),
    )
    return JobRecord(**values)


class StateFile(JsonStore[JobRecord]):
    """``state_dir/jobs.json`` and its lock (``jobs.json.lock``). Holds nothing between calls."""

    def __init__(self, state_dir: Path, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
        super().__init__(
            Path(state_dir),
            STATE_FILE,
            section="jobs",
            version=STATE_VERSION,
            parse=record_from_json,
            dump=JobRecord.to_json,
            what="state file",
            losing="the cards of the jobs it lists would look free while those jobs may still run",
            lock_timeout_s=lock_timeout_s,
        )
