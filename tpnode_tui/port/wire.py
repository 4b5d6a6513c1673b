"""A node snapshot as JSON, and back: ``status --json``, the agent's API and the fleet.

One document, written here only, serves every reader: a script reading
``status --json``, a dashboard streaming from the agent, the fleet view reading
what each agent published. It is a superset of the first ``status --json``
(every key it had keeps its meaning), complete enough that a dashboard
rebuilds the very snapshot an in-process allocator would have given it.

Reading one back is strict: a document from another process, or another
node, that is not what this module writes raises :class:`WireError` naming
the first thing wrong, never a half-read snapshot whose missing cards would
look free.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Callable, Optional, TypeVar

from tpnode_tui.model.checks import FINDINGS, OUTCOMES, CardCheck, CommandRun, Finding
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.model.jobs import (
    FENCE_MECHANISMS,
    DeviceFence,
    JobOutput,
    JobState,
    Launched,
    QueuedLaunch,
    ShellEntry,
    SliceRef,
)
from tpnode_tui.model.occupancy import GpuOccupancy, SliceState
from tpnode_tui.model.snapshot import NodeSnapshot, Sample
from tpnode_tui.model.states import CARD_STATES, SLICE_STATES
from tpnode_tui.model.topology import PCIE_PATHS, Link, Topology
from tpnode_tui.model.views import BELONGS, DRAIN_SOURCES, CardView, Drain, Evicted, EvictReport, HolderInfo, SliceView
from tpnode_tui.text.printable import printable

T = TypeVar("T")
S = TypeVar("S", bound=str)

#: bumped when a key changes meaning; readers refuse documents newer than they know
WIRE_VERSION = 1


class WireError(TpnodeError):
    """A snapshot document that cannot be understood."""


def snapshot_to_json(snap: NodeSnapshot) -> dict[str, Any]:
    occ = snap.occupancy
    return {
        "version": WIRE_VERSION,
        "taken_at": snap.taken_at,
        "host": snap.host,
        "series": snap.series,
        "probe": snap.probe.source,
        "probe_problem": snap.probe.problem,
        "probe_count": snap.probe.count,
        "topology": None if snap.probe.topology is None else topology_to_json(snap.probe.topology),
        "topology_unknowable": snap.probe.topology_unknowable,
        "runtime": snap.runtime,
        "runtime_kind": snap.runtime_kind,
        "allow_unverified": snap.allow_unverified,
        "mem_busy_mib": snap.mem_busy_mib,
        "lock": snap.lock,
        "lock_state": snap.lock_state,
        "total": occ.total,
        "free": occ.free,
        "by_job": {str(k): v for k, v in sorted(occ.by_job.items())},
        "reserved": sorted(occ.reserved),
        "external": sorted(occ.external),
        "unhealthy": {str(k): v for k, v in sorted(occ.unhealthy.items())},
        "drained": {str(k): v for k, v in sorted(occ.drained.items())},
        "mig": {str(k): v for k, v in sorted(occ.mig.items())},
        "external_probe_ok": occ.external_probe_ok,
        "explain": snap.explain,
        "cards": [_card_json(c) for c in snap.cards],
        "jobs": [_job_json(j) for j in snap.jobs],
        "queue": [queued_to_json(q) for q in snap.queue],
        "intruder_cards": list(snap.intruder_cards),
        "idle": dict(sorted(snap.idle.items())),
        "releases": dict(sorted(snap.releases.items())),
        "idle_held": dict(sorted(snap.idle_held.items())),
        "xid_watch": snap.xid_watch,
        "xid_problem": snap.xid_problem,
        "node_fence": fence_to_json(snap.node_fence),
        "queue_problem": snap.queue_problem,
        "return_after_check": snap.return_after_check,
        "boot": snap.boot,
    }


def fence_to_json(f: DeviceFence, prefix: str = "") -> dict[str, Any]:
    """``{"fenced": true, "mechanism": ...}`` or ``{"fenced": false, "problem": ...}``:
    the other key is left out, so a reader never sees a fenced job with a reason
    it is not, nor an unfenced one without a reason. ``prefix`` names the two
    among a job's other keys ("fence_mechanism", "fence_problem")."""
    if f.fenced:
        return {"fenced": True, f"{prefix}mechanism": f.mechanism}
    return {"fenced": False, f"{prefix}problem": f.problem}


