"""The simulated probe: a node described in a JSON file, for the demo, tests and an agent without a GPU.

The file is read again on every read, so the node changes while it is served
by rewriting it; a missing or malformed file gives a blind reading naming the
file, never a traceback or a free node. Every key the file may hold, and what
it stands for: docs/simulated.md, "Every key".
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from tpnode_tui.core.xid import recovery_words
from tpnode_tui.model.checks import CheckFacts
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.probes import health, mig
from tpnode_tui.probes.base import blind_reading
from tpnode_tui.probes.wiring import scene_topology, with_topology

SOURCE = "simulated"
#: a plain 4-card node for an agent on a machine without a GPU (``tpnode-tui agent --simulated``)
SAMPLE = Path(__file__).with_name("sample-node.json")

_SLOWDOWN_CAUSES = ("thermal", "power brake")
#: the highest device minor a card's file can have (254 and 255 are the driver's control files)
_MAX_CARD_MINOR = 253


class _BadScene(Exception):
    """What is wrong with the file, in plain words."""


def _number(raw: dict[str, Any], key: str, where: str, default: Any, kind: type = int) -> Any:
    if key not in raw:
        return default
    value = raw[key]
    if value is None:
        return None
    ok = isinstance(value, (int, float)) if kind is float else isinstance(value, int)
    if isinstance(value, bool) or not ok or value < 0:
        noun = "number" if kind is float else "whole number"
        raise _BadScene(f'{where}: "{key}" must be a {noun} of 0 or more, not {json.dumps(value)}')
    return value


def _text(raw: dict[str, Any], key: str, where: str, default: Optional[str]) -> Optional[str]:
    value = raw.get(key, default)
    if value is not None and not isinstance(value, str):
        raise _BadScene(f'{where}: "{key}" must be text, not {json.dumps(value)}')
    return value


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise _BadScene(f'{where}: "{key}" must be true or false, not {json.dumps(value)}')
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadScene(f"{what} must be a JSON object, not {json.dumps(value)}")
    return value


def _maybe_flag(raw: dict[str, Any], key: str, where: str) -> Optional[bool]:
    value = raw.get(key, False)
    if value is not None and not isinstance(value, bool):
        raise _BadScene(f'{where}: "{key}" must be true, false or null, not {json.dumps(value)}')
    return value


def _processes(raw: dict[str, Any], where: str) -> Optional[tuple[ProcessFacts, ...]]:
    value = raw.get("processes", [])
    if value is None:
        return None
    if not isinstance(value, list):
        raise _BadScene(f'{where}: "processes" must be a list, not {json.dumps(value)}')
    procs = []
    for n, item in enumerate(value):
        what = f"{where}, process {n}"
        proc = _object(item, what)
        if "pid" not in proc or proc["pid"] is None:
            raise _BadScene(f'{what}: "pid" is missing')
        procs.append(
            ProcessFacts(
                pid=_number(proc, "pid", what, None),
                used_memory_mib=_number(proc, "used_memory_mib", what, None),
            )
        )
    return tuple(procs)


def _health(raw: dict[str, Any], where: str) -> tuple[str, ...]:
    signals = _object(raw.get("health", {}), f'{where}: "health"')
    reasons: list[str] = []
    if _flag(signals, "retired_pages_pending", where):
        reasons.append(health.RETIRED_PAGES_PENDING)
    ecc = _number(signals, "ecc_uncorrected_volatile", where, 0)
    if ecc:
        reasons.append(health.uncorrected_ecc(ecc))
    slowdown: Union[bool, str] = signals.get("hw_slowdown", False)
    if not isinstance(slowdown, bool) and slowdown not in _SLOWDOWN_CAUSES:
        raise _BadScene(
            f'{where}: "hw_slowdown" must be true, false, "thermal" or "power brake", not {json.dumps(slowdown)}'
        )
    if slowdown:
        reasons.append(health.hw_slowdown(thermal=slowdown == "thermal", power_brake=slowdown == "power brake"))
    if _flag(signals, "row_remap_pending", where):
        reasons.append(health.ROW_REMAP_PENDING)
    if _flag(signals, "row_remap_failure", where):
        reasons.append(health.ROW_REMAP_FAILED)
    action = recovery_words(_number(raw, "recovery_action", where, 0))
    if action is not None:
        reasons.append(health.recovery_needed(action))
    return tuple(reasons)


@dataclass(frozen=True)
class SimulatedXid:
    """One XID a simulated card reports."""

    card: int
    id: str
    xid: int
    pid: Optional[int] = None
    recovery_action: Optional[int] = None


def _xid_events(index: int, raw: dict[str, Any], where: str) -> list[SimulatedXid]:
    value = raw.get("xid_events", [])
    if not isinstance(value, list):
        raise _BadScene(f'{where}: "xid_events" must be a list, not {json.dumps(value)}')
    events = []
    for n, item in enumerate(value):
        what = f"{where}, XID event {n}"
        event = _object(item, what)
        event_id = _text(event, "id", what, None)
        if not event_id:
            raise _BadScene(f'{what}: "id" is missing (each event needs an id, so it is handled once)')
        xid = _number(event, "xid", what, None)
        if xid is None:
            raise _BadScene(f'{what}: "xid" is missing')
        events.append(
            SimulatedXid(
                index, event_id, xid, _number(event, "pid", what, None), _number(event, "recovery_action", what, None)
            )
        )
    return events


def xid_events(path: Path) -> list[SimulatedXid]:
    """Every XID event the file lists, in card order; ValueError naming what is wrong."""
    try:
        scene = _Scene(path)
    except _BadScene as e:
        raise ValueError(f"simulated node {path}: {e}") from None
    return scene.xid_events


def _slice(card: int, index: int, value: Any, blind: bool) -> SliceFacts:
    where = f"card {card}, slice {index}"
    raw = _object(value, where)
    return SliceFacts(
        index=index,
        uuid=_text(raw, "uuid", where, f"MIG-00000000-0000-5000-8000-{card:06d}{index:06d}"),
        profile=_text(raw, "profile", where, None),
        gpu_instance_id=_number(raw, "gpu_instance_id", where, None),
        compute_instance_id=_number(raw, "compute_instance_id", where, None),
        memory_total_mib=_number(raw, "memory_total_mib", where, None),
        memory_used_mib=None if blind else _number(raw, "memory_used_mib", where, 0),
        processes=None if blind else _processes(raw, where),
    )


def _slices(index: int, raw: dict[str, Any], mig_mode: Optional[bool], blind: bool) -> Optional[tuple[SliceFacts, ...]]:
    where = f"card {index}"
    if not mig_mode:
        if "slices" in raw:
            raise _BadScene(f'{where}: "slices" are listed, but the card is not in MIG mode ("mig": true)')
        return () if mig_mode is False else None
    value = raw.get("slices", [])
    if value is None:
        return None
    if not isinstance(value, list):
        raise _BadScene(f'{where}: "slices" must be a list, not {json.dumps(value)}')
    return tuple(_slice(index, n, item, blind) for n, item in enumerate(value))


def _minor(index: int, raw: dict[str, Any], where: str) -> Optional[int]:
    """The card's device minor: its index unless given (no card past 253 has one of its own)."""
    minor: Optional[int] = _number(raw, "minor", where, index if index <= _MAX_CARD_MINOR else None)
    if minor is not None and minor > _MAX_CARD_MINOR:
        raise _BadScene(f'{where}: "minor" must be a card\'s device minor (0 to {_MAX_CARD_MINOR}), not {minor}')
    return minor


