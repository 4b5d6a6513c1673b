"""The snapshot document: what ``status --json``, the agent and the fleet all speak.

A dashboard fed by an agent must see exactly what an in-process allocator
would have shown it, so a snapshot written and read back is the same
snapshot; and a document that is not one is refused by name, never half-read.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.load import kill_process_jobs
from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.demo.stage import start_demo
from tpnode_tui.model.jobs import FENCE_NOT_SAID, DeviceFence, QueuedLaunch, ShellEntry, SliceRef
from tpnode_tui.port.wire.jobs import shell_from_json, shell_to_json
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.port.wire.snapshot import snapshot_from_json, snapshot_to_json


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
        queued = QueuedLaunch(
            run_id="later",
            cards=8,
            owner="ana",
            queued_at=snap.taken_at,
            command=("python", "train.py"),
            uid=5001,
            waiting_for="8 cards",
        )
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
    assert {
        "host",
        "series",
        "probe",
        "probe_problem",
        "runtime",
        "lock",
        "lock_state",
        "total",
        "free",
        "by_job",
        "external",
        "unhealthy",
        "external_probe_ok",
        "explain",
        "cards",
        "jobs",
    } <= set(doc)
    assert {
        "index",
        "state",
        "run_id",
        "holders",
        "reason",
        "warning",
        "name",
        "memory_used_mib",
        "memory_total_mib",
        "utilization_pct",
        "temperature_c",
        "power_w",
    } <= set(doc["cards"][0])
    assert {
        "run_id",
        "name",
        "status",
        "gpus",
        "kind",
        "owner",
        "image",
        "command",
        "started_at",
        "expires_at",
        "exit_code",
        "problems",
    } <= set(doc["jobs"][0])


def test_a_jobs_lease_token_travels_as_lease_token_and_an_older_agents_fence_is_read(demo_doc):
    """Before the lease token was called so an agent sent it as "fence": a client
    reads either, and a document written now has the new name only."""
    assert all(j.lease_token is not None for j in demo_doc.jobs)
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    assert [j["lease_token"] for j in doc["jobs"]] == [j.lease_token for j in demo_doc.jobs]
    assert not any("fence" in j for j in doc["jobs"])
    for job in doc["jobs"]:
        job["fence"] = job.pop("lease_token")
    assert snapshot_from_json(doc) == demo_doc


def test_what_a_client_needs_to_offer_actions_travels_with_the_snapshot(demo_doc):
    snap = replace(demo_doc, runtime_kind="docker", allow_unverified=True, mem_busy_mib=2048)
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert (doc["runtime_kind"], doc["allow_unverified"], doc["mem_busy_mib"]) == ("docker", True, 2048)
    back = snapshot_from_json(doc)
    assert (back.runtime_kind, back.allow_unverified, back.mem_busy_mib) == ("docker", True, 2048)
    assert demo_doc.runtime_kind == "process"


def test_what_the_node_says_of_cards_held_and_unused_travels_and_an_older_node_says_none(demo_doc):
    t = demo_doc.taken_at
    snap = replace(demo_doc, idle={"r": t - 3600}, releases={"r": t + 900}, idle_held={"j": t - 7200})
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert (doc["releases"], doc["idle_held"]) == ({"r": t + 900}, {"j": t - 7200})
    assert snapshot_from_json(doc) == snap
    for key in ("releases", "idle_held"):
        older = dict(doc)
        del older[key]
        assert getattr(snapshot_from_json(older), key) == {}
        with pytest.raises(WireError, match=f"snapshot.{key} is not an object of run id -> unix seconds"):
            snapshot_from_json(doc | {key: {"r": "soon"}})


def test_what_lifts_a_drain_here_travels_and_an_older_node_says_not_told(demo_doc):
    """Whether a passing check returns a card the node drained, and this boot: the
    words of a drain are true only with both; an older agent said neither."""
    for returns, boot in ((True, "boot-b"), (False, None), (None, None)):
        snap = replace(demo_doc, return_after_check=returns, boot=boot)
        doc = json.loads(json.dumps(snapshot_to_json(snap)))
        assert (doc["return_after_check"], doc["boot"]) == (returns, boot)
        assert snapshot_from_json(doc) == snap
    older = snapshot_to_json(demo_doc)
    del older["return_after_check"], older["boot"]
    back = snapshot_from_json(older)
    assert (back.return_after_check, back.boot) == (None, None)
    with pytest.raises(WireError, match="snapshot.return_after_check is a string, not true, false or null"):
        snapshot_from_json(older | {"return_after_check": "yes"})
    with pytest.raises(WireError, match="snapshot.boot is "):
        snapshot_from_json(older | {"boot": 7})


def test_a_cards_last_check_and_what_its_drain_keeps_travel_and_an_older_node_says_none(demo_doc):
    from tpnode_tui.model.checks import FAILED, NOT_MET, CardCheck, CommandRun, Finding
    from tpnode_tui.model.views import Drain

    check = CardCheck(
        2,
        "GPU-2",
        "root",
        10.0,
        12.5,
        "boot-a",
        FAILED,
        (Finding("pcie", NOT_MET, "PCIe link x8, below its maximum width x16"),),
        CommandRun("burn GPU-2", 1, 2.0, tail=("fault",)),
        "drained",
    )
    drain = Drain(2, "failed its check", "check", 12.5, "check", boot="boot-a", ecc=4, later_xid=13, later_xid_at=13.0)
    cards = list(demo_doc.cards)
    cards[2] = replace(cards[2], check=check, drain=drain)
    snap = replace(demo_doc, cards=tuple(cards))
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert doc["cards"][2]["check"]["outcome"] == "failed" and doc["cards"][2]["drain"]["source"] == "check"
    assert snapshot_from_json(doc) == snap
    older = copy.deepcopy(doc)
    del older["cards"][2]["check"]
    for key in ("boot", "reboot", "ecc", "later_xid", "later_xid_at"):
        del older["cards"][2]["drain"][key]
    back = snapshot_from_json(older).cards[2]
    assert back.check is None and back.drain == Drain(2, "failed its check", "check", 12.5, "check")
    with pytest.raises(WireError, match=r"snapshot.cards\[2\].check.outcome is"):
        snapshot_from_json(
            doc
            | {
                "cards": [
                    *doc["cards"][:2],
                    doc["cards"][2] | {"check": check_to_json_with(outcome="?")},
                    *doc["cards"][3:],
                ]
            }
        )


def check_to_json_with(**changed):
    from tpnode_tui.model.checks import PASSED, CardCheck
    from tpnode_tui.port.wire.checks import check_to_json

    return check_to_json(CardCheck(2, None, "root", 1.0, 2.0, None, PASSED, ())) | changed


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: d.pop("cards"), "has no 'cards'"),
        (lambda d: d.update(total="8"), "snapshot.total is a string, not a whole number"),
        (lambda d: d["cards"][2].update(holders=[{"pid": "x"}]), "snapshot.cards[2].holders[0].pid"),
        (lambda d: d["jobs"][0].update(gpus=[0, "1"]), "gpus is not a list of whole numbers"),
        (lambda d: d.update(version=99), "newer than this tpnode-tui reads"),
        (lambda d: d.update(by_job={"x": "j"}), "by_job maps 'x'"),
        (lambda d: d["cards"][1].update(state="hovering"), "snapshot.cards[1].state is 'hovering', not one of free,"),
        (lambda d: d["cards"][1].update(state="\x1b[2Jfree"), "snapshot.cards[1].state is '\\x1b[2Jfree', not one"),
        (lambda d: d["cards"][1].update(state=7), "snapshot.cards[1].state is a number, not a string"),
    ],
)
def test_a_damaged_document_is_refused_by_name(demo_doc, damage, says):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    damage(doc)
    with pytest.raises(WireError, match=re.escape(says)):
        snapshot_from_json(doc)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


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


# -- the fence -------------------------------------------------------------------


def _fenced_two_ways(snap):
    """The demo's first job fenced by cgroup v2, its second not, and the node fencing."""
    first, second, *rest = snap.jobs
    jobs = (
        replace(first, device_fence=DeviceFence.by("cgroup-v2")),
        replace(second, device_fence=DeviceFence.missing("cgroup v2: not root")),
        *rest,
    )
    return replace(snap, jobs=jobs, node_fence=DeviceFence.by("cgroup-v1"))