def _fence(r: Reader, prefix: str = "") -> DeviceFence:
    """What :func:`fence_to_json` wrote, strictly: a fenced one names a known
    mechanism and no problem, an unfenced one a problem and no mechanism. A
    document from before the fence says nothing, and reads as not said."""
    mechanism, problem = f"{prefix}mechanism", f"{prefix}problem"
    if "fenced" not in r.doc:
        if mechanism in r.doc or problem in r.doc:
            raise WireError(f"{r.where} has {mechanism!r} or {problem!r} but no 'fenced'")
        return DeviceFence()
    if r.flag("fenced"):
        if problem in r.doc:
            raise WireError(f"{r.where} is fenced, so it has no {problem!r}")
        return DeviceFence.by(r.choice(mechanism, tuple(FENCE_MECHANISMS)))
    if mechanism in r.doc:
        raise WireError(f"{r.where} is not fenced, so it has no {mechanism!r}")
    why = r.text(problem)
    if not why:
        raise WireError(f"{r.where}.{problem} is empty: a job that is not fenced says why")
    return DeviceFence.missing(why)


def topology_to_json(t: Topology) -> dict[str, Any]:
    """How the cards are linked: each kind of link once (``word`` as ``nvidia-smi
    topo -m`` writes it), then one row a card of kind numbers (0: not known, and
    the card itself; k: ``kinds[k - 1]``), and each card's NUMA node."""
    return {
        "kinds": [{"word": k.word, "nvlinks": k.nvlinks, "pcie": k.pcie} for k in t.kinds],
        "links": [list(t.matrix[a * t.count : (a + 1) * t.count]) for a in range(t.count)],
        "numa": list(t.numa),
    }


def _topology(r: Reader) -> Topology:
    kinds = []
    for k in r.each("kinds", lambda k: k.only("word", "nvlinks", "pcie")):
        pcie = k.opt_text("pcie")
        if pcie is not None and pcie not in PCIE_PATHS:
            raise WireError(f"{k.where}.pcie is {pcie!r}, not one of {', '.join(PCIE_PATHS)}")
        try:
            kinds.append(Link(nvlinks=k.whole("nvlinks"), pcie=pcie))
        except ValueError as e:
            raise WireError(f"{k.where}: {e}") from None
    rows = r.items("links")
    count = len(rows)
    flat = bytearray()
    for n, row in enumerate(rows):
        if (
            not isinstance(row, list)
            or len(row) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= len(kinds) for v in row)
        ):
            raise WireError(f"{r.where}.links[{n}] is not {count} kind numbers from 0 to {len(kinds)}")
        flat.extend(row)
    numa = r.items("numa")
    if len(numa) != count or not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in numa):
        raise WireError(f"{r.where}.numa is not one NUMA node (or null) for each of {count} cards")
    try:
        return Topology(count, tuple(kinds), bytes(flat), tuple(numa))
    except ValueError as e:
        raise WireError(f"{r.where}: {e}") from None


#: a card's facts written as they are (null for a card the probe did not report), in this order
_FACT_KEYS = (
    "name",
    "uuid",
    "pci_bus_id",
    "minor",
    "memory_used_mib",
    "memory_total_mib",
    "utilization_pct",
    "temperature_c",
    "power_w",
    "ecc_uncorrected_total",
)


def _card_json(c: CardView) -> dict[str, Any]:
    f = c.facts
    return {
        "index": c.index,
        "state": c.state,
        "run_id": c.run_id,
        "holders": [asdict(h) for h in c.holders],
        "reason": c.reason,
        "warning": c.warning,
        "intruders": list(c.intruders),
        "drain": None if c.drain is None else drain_to_json(c.drain),
        "check": None if c.check is None else check_to_json(c.check),
        **{key: getattr(f, key) if f else None for key in _FACT_KEYS},
        "processes": (None if f is None or f.processes is None else [asdict(p) for p in f.processes]),
        "health": list(f.health) if f else [],
        "reported": f is not None,
        # None: not read (a lost card), not False: a card whose MIG mode is
        # unknown must not read back as whole, and be handed out whole
        "mig_mode": f.mig_mode if f else None,
        "mig_pending": f.mig_pending if f else None,
        "slices": None if f is None or f.slices is None else [_slice_json(v) for v in c.slices],
    }


