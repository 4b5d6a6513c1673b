"""The snapshot document: what ``status --json``, the agent and the fleet all speak.

A dashboard fed by an agent must see exactly what an in-process allocator
would have shown it, so a snapshot written and read back is the same
snapshot; and a document that is not one is refused by name, never half-read.
"""
from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from load_tools import kill_process_jobs
from tpnode_tui.allocator import GpuAllocator
from tpnode_tui.demo import start_demo
from tpnode_tui.model import QueuedLaunch
from tpnode_tui.wire import WireError, snapshot_from_json, snapshot_to_json


@pytest.fixture(scope="module")
def demo_doc(tmp_path_factory):
    """The demo node with its job and reservation: every card state, real holders (an intruder)."""
    import asyncio

    async def take():
        demo = start_demo(tmp_path_factory.mktemp("demo") / "demo")
        allocator = GpuAllocator.from_settings(demo.settings())
        try:
            for spec in demo.opening_jobs():
                launched = await allocator.launch(spec)
                if spec.kind == "reservation":  # as the dashboard's demo does: someone else's process on it
                    demo.intrude(launched.gpus[0])
            snap = await allocator.snapshot()
        finally:
            await allocator.close()
            kill_process_jobs(demo.state_dir)
            demo.close()
        queued = QueuedLaunch(run_id="later", cards=8, owner="ana", queued_at=snap.taken_at,
                              command=("python", "train.py"), uid=5001, waiting_for="8 cards")
        return replace(snap, queue=(queued,))

    return asyncio.run(take())


def test_a_snapshot_written_and_read_back_is_the_same_snapshot(demo_doc):
    snap = demo_doc
    assert {"job", "reservation", "external", "unhealthy", "free"} <= {c.state for c in snap.cards}
    assert any(h.visible and h.belongs == "intruder" for c in snap.cards for h in c.holders)
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert snapshot_from_json(doc) == snap


def test_the_document_keeps_every_key_status_json_always_had(demo_doc):
    doc = snapshot_to_json(demo_doc)
    assert {"host", "series", "probe", "probe_problem", "runtime", "lock", "lock_state", "total", "free",
            "by_job", "external", "unhealthy", "external_probe_ok", "explain", "cards", "jobs"} <= set(doc)
    assert {"index", "state", "run_id", "holders", "reason", "warning", "name", "memory_used_mib",
            "memory_total_mib", "utilization_pct", "temperature_c", "power_w"} <= set(doc["cards"][0])
    assert {"run_id", "name", "status", "gpus", "kind", "owner", "image", "command", "started_at",
            "expires_at", "exit_code", "problems"} <= set(doc["jobs"][0])


def test_what_a_client_needs_to_offer_actions_travels_with_the_snapshot(demo_doc):
    snap = replace(demo_doc, runtime_kind="docker", allow_unverified=True, mem_busy_mib=2048)
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert (doc["runtime_kind"], doc["allow_unverified"], doc["mem_busy_mib"]) == ("docker", True, 2048)
    back = snapshot_from_json(doc)
    assert (back.runtime_kind, back.allow_unverified, back.mem_busy_mib) == ("docker", True, 2048)
    assert demo_doc.runtime_kind == "process"


@pytest.mark.parametrize("damage, says", [
    (lambda d: d.pop("cards"), "has no 'cards'"),
    (lambda d: d.update(total="8"), "snapshot.total is a string, not a whole number"),
    (lambda d: d["cards"][2].update(holders=[{"pid": "x"}]), "snapshot.cards[2].holders[0].pid"),
    (lambda d: d["jobs"][0].update(gpus=[0, "1"]), "gpus is not a list of whole numbers"),
    (lambda d: d.update(version=99), "newer than this tpnode-tui reads"),
    (lambda d: d.update(by_job={"x": "j"}), "by_job maps 'x'"),
])
def test_a_damaged_document_is_refused_by_name(demo_doc, damage, says):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    damage(doc)
    with pytest.raises(WireError, match=says.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        snapshot_from_json(doc)


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=5), st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_is_a_wire_error_or_a_snapshot_never_a_crash(demo_doc, data):
    doc = copy.deepcopy(snapshot_to_json(demo_doc))
    for _ in range(data.draw(st.integers(1, 4))):
        target = doc
        path = data.draw(st.sampled_from(["", "cards", "jobs", "queue"]))
        if path and isinstance(target.get(path), list) and target[path]:
            target = data.draw(st.sampled_from(target[path]))
        if not isinstance(target, dict) or not target:
            continue
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            del target[key]
        else:
            target[key] = data.draw(_VALUES)
    try:
        snapshot_from_json(doc)
    except WireError:
        pass