def test_each_job_says_whether_it_is_fenced_and_when_not_why_and_nothing_else(demo_doc):
    snap = _fenced_two_ways(demo_doc)
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    first, second = doc["jobs"][:2]
    assert (first["fenced"], first["fence_mechanism"]) == (True, "cgroup-v2") and "fence_problem" not in first
    assert (second["fenced"], second["fence_problem"]) == (False, "cgroup v2: not root")
    assert "fence_mechanism" not in second
    assert doc["node_fence"] == {"fenced": True, "mechanism": "cgroup-v1"}
    back = snapshot_from_json(doc)
    assert (back.jobs, back.node_fence) == (snap.jobs, snap.node_fence)
    assert back.jobs[0].device_fence.fenced and not back.jobs[1].device_fence.fenced


def test_a_document_from_before_the_fence_says_it_was_not_said(demo_doc):
    doc = json.loads(json.dumps(snapshot_to_json(_fenced_two_ways(demo_doc))))
    for job in doc["jobs"]:
        for key in ("fenced", "fence_mechanism", "fence_problem"):
            job.pop(key, None)
    del doc["node_fence"]
    back = snapshot_from_json(doc)
    assert {j.device_fence for j in back.jobs} == {DeviceFence()} and back.node_fence == DeviceFence()
    assert DeviceFence().problem == FENCE_NOT_SAID and not DeviceFence().fenced


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: d["jobs"][0].update(fence_problem="x"), "is fenced, so it has no 'fence_problem'"),
        (lambda d: d["jobs"][0].update(fence_mechanism="kvm"), "fence_mechanism is a string, not one of"),
        (lambda d: d["jobs"][0].update(fenced="yes"), "fenced is a string, not true or false"),
        (lambda d: d["jobs"][1].pop("fence_problem"), "has no 'fence_problem'"),
        (lambda d: d["jobs"][1].update(fence_problem=""), "is empty: a job that is not fenced says why"),
        (lambda d: d["jobs"][1].update(fence_mechanism="docker"), "is not fenced, so it has no 'fence_mechanism'"),
        (lambda d: d["jobs"][1].pop("fenced"), "has 'fence_mechanism' or 'fence_problem' but no 'fenced'"),
        (lambda d: d.update(node_fence={"fenced": False}), "snapshot.node_fence has no 'problem'"),
        (lambda d: d.update(node_fence=True), "snapshot.node_fence is true/false, not an object"),
    ],
)
def test_a_fence_said_both_ways_or_neither_is_refused_by_name(demo_doc, damage, says):
    doc = json.loads(json.dumps(snapshot_to_json(_fenced_two_ways(demo_doc))))
    damage(doc)
    with pytest.raises(WireError, match=re.escape(says)):
        snapshot_from_json(doc)