def _slice_json(v: SliceView) -> dict[str, Any]:
    f = v.facts
    return {
        "index": f.index,
        "profile": f.profile,
        "uuid": f.uuid,
        "gpu_instance_id": f.gpu_instance_id,
        "compute_instance_id": f.compute_instance_id,
        "memory_total_mib": f.memory_total_mib,
        "memory_used_mib": f.memory_used_mib,
        "processes": None if f.processes is None else [asdict(p) for p in f.processes],
        "state": v.state,
        "run_id": v.run_id,
        "holders": [asdict(h) for h in v.holders],
        "reason": v.reason,
        "warning": v.warning,
        "intruders": list(v.intruders),
    }


def _job_json(j: JobState) -> dict[str, Any]:
    return {
        "run_id": j.run_id,
        "name": j.name,
        "status": j.status,
        "gpus": list(j.gpus),
        "kind": j.kind,
        "owner": j.owner,
        "uid": j.uid,
        "image": j.image,
        "command": list(j.command),
        "started_at": j.started_at,
        "expires_at": j.expires_at,
        "exit_code": j.exit_code,
        "pid": j.pid,
        "lease_token": j.lease_token,
        "problems": list(j.problems),
        "note": j.note,
        "container_id": j.container_id,
        "cgroup": j.cgroup,
        "slices": [asdict(ref) for ref in j.slices],
        **fence_to_json(j.device_fence, prefix="fence_"),
        "shell_processes": j.shell_processes,
        "log": j.log,
    }


def drain_to_json(d: Drain) -> dict[str, Any]:
    return asdict(d)


def check_to_json(c: CardCheck) -> dict[str, Any]:
    """A card's check as ``check --json`` prints it, the agent answers it and ``status --json`` shows it."""
    return asdict(c) | {
        "findings": [asdict(f) for f in c.findings],
        "command": None if c.command is None else asdict(c.command) | {"tail": list(c.command.tail)},
    }


# ── reading back ────────────────────────────────────────────────────────────


class _Required:
    pass


#: the default of a key that must be present
_REQUIRED = _Required()


