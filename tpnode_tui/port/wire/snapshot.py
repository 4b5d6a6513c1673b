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

from dataclasses import asdict
from typing import Any, Optional

from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.model.jobs import DeviceFence, JobState
from tpnode_tui.model.occupancy import GpuOccupancy, SliceState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.states import CARD_STATES, SLICE_STATES
from tpnode_tui.model.topology import PCIE_PATHS, Link, Topology
from tpnode_tui.model.views import BELONGS, CardView, HolderInfo, SliceView
from tpnode_tui.port.wire.checks import check_from_json, check_to_json
from tpnode_tui.port.wire.drains import drain_to_json, read_drain
from tpnode_tui.port.wire.jobs import fence_to_json, job_to_json, queued_to_json, read_fence, read_job, read_queued
from tpnode_tui.port.wire.reader import Reader, WireError, is_number, json_kind

#: bumped when a key changes meaning; readers refuse documents newer than they know
WIRE_VERSION = 1


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
        "jobs": [job_to_json(j) for j in snap.jobs],
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


def _int_keys(r: Reader, key: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for k, v in r.obj(key).items():
        if not k.isdigit() or len(k) > 6 or not isinstance(v, str):
            raise WireError(f"{r.where}.{key} maps {k!r} to {json_kind(v)}; expected card index -> text")
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
        raise WireError(f"{r.where}.{key} is {json_kind(value)}, not true, false or null")
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


def snapshot_from_json(doc: Any, where: str = "snapshot") -> NodeSnapshot:
    """The snapshot :func:`snapshot_to_json` wrote; WireError if ``doc`` is not one."""
    r = Reader(doc, where)
    version = r.whole("version")
    if version > WIRE_VERSION:
        raise WireError(f"{where} has version {version}, newer than this tpnode-tui reads ({WIRE_VERSION}); upgrade it")
    total = r.whole("total")
    if not 0 <= total <= 65536:
        raise WireError(f"{where}.total is {total}, not a card count")
    jobs = tuple(r.each("jobs", read_job))
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
        queue=tuple(r.each("queue", read_queued, [])),
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
        drain=None if c.doc.get("drain") is None else read_drain(Reader(c.doc["drain"], f"{c.where}.drain")),
        slices=tuple(parts),
        check=None if c.doc.get("check") is None else check_from_json(c.doc["check"], f"{c.where}.check"),
    )


def _node_fence(r: Reader) -> DeviceFence:
    """Whether the node fences its jobs; not said by a document from before the fence."""
    if "node_fence" not in r.doc:
        return DeviceFence()
    return read_fence(Reader(r.doc["node_fence"], f"{r.where}.node_fence"))


def _run_times(r: Reader, key: str) -> dict[str, float]:
    """A map of run id -> unix seconds (``idle``, ``releases``, ``idle_held``); empty where
    an older node did not write it."""
    doc = r.doc.get(key, {})
    if not isinstance(doc, dict) or not all(isinstance(k, str) and is_number(v) for k, v in doc.items()):
        raise WireError(f"{r.where}.{key} is not an object of run id -> unix seconds")
    return {k: float(v) for k, v in doc.items()}