# -- MIG ---------------------------------------------------------------------------


def test_a_mig_card_its_slices_and_a_slice_job_travel_in_the_document(demo_doc):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    [mig] = [c for c in doc["cards"] if c["state"] == "mig"]
    assert (mig["mig_mode"], mig["mig_pending"]) == (True, None)
    assert doc["mig"] == {str(mig["index"]): "split into 5 MIG slices: see them"}
    assert [s["profile"] for s in mig["slices"]] == ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    assert set(mig["slices"][0]) == {
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
    }
    assert [s["state"] for s in mig["slices"]] == ["external", "shared", "free", "job", "free"]
    assert mig["slices"][3]["run_id"] == "demo-notebook"
    [job] = [j for j in doc["jobs"] if j["run_id"] == "demo-notebook"]
    assert job["gpus"] == [] and job["slices"] == [
        {"card": mig["index"], "uuid": mig["slices"][3]["uuid"], "profile": "1g.18gb"}
    ]
    assert all(c["slices"] == [] for c in doc["cards"] if c["state"] != "mig")
    back = snapshot_from_json(doc)
    assert back.cards[mig["index"]].slices[3].job.key == "demo-notebook"
    assert [s.state for s in back.occupancy.slices] == ["external", "shared", "free", "job", "free"]


def test_a_lost_cards_unknown_mig_mode_survives_the_wire(demo_doc):
    from tpnode_tui.model.facts import CardFacts

    cards = list(demo_doc.cards)
    lost = replace(
        cards[3],
        state="unhealthy",
        reason="GPU is lost",
        facts=CardFacts(index=3, processes=None, health=("GPU is lost",), mig_mode=None, slices=None),
    )
    facts = tuple(lost.facts if f.index == 3 else f for f in demo_doc.probe.cards)
    snap = replace(
        demo_doc, cards=tuple(cards[:3]) + (lost,) + tuple(cards[4:]), probe=replace(demo_doc.probe, cards=facts)
    )
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert (doc["cards"][3]["mig_mode"], doc["cards"][3]["slices"]) == (None, None)
    back = snapshot_from_json(doc)
    assert (back.cards[3].facts.mig_mode, back.cards[3].facts.slices) == (None, None)
    assert back == snap