class Reader:
    """Typed access to one JSON object, naming the path of whatever is wrong."""

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise WireError(f"{where} is {_kind(doc)}, not an object")
        self.doc = doc
        self.where = where

    def only(self, *keys: str) -> Reader:
        """Refuse keys this reader does not know: a misspelt option silently
        ignored would do something other than what was asked."""
        unknown = sorted(set(self.doc) - set(keys))
        if unknown:
            raise WireError(f"{self.where} has unknown fields {unknown}; known: {', '.join(keys)}")
        return self

    def _get(self, key: str, ok: Callable[[Any], bool], want: str, default: Any) -> Any:
        if key not in self.doc:
            if default is _REQUIRED:
                raise WireError(f"{self.where} has no {key!r}")
            return default
        value = self.doc[key]
        if not ok(value):
            raise WireError(f"{self.where}.{key} is {_kind(value)}, not {want}")
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> str:
        return self._get(key, lambda v: isinstance(v, str), "a string", default)  # type: ignore[no-any-return]

    def opt_text(self, key: str) -> Optional[str]:
        return self._get(key, lambda v: v is None or isinstance(v, str), "a string or null", None)  # type: ignore[no-any-return]

    def whole(self, key: str, default: Any = _REQUIRED) -> int:
        return self._get(key, _is_int, "a whole number", default)  # type: ignore[no-any-return]

    def opt_whole(self, key: str) -> Optional[int]:
        return self._get(key, lambda v: v is None or _is_int(v), "a whole number or null", None)  # type: ignore[no-any-return]

    def number(self, key: str) -> float:
        return float(self._get(key, _is_number, "a number", _REQUIRED))

    def opt_number(self, key: str) -> Optional[float]:
        value = self._get(key, lambda v: v is None or _is_number(v), "a number or null", None)
        return None if value is None else float(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _REQUIRED) -> str:
        return self._get(key, lambda v: v in choices, f"one of {', '.join(choices)}", default)  # type: ignore[no-any-return]

    def state(self, key: str, states: tuple[S, ...]) -> S:
        """One of a typed enumeration's words (a card's or a slice's state), as
        that type. A word this code does not know is refused, named: read as
        another, a card of a newer node's state could be shown free."""
        value = self.text(key)
        for known in states:
            if value == known:
                return known
        shown = printable(value if len(value) <= 40 else value[:37] + "...")
        raise WireError(f"{self.where}.{key} is '{shown}', not one of {', '.join(states)}")

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        return self._get(key, lambda v: isinstance(v, bool), "true or false", default)  # type: ignore[no-any-return]

    def opt_flag(self, key: str) -> Optional[bool]:
        return self._get(key, lambda v: v is None or isinstance(v, bool), "true, false or null", None)  # type: ignore[no-any-return]

    def items(self, key: str, default: Any = _REQUIRED) -> list[Any]:
        return self._get(key, lambda v: isinstance(v, list), "a list", default)  # type: ignore[no-any-return]

    def opt_items(self, key: str) -> Optional[list[Any]]:
        return self._get(key, lambda v: v is None or isinstance(v, list), "a list or null", None)  # type: ignore[no-any-return]

    def obj(self, key: str) -> dict[str, Any]:
        return self._get(key, lambda v: isinstance(v, dict), "an object", _REQUIRED)  # type: ignore[no-any-return]

    def each(self, key: str, read: Callable[[Reader], T], default: Any = _REQUIRED) -> list[T]:
        return [read(Reader(item, f"{self.where}.{key}[{n}]")) for n, item in enumerate(self.items(key, default))]

    def texts(self, key: str) -> tuple[str, ...]:
        items = self.items(key, [])
        if not all(isinstance(i, str) for i in items):
            raise WireError(f"{self.where}.{key} is not a list of strings")
        return tuple(items)

    def wholes(self, key: str) -> tuple[int, ...]:
        items = self.items(key, [])
        if not all(_is_int(i) for i in items):
            raise WireError(f"{self.where}.{key} is not a list of whole numbers")
        return tuple(items)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """Python's json reads Infinity and NaN, and 1e400 as inf: none is a number
    any field of ours can hold, and each breaks the arithmetic and clocks after."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} (Infinity or NaN)"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def _int_keys(r: Reader, key: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for k, v in r.obj(key).items():
        if not k.isdigit() or len(k) > 6 or not isinstance(v, str):
            raise WireError(f"{r.where}.{key} maps {k!r} to {_kind(v)}; expected card index -> text")
        out[int(k)] = v
    return out


def _holder(r: Reader) -> HolderInfo:
    return HolderInfo(
        pid=r.whole("pid"),
        used_memory_mib=r.opt_whole("used_memory_mib"),
        visible=r.flag("visible", False),
        user=r.opt_text("user"),
        command=r.opt_text("command"),
        container=r.opt_text("container"),
        started_at=r.opt_number("started_at"),
        belongs=r.choice("belongs", BELONGS, "unknown"),
        uid=r.opt_whole("uid"),
        container_name=r.opt_text("container_name"),
        container_image=r.opt_text("container_image"),
        job_elsewhere=r.opt_text("job_elsewhere"),
    )


def _drain(r: Reader) -> Drain:
    return Drain(
        card=r.whole("card"),
        reason=r.text("reason"),
        by=r.text("by"),
        at=r.number("at"),
        source=r.choice("source", DRAIN_SOURCES, "operator"),
        xid=r.opt_whole("xid"),
        # written before checks: none of these was kept
        boot=r.opt_text("boot"),
        reboot=r.flag("reboot", False),
        ecc=r.opt_whole("ecc"),
        later_xid=r.opt_whole("later_xid"),
        later_xid_at=r.opt_number("later_xid_at"),
    )


def drain_from_json(doc: Any, where: str = "drain") -> Drain:
    return _drain(Reader(doc, where))


def _finding(r: Reader) -> Finding:
    return Finding(name=r.text("name"), outcome=r.choice("outcome", FINDINGS), words=r.text("words"))


def _command_run(r: Reader) -> CommandRun:
    return CommandRun(
        command=r.text("command"),
        exit_code=r.opt_whole("exit_code"),
        seconds=r.number("seconds"),
        tail=r.texts("tail"),
        timed_out=r.flag("timed_out", False),
        problem=r.opt_text("problem"),
    )


def check_from_json(doc: Any, where: str = "check") -> CardCheck:
    """The check :func:`check_to_json` wrote; WireError naming the first thing wrong."""
    r = Reader(doc, where).only("card", "uuid", "by", "began", "at", "boot", "outcome", "findings", "command", "effect")
    command = r.doc.get("command")
    return CardCheck(
        card=r.whole("card"),
        uuid=r.opt_text("uuid"),
        by=r.text("by"),
        began=r.number("began"),
        at=r.number("at"),
        boot=r.opt_text("boot"),
        outcome=r.choice("outcome", OUTCOMES),
        findings=tuple(r.each("findings", _finding)),
        command=None if command is None else _command_run(Reader(command, f"{where}.command")),
        effect=r.text("effect", ""),
    )


def _process(r: Reader) -> ProcessFacts:
    return ProcessFacts(pid=r.whole("pid"), used_memory_mib=r.opt_whole("used_memory_mib"))


def _processes(r: Reader) -> Optional[tuple[ProcessFacts, ...]]:
    return None if r.opt_items("processes") is None else tuple(r.each("processes", _process))


_SLICE_KEYS = (
    "index",
    "profile",
    "uuid",
    "gpu_instance_id",
    "compute_instance_id",
    "memory_total_mib",
    "memory_used_mib",
    "processes",
    "state",
    "run_id",
    "holders",
    "reason",
    "warning",
    "intruders",
)


def _slice(r: Reader) -> tuple[SliceFacts, Reader]:
    """A slice's facts, and its reader for the rest (its state, holder, reason)."""
    r.only(*_SLICE_KEYS)
    facts = SliceFacts(
        index=r.whole("index"),
        uuid=r.opt_text("uuid"),
        profile=r.opt_text("profile"),
        gpu_instance_id=r.opt_whole("gpu_instance_id"),
        compute_instance_id=r.opt_whole("compute_instance_id"),
        memory_total_mib=r.opt_whole("memory_total_mib"),
        memory_used_mib=r.opt_whole("memory_used_mib"),
        processes=_processes(r),
    )
    r.state("state", SLICE_STATES)
    return facts, r