def _default_uuid(index: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{index:012d}"


def _card(index: int, value: Any, blind: bool) -> CardFacts:
    where = f"card {index}"
    raw = _object(value, where)
    if _flag(raw, "lost", where):
        return CardFacts(index=index, processes=None, health=(health.GPU_LOST,), mig_mode=None, slices=None)
    mig_mode = _maybe_flag(raw, "mig", where)
    pending = _maybe_flag(raw, "mig_pending", where) if "mig_pending" in raw else mig_mode
    slices = _slices(index, raw, mig_mode, blind)
    processes = None if blind else _processes(raw, where)
    if slices is not None and mig_mode:
        processes = mig.card_processes(processes, slices)
    return CardFacts(
        index=index,
        uuid=_text(raw, "uuid", where, _default_uuid(index)),
        name=_text(raw, "name", where, "NVIDIA H200"),
        pci_bus_id=_text(raw, "pci_bus_id", where, None),
        minor=_minor(index, raw, where),
        memory_total_mib=_number(raw, "memory_total_mib", where, 143771),
        memory_used_mib=None if blind else _number(raw, "memory_used_mib", where, 0),
        utilization_pct=_number(raw, "utilization_pct", where, None if mig_mode else 0),
        temperature_c=_number(raw, "temperature_c", where, None),
        power_w=_number(raw, "power_w", where, None, float),
        processes=processes,
        health=_health(raw, where),
        ecc_uncorrected_total=_number(_object(raw.get("health", {}), where), "ecc_uncorrected_total", where, 0),
        mig_mode=mig_mode,
        mig_pending=None if mig_mode is None or pending is None or pending == mig_mode else pending,
        slices=slices,
    )


class _Scene:
    def __init__(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise _BadScene(f"cannot be read ({e.strerror or e})") from None
        except UnicodeDecodeError:
            raise _BadScene("is not UTF-8 text") from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise _BadScene(f"is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        top = _object(raw, "the file")
        cards = top.get("cards")
        if not isinstance(cards, list):
            raise _BadScene('must hold a "cards" list (one object per card)')
        self.blind = _flag(top, "blind", "the file")
        self.fail = _text(top, "fail", "the file", None)
        self.hang_s = _number(top, "hang_s", "the file", 0, float) or 0
        self.cards = tuple(_card(i, c, self.blind) for i, c in enumerate(cards))
        #: each card as the file writes it
        self.raw_cards: list[Any] = cards
        self.topology, self.topology_problem = scene_topology(top.get("topology"), len(self.cards))
        #: the file is the node: without a topology of its own, no poll will find one
        self.topology_unknowable: Optional[str] = None
        if self.topology is None:
            said = "has no" if top.get("topology") is None else "has no usable"
            self.topology_unknowable = f'the simulated node {path} {said} "topology"'
        self.xid_events = [e for i, c in enumerate(cards) for e in _xid_events(i, c, f"card {i}")]


def check_facts(path: Path, uuid: str) -> CheckFacts:
    """What a check's tier A reads of the card ``uuid`` of the simulated node: in
    the check's own process, which may be made to hang (``check_hang_s``)."""
    try:
        scene = _Scene(path)
        found = [(i, raw) for i, raw in enumerate(scene.raw_cards) if _text(raw, "uuid", "", _default_uuid(i)) == uuid]
        if not found:
            return CheckFacts(uuid, answered=False, problem=f"the driver finds no card by uuid {uuid}")
        index, raw = found[0]
        where = f"card {index}"
        hang = _number(raw, "check_hang_s", where, 0, float)
        if hang:
            time.sleep(hang)
        if scene.fail:
            return CheckFacts(uuid, answered=False, problem=scene.fail, reached=False)
        if _flag(raw, "lost", where):
            return CheckFacts(uuid, answered=False, problem=health.GPU_LOST)
        signals = _object(raw.get("health", {}), f'{where}: "health"')
        link = _object(raw.get("pcie", {}), f'{where}: "pcie"')
        facts = scene.cards[index]
        return CheckFacts(
            uuid,
            answered=True,
            ecc_total=_number(signals, "ecc_uncorrected_total", where, 0),
            ecc_volatile=_number(signals, "ecc_uncorrected_volatile", where, 0),
            remap_pending=_flag(signals, "row_remap_pending", where),
            remap_failed=_flag(signals, "row_remap_failure", where),
            recovery_action=_number(raw, "recovery_action", where, 0),
            link_gen=_number(link, "gen", where, 5),
            link_gen_max=_number(link, "max_gen", where, 5),
            link_width=_number(link, "width", where, 16),
            link_width_max=_number(link, "max_width", where, 16),
            pstate=_number(raw, "pstate", where, 0),
            processes=None if facts.processes is None else tuple(p.pid for p in facts.processes),
        )
    except _BadScene as e:
        return CheckFacts(uuid, answered=False, problem=f"simulated node {path}: {e}", reached=False)


class SimulatedProbe:
    """Reads the node described in ``path``, afresh each time."""

    source = SOURCE

    def __init__(self, path: Union[str, Path], timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s

    async def read(self) -> ProbeReading:
        try:
            scene = _Scene(self.path)
        except _BadScene as e:
            return blind_reading(SOURCE, f"simulated node {self.path}: {e}")
        if scene.hang_s:
            await asyncio.sleep(min(scene.hang_s, self.timeout_s))
            if scene.hang_s >= self.timeout_s:
                return blind_reading(SOURCE, f"the simulated driver did not answer within {self.timeout_s:g} s")
        if scene.fail:
            return blind_reading(SOURCE, scene.fail)
        if scene.blind:
            reading = ProbeReading(
                source=SOURCE,
                cards=scene.cards,
                count=len(scene.cards),
                external_probe_ok=False,
                problem=f'use from outside the platform cannot be probed ("blind": true in {self.path})',
            )
        else:
            reading = health.reading(SOURCE, scene.cards, [])
        return with_topology(reading, scene.topology, scene.topology_problem, scene.topology_unknowable)

    async def close(self) -> None:
        """Nothing is kept between reads."""