def test_a_document_written_before_mig_reads_every_card_whole(demo_doc):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    doc.pop("mig")
    for card in doc["cards"]:
        if card["state"] != "mig":
            for key in ("mig_mode", "mig_pending", "slices"):
                card.pop(key)
    for job in doc["jobs"]:
        if not job["slices"]:
            job.pop("slices")
    back = snapshot_from_json(doc)
    assert back.occupancy.mig == {}
    assert all(
        c.facts.mig_mode is False and c.facts.slices == ()
        for c in back.cards
        if c.facts is not None and c.state != "mig"
    )


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda s: s.update(privileged=True), "has unknown fields ['privileged']"),
        (lambda s: s.update(index="3"), "index is a string, not a whole number"),
        (lambda s: s.pop("state"), "has no 'state'"),
        (lambda s: s.update(state="mig"), "state is 'mig', not one of free, job, reservation, external, shared"),
        (lambda s: s.update(processes=[{"pid": "x"}]), "processes[0].pid"),
    ],
)
def test_a_damaged_slice_is_refused_by_name(demo_doc, damage, says):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    [mig] = [c for c in doc["cards"] if c["state"] == "mig"]
    damage(mig["slices"][0])
    with pytest.raises(WireError, match=r"snapshot\.cards\[\d\]\.slices\[0\]" + ".*" + re.escape(says)):
        snapshot_from_json(doc)


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: d["cards"][1].update(mig_mode="yes"), "mig_mode is a string, not true, false or null"),
        (lambda d: d["jobs"][0].update(slices=[{"card": 0}]), "has no 'uuid'"),
        (lambda d: d["jobs"][0].update(slices=[{"card": 0, "uuid": "MIG-1", "gi": 2}]), "unknown fields ['gi']"),
    ],
)
def test_damaged_mig_facts_and_job_slices_are_refused_by_name(demo_doc, damage, says):
    doc = json.loads(json.dumps(snapshot_to_json(demo_doc)))
    damage(doc)
    with pytest.raises(WireError, match=re.escape(says)):
        snapshot_from_json(doc)