def _opt_flag(r: Reader, key: str, default: Optional[bool]) -> Optional[bool]:
    if key not in r.doc:
        return default
    value = r.doc[key]
    if value is not None and not isinstance(value, bool):
        raise WireError(f"{r.where}.{key} is {_kind(value)}, not true, false or null")
    return value


def _card_slices(r: Reader) -> Optional[list[tuple[SliceFacts, Reader]]]:
    """A card's slices as written: None when they could not be listed; none
    from a document written before slices (a card read whole then)."""
    if "slices" in r.doc and r.doc["slices"] is None:
        return None
    return r.each("slices", _slice, [])


def _facts(r: Reader, slices: Optional[list[tuple[SliceFacts, Reader]]]) -> Optional[CardFacts]:
    if not r.flag("reported", True):
        return None
    processes = r.opt_items("processes")
    return CardFacts(
        index=r.whole("index"),
        uuid=r.opt_text("uuid"),
        name=r.opt_text("name"),
        pci_bus_id=r.opt_text("pci_bus_id"),
        minor=r.opt_whole("minor"),
        memory_total_mib=r.opt_whole("memory_total_mib"),
        memory_used_mib=r.opt_whole("memory_used_mib"),
        utilization_pct=r.opt_whole("utilization_pct"),
        temperature_c=r.opt_whole("temperature_c"),
        power_w=r.opt_number("power_w"),
        ecc_uncorrected_total=r.opt_whole("ecc_uncorrected_total"),
        processes=None if processes is None else tuple(r.each("processes", _process)),
        health=r.texts("health"),
        # written before MIG: a card nobody said is split is whole
        mig_mode=_opt_flag(r, "mig_mode", False),
        mig_pending=_opt_flag(r, "mig_pending", None),
        slices=None if slices is None else tuple(f for f, _ in slices),
    )


def _job(r: Reader) -> JobState:
    return JobState(
        name=r.text("name"),
        run_id=r.text("run_id"),
        gpus=r.wholes("gpus"),
        status=r.text("status"),
        kind=r.text("kind", "job"),
        owner=r.text("owner", ""),
        uid=r.opt_whole("uid"),
        image=r.opt_text("image"),
        command=r.texts("command"),
        started_at=r.opt_number("started_at"),
        expires_at=r.opt_number("expires_at"),
        exit_code=r.opt_whole("exit_code"),
        pid=r.opt_whole("pid"),
        lease_token=_lease_token(r),
        problems=r.texts("problems"),
        note=r.text("note", ""),
        container_id=r.opt_text("container_id"),
        cgroup=r.opt_text("cgroup"),
        slices=tuple(r.each("slices", _slice_ref, [])),
        device_fence=_fence(r, prefix="fence_"),
        shell_processes=r.whole("shell_processes", 0),
        log=r.text("log", ""),
    )


def _lease_token(r: Reader) -> Optional[int]:
    """A job's lease token; an agent from before it was called so sends it as "fence"."""
    return r.opt_whole("lease_token" if "lease_token" in r.doc else "fence")


def _slice_ref(r: Reader) -> SliceRef:
    r.only("card", "uuid", "profile")
    return SliceRef(card=r.whole("card"), uuid=r.text("uuid"), profile=r.text("profile", ""))


def _queued(r: Reader) -> QueuedLaunch:
    return QueuedLaunch(
        run_id=r.text("run_id"),
        cards=r.whole("cards"),
        owner=r.text("owner", ""),
        queued_at=r.number("queued_at"),
        kind=r.text("kind", "job"),
        command=r.texts("command"),
        image=r.opt_text("image"),
        uid=r.opt_whole("uid"),
        state=r.text("state", "queued"),
        waiting_for=r.opt_text("waiting_for"),
        slice=r.opt_text("slice"),
        placement=r.opt_text("placement"),
    )


def snapshot_from_json(doc: Any, where: str = "snapshot") -> NodeSnapshot:
    """The snapshot :func:`snapshot_to_json` wrote; WireError if ``doc`` is not one."""
    r = Reader(doc, where)
    version = r.whole("version")
    if version > WIRE_VERSION:
        raise WireError(f"{where} has version {version}, newer than this tpnode-tui reads ({WIRE_VERSION}); upgrade it")
    total = r.whole("total")
    if not 0 <= total <= 65536:
        raise WireError(f"{where}.total is {total}, not a card count")
    jobs = tuple(r.each("jobs", _job))
    cards_raw = r.each("cards", lambda c: c)
    slices_raw = [_card_slices(c) for c in cards_raw]
    facts = [_facts(c, sl) for c, sl in zip(cards_raw, slices_raw)]
    reading = ProbeReading(
        source=r.text("probe"),
        cards=tuple(f for f in facts if f is not None),
        count=r.opt_whole("probe_count"),
        external_probe_ok=r.flag("external_probe_ok"),
        problem=r.opt_text("probe_problem"),
        topology=None if r.doc.get("topology") is None else _topology(Reader(r.doc["topology"], f"{where}.topology")),
        topology_unknowable=r.opt_text("topology_unknowable"),
    )
    live = {j.key: j for j in jobs if j.live}
    states: list[SliceState] = []
    views = [_card_view(c, f, sl, live, states) for c, f, sl in zip(cards_raw, facts, slices_raw)]
    occupancy = GpuOccupancy(
        total=total,
        by_job=_int_keys(r, "by_job"),
        reserved=frozenset(r.wholes("reserved")) if "reserved" in r.doc else frozenset(),
        external=frozenset(r.wholes("external")),
        unhealthy=_int_keys(r, "unhealthy"),
        external_probe_ok=r.flag("external_probe_ok"),
        drained=_int_keys(r, "drained") if "drained" in r.doc else {},
        mig=_int_keys(r, "mig") if "mig" in r.doc else {},
        slices=tuple(states),
    )
    return NodeSnapshot(
        taken_at=r.number("taken_at"),
        host=r.text("host"),
        occupancy=occupancy,
        cards=tuple(views),
        jobs=jobs,
        probe=reading,
        series=r.text("series", ""),
        runtime=r.text("runtime", ""),
        runtime_kind=r.text("runtime_kind", ""),
        allow_unverified=r.flag("allow_unverified", False),
        mem_busy_mib=r.whole("mem_busy_mib", 512),
        lock=r.text("lock", ""),
        lock_state=r.opt_text("lock_state"),
        explain=r.text("explain", ""),
        queue=tuple(r.each("queue", _queued, [])),
        idle=_run_times(r, "idle"),
        releases=_run_times(r, "releases"),
        idle_held=_run_times(r, "idle_held"),
        xid_watch=r.text("xid_watch", ""),
        xid_problem=r.opt_text("xid_problem"),
        node_fence=_node_fence(r),
        queue_problem=r.opt_text("queue_problem"),
        return_after_check=r.opt_flag("return_after_check"),  # an older agent does not say
        boot=r.opt_text("boot"),
    )