@pytest.fixture(scope="module")
def mig_doc(tmp_path_factory):
    """A node with an H200 split in five, a job on one slice, another's process on another."""
    import asyncio

    from helpers.services import write_scene
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.model.jobs import JobSpec

    root = tmp_path_factory.mktemp("mig")
    layout = [("1c.3g.71gb", 2, 0), ("2c.3g.71gb", 2, 1), ("2g.35gb", 3, 0), ("1g.18gb", 9, 0), ("1g.18gb", 10, 0)]
    slices = [
        {
            "profile": p,
            "uuid": f"MIG-0000000{n}-7c3d-5e8f-9a0b-1c2d3e4f5a6b",
            "gpu_instance_id": gi,
            "compute_instance_id": ci,
            "memory_total_mib": 16384,
            "memory_used_mib": 13,
        }
        for n, (p, gi, ci) in enumerate(layout)
    ]
    slices[0].update(memory_used_mib=20493, processes=[{"pid": 3999901, "used_memory_mib": 20480}])
    slices[1].update(memory_used_mib=20493)
    scene = write_scene(root / "node.json", [{"mig": True, "memory_used_mib": 30444, "slices": slices}, {}])

    async def take():
        allocator = GpuAllocator.from_settings(
            load_settings(
                {},
                probe_kind=f"simulated:{scene}",
                runtime_kind="process",
                state_dir=str(root / "state"),
                cards_count=0,
            )
        )
        try:
            await allocator.launch(JobSpec("nb", 1, ("sleep", "300"), owner="bob", slice="1g.18gb"))
            return await allocator.snapshot()
        finally:
            await allocator.close()
            kill_process_jobs(root / "state")

    return asyncio.run(take())


def test_a_mig_card_and_a_slice_job_read_back_as_themselves(mig_doc):
    card = mig_doc.cards[0]
    assert card.state == "mig" and [s.state for s in card.slices] == ["external", "shared", "free", "job", "free"]
    doc = json.loads(json.dumps(snapshot_to_json(mig_doc)))
    assert doc["cards"][0]["slices"][3]["run_id"] == "nb" and doc["jobs"][0]["slices"][0]["profile"] == "1g.18gb"
    assert snapshot_from_json(doc) == mig_doc


@pytest.mark.parametrize(
    "fence",
    [DeviceFence.by("cgroup-v2"), DeviceFence.missing("cgroup v2: cannot make a cgroup")],
    ids=["fenced", "not"],
)
def test_a_shells_answer_reads_back_as_itself(fence):
    """What the agent answers `shell` (the exports, and whether the caller is fenced) is what the CLI reads."""
    env = (("CUDA_VISIBLE_DEVICES", "0,1"), ("NVIDIA_VISIBLE_DEVICES", "2,3"))
    entry = ShellEntry("r-1", env, fence, "/cg/x", gpus=(2, 3))
    assert shell_from_json(json.loads(json.dumps(shell_to_json(entry)))) == entry
    sliced = ShellEntry("r-2", (), fence, "/cg/y", slices=(SliceRef(card=1, uuid="MIG-a", profile="1g.18gb"),))
    assert shell_from_json(json.loads(json.dumps(shell_to_json(sliced)))) == sliced
    assert (entry.holding, sliced.holding) == ("cards 2,3", "slice 1g.18gb of card 1")


@pytest.mark.parametrize(
    "damage, says",
    [
        ({"env": [["CUDA_VISIBLE_DEVICES"]]}, "shell.env[0] is not a name and a value"),
        ({"problem": "x"}, "is fenced, so it has no 'problem'"),
    ],
)
def test_a_shells_answer_that_cannot_be_read_is_refused_by_name(damage, says):
    doc = shell_to_json(ShellEntry("r-1", (), DeviceFence.by("cgroup-v2"))) | damage
    with pytest.raises(WireError, match=re.escape(says)):
        shell_from_json(doc)