def _card_view(
    c: Reader, f: Optional[CardFacts], sl: Any, live: dict[str, JobState], states: list[SliceState]
) -> CardView:
    """One card's view, its slices' states added to ``states`` (the occupancy's)."""
    run_id = c.opt_text("run_id")
    parts = []
    for sf, sr in (sl or []) if f is not None else []:
        slice_run = sr.opt_text("run_id")
        parts.append(
            SliceView(
                card=c.whole("index"),
                facts=sf,
                state=sr.state("state", SLICE_STATES),
                run_id=slice_run,
                job=live.get(slice_run) if slice_run else None,
                holders=tuple(sr.each("holders", _holder, [])),
                reason=sr.opt_text("reason"),
                warning=sr.opt_text("warning"),
            )
        )
        states.append(
            SliceState(
                card=c.whole("index"),
                index=sf.index,
                state=sr.state("state", SLICE_STATES),
                uuid=sf.uuid,
                profile=sf.profile,
                gpu_instance_id=sf.gpu_instance_id,
                run_id=slice_run,
                reason=sr.opt_text("reason"),
            )
        )
    return CardView(
        index=c.whole("index"),
        state=c.state("state", CARD_STATES),
        facts=f,
        run_id=run_id,
        job=live.get(run_id) if run_id else None,
        holders=tuple(c.each("holders", _holder, [])),
        reason=c.opt_text("reason"),
        warning=c.opt_text("warning"),
        drain=None if c.doc.get("drain") is None else _drain(Reader(c.doc["drain"], f"{c.where}.drain")),
        slices=tuple(parts),
        check=None if c.doc.get("check") is None else check_from_json(c.doc["check"], f"{c.where}.check"),
    )


def _node_fence(r: Reader) -> DeviceFence:
    """Whether the node fences its jobs; not said by a document from before the fence."""
    if "node_fence" not in r.doc:
        return DeviceFence()
    return _fence(Reader(r.doc["node_fence"], f"{r.where}.node_fence"))


def _run_times(r: Reader, key: str) -> dict[str, float]:
    """A map of run id -> unix seconds (``idle``, ``releases``, ``idle_held``); empty where
    an older node did not write it."""
    doc = r.doc.get(key, {})
    if not isinstance(doc, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in doc.items()):
        raise WireError(f"{r.where}.{key} is not an object of run id -> unix seconds")
    return {k: float(v) for k, v in doc.items()}


# ── answers to actions ─────────────────────────────────────────────────────


def job_to_json(job: JobState) -> dict[str, Any]:
    return _job_json(job)


def job_from_json(doc: Any, where: str = "job") -> JobState:
    return _job(Reader(doc, where))


def queued_to_json(q: QueuedLaunch) -> dict[str, Any]:
    return asdict(q) | {"command": list(q.command)}


def queued_from_json(doc: Any, where: str = "queued launch") -> QueuedLaunch:
    return _queued(Reader(doc, where))


def shell_to_json(entry: ShellEntry) -> dict[str, Any]:
    """What the agent answers ``shell``: the exports, and whether the caller is fenced."""
    return {
        "run_id": entry.run_id,
        "env": [[key, value] for key, value in entry.env],
        "cgroup": entry.cgroup,
        "gpus": list(entry.gpus),
        "slices": [asdict(ref) for ref in entry.slices],
        **fence_to_json(entry.device_fence),
    }


def _pair(item: Any, where: str) -> tuple[str, str]:
    if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)):
        raise WireError(f"{where} is not a name and a value")
    return item[0], item[1]


def shell_from_json(doc: Any, where: str = "shell") -> ShellEntry:
    r = Reader(doc, where)
    return ShellEntry(
        run_id=r.text("run_id"),
        env=tuple(_pair(item, f"{where}.env[{n}]") for n, item in enumerate(r.items("env"))),
        device_fence=_fence(r),
        cgroup=r.text("cgroup", ""),
        gpus=r.wholes("gpus"),
        slices=tuple(r.each("slices", _slice_ref)),
    )


def output_to_json(page: JobOutput) -> dict[str, Any]:
    """A page of a job's output as the agent answers it: its text as the log holds
    it (made printable only where it reaches a terminal)."""
    return asdict(page)


def output_from_json(doc: Any, where: str = "answer") -> JobOutput:
    r = Reader(doc, where)
    return JobOutput(
        text=r.text("text"),
        after=r.text("after"),
        more=r.flag("more", False),
        ended=r.flag("ended", False),
        log=r.text("log", ""),
    )


def launched_to_json(result: Launched) -> dict[str, Any]:
    """What ``launch --json`` and ``reserve --json`` print, and the agent answers."""
    return {
        "run_id": result.job.run_id,
        "name": result.job.name,
        "gpus": list(result.gpus),
        "existing": result.existing,
        "expires_at": result.job.expires_at,
        "warning": result.warning,
        "job": _job_json(result.job),
        "slices": [asdict(ref) for ref in result.slices],
    }


def launched_from_json(doc: Any, where: str = "launch") -> Launched:
    r = Reader(doc, where)
    return Launched(
        gpus=r.wholes("gpus"),
        job=_job(Reader(r.obj("job"), f"{where}.job")),
        existing=r.flag("existing", False),
        warning=r.opt_text("warning"),
        slices=tuple(r.each("slices", _slice_ref, [])),
    )


# ── triage ────────────────────────────────────────────────────────────────────


def evict_to_json(report: EvictReport) -> dict[str, Any]:
    return asdict(report) | {"processes": [asdict(e) for e in report.processes]}


def _evicted(r: Reader) -> Evicted:
    return Evicted(
        card=r.whole("card"),
        pid=r.whole("pid"),
        user=r.opt_text("user"),
        uid=r.opt_whole("uid"),
        command=r.opt_text("command"),
        belongs=r.choice("belongs", BELONGS),
        used_memory_mib=r.opt_whole("used_memory_mib"),
        outcome=r.text("outcome"),
        fate=r.text("fate"),
        started_at=r.opt_number("started_at"),
    )


def evict_from_json(doc: Any, where: str = "evict") -> EvictReport:
    r = Reader(doc, where)
    return EvictReport(
        card=r.whole("card"),
        dry_run=r.flag("dry_run"),
        kill=r.flag("kill"),
        grace_s=r.number("grace_s"),
        processes=tuple(r.each("processes", _evicted)),
    )


def history_to_json(history: dict[int, list[Sample]]) -> dict[str, Any]:
    """{"cards": {"3": [{"at", "seconds", "utilization_pct", ...}, ...]}}."""
    return {"cards": {str(card): [asdict(s) for s in samples] for card, samples in history.items()}}


def _sample(r: Reader) -> Sample:
    return Sample(
        at=r.number("at"),
        seconds=r.number("seconds"),
        utilization_pct=r.opt_number("utilization_pct"),
        memory_used_mib=r.opt_number("memory_used_mib"),
        power_w=r.opt_number("power_w"),
        temperature_c=r.opt_number("temperature_c"),
    )


def history_from_json(doc: Any, where: str = "history") -> dict[int, list[Sample]]:
    r = Reader(doc, where)
    out: dict[int, list[Sample]] = {}
    for key, samples in r.obj("cards").items():
        if not key.isdigit() or len(key) > 6:
            raise WireError(f"{where}.cards has {key!r}, not a card index")
        out[int(key)] = Reader({"s": samples}, f"{where}.cards.{key}").each("s", _sample)
    return out


def event_from_json(doc: Any, where: str = "event") -> dict[str, Any]:
    """One entry of the node's log as the agent sent it: an object with at least
    a time, a kind and a message; everything else is kept as it came."""
    r = Reader(doc, where)
    r.number("time")
    r.text("kind")
    r.text("message")
    return dict(r.doc)
