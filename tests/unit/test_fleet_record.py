"""The fleet's rules, on publications as agents write them and as anyone could write them.

No Redis here: what is decided from registrations and publications (up or
not, free or not, conflict, malformed) is decided by tpnode_tui.fleet.record,
and is shown on it directly, with a fixed clock. The same rules over a real
redis-server and real agents are in tests/system/test_fleet_agents.py.
"""

from __future__ import annotations

import json

import pytest

from helpers.fleet import T, job, node_snapshot, publication_bytes, publication_parts, registration_bytes, stored
from tpnode_tui.fleet import record
from tpnode_tui.port.wire.reader import WireError

PERIOD = 10.0


def read(
    regs: dict[str, bytes],
    docs: dict[str, bytes],
    now: float = T,
    remembered=None,
    decoder: record.Decoder | None = None,
) -> record.FleetPicture:
    decoder = decoder or record.Decoder()
    registrations = {i: record.decode_registration(i, raw) for i, raw in regs.items()}
    pubs, broken = {}, {}
    for instance, raw in docs.items():
        try:
            pubs[instance] = decoder.decode(instance, raw)
        except WireError as e:
            broken[instance] = str(e)
    return record.assemble(registrations, pubs, broken, now, remembered=remembered)


def one(name="gpu-01", snap=None, **kw) -> tuple[dict[str, bytes], dict[str, bytes]]:
    snap = snap if snap is not None else node_snapshot(host=name)
    return ({"i1": registration_bytes(name)}, {"i1": publication_bytes(name, "i1", snap, **kw)})


def test_a_node_that_publishes_is_up_with_its_cards_as_published():
    snap = node_snapshot(
        jobs=(job("train", (0, 1)), job("rsv", (3,), kind="reservation")), external=(2,), unhealthy=(5,), drained=(7,)
    )
    fleet = read(*one(snap=snap))
    node = fleet.nodes[0]
    assert (node.name, node.status, node.reachable, node.total) == ("gpu-01", "up", True, 8)
    assert [c.state for c in node.cards] == [
        "job",
        "job",
        "external",
        "reservation",
        "free",
        "unhealthy",
        "free",
        "drained",
    ]
    assert (node.free, node.count("unhealthy"), node.count("drained"), node.largest_free_window) == (2, 1, 1, 1)
    assert (fleet.up, fleet.down, fleet.free, fleet.total) == (1, 0, 2, 8)


def test_unverified_cards_are_not_counted_free():
    fleet = read(*one(snap=node_snapshot(blind=True)))
    assert {c.state for c in fleet.nodes[0].cards} == {"unverified"}
    assert fleet.free == 0 and fleet.nodes[0].largest_free_window == 0


def test_liveness_is_the_key_on_redis_s_clock_and_a_node_s_own_clock_is_only_said_to_be_off():
    """The key expires three periods after it was set, by Redis's clock; the time
    inside is the node's clock, and a node a minute slow is not gone."""
    regs, docs = one(published_at=T)
    assert read(regs, docs, now=T + 3 * PERIOD).nodes[0].problem is None
    slow = read(regs, docs, now=T + 3 * PERIOD + 60).nodes[0]
    assert (slow.status, slow.reachable, slow.free) == ("up", True, 8)
    assert slow.problem == "its clock is at least 1m00s behind this one's: the times it publishes are off"
    ahead = read(regs, docs, now=T - 120).nodes[0]
    assert ahead.status == "up" and ahead.problem.startswith("its clock is 2m00s ahead of this one's")
    gone = read(regs, {}, now=T + 1).nodes[0]  # the key expired
    assert (gone.status, gone.reachable, gone.free) == ("unreachable", False, 0)
    assert {c.state for c in gone.cards} == {"unknown"} and len(gone.cards) == 8


def test_an_expired_publication_leaves_the_node_unreachable_with_its_cards_unknown_never_free():
    regs = {"i1": registration_bytes("gpu-01", started_at=T - 600)}
    fleet = read(regs, {}, now=T)
    node = fleet.nodes[0]
    assert (node.status, node.free, node.total, node.count("free")) == ("unreachable", 0, 8, None)
    assert [c.state for c in node.cards] == ["unknown"] * 8
    assert (fleet.free, fleet.total, fleet.up, fleet.down) == (0, 8, 0, 1)
    # Only the registration's time is known: a time it was certainly alive, not when it went.
    assert (node.last_seen, node.seen_exactly) == (T - 600, False)


def test_a_reader_that_saw_the_last_publication_keeps_unreachable_since_exact():
    regs = {"i1": registration_bytes("gpu-01", started_at=T - 600)}
    node = read(regs, {}, now=T + 100, remembered={"gpu-01": T + 50}).nodes[0]
    assert (node.last_seen, node.seen_exactly) == (T + 50, True)


def test_a_cleanly_stopped_agent_says_when():
    regs = {"i1": registration_bytes("gpu-01", stopped_at=T - 5)}
    node = read(regs, {}, now=T).nodes[0]
    assert node.status == "unreachable" and "stopped at" in node.problem and node.last_seen == T - 5


def test_a_stopped_agent_is_unreachable_since_it_stopped_in_the_live_view_and_in_json_alike():
    regs = {"i1": registration_bytes("gpu-01", stopped_at=T - 5)}
    live = read(regs, {}, now=T, remembered={"gpu-01": T - 8}).nodes[0]  # the view saw its last publication
    once = read(regs, {}, now=T).nodes[0]  # fleet --json, which remembers nothing
    for node in (live, once):
        assert (node.last_seen, node.seen_exactly) == (T - 5, True)
        assert node.problem == f"its agent stopped at {record.clock(T - 5)}"


def test_two_agents_claiming_one_name_are_a_conflict_not_a_merge():
    regs = {
        "a": registration_bytes("gpu-01", host="host-a", pid=11),
        "b": registration_bytes("gpu-01", host="host-b", pid=22),
    }
    docs = {
        "a": publication_bytes("gpu-01", "a", node_snapshot(host="host-a")),
        "b": publication_bytes("gpu-01", "b", node_snapshot(host="host-b", external=(0, 1))),
    }
    fleet = read(regs, docs)
    assert len(fleet.nodes) == 1
    node = fleet.nodes[0]
    assert node.status == "conflict" and node.free == 0 and not node.reachable
    assert "2 agents publish as gpu-01" in node.problem
    assert "host-a (pid 11)" in node.problem and "host-b (pid 22)" in node.problem


def test_a_restarted_agent_supersedes_its_dead_instance():
    regs = {
        "old": registration_bytes("gpu-01", started_at=T - 900),
        "new": registration_bytes("gpu-01", started_at=T - 10),
    }
    docs = {"new": publication_bytes("gpu-01", "new", node_snapshot())}
    node = read(regs, docs).nodes[0]
    assert (node.status, node.free, node.instances) == ("up", 8, ("new",))


def test_an_agent_restarted_after_a_crash_is_no_conflict_with_the_key_its_predecessor_left():
    """A SIGKILLed agent's publication lives on for up to three periods."""
    regs = {
        "crashed": registration_bytes("gpu-01", started_at=T - 900, host="rack1-n3", pid=4101),
        "new": registration_bytes("gpu-01", started_at=T - 5, host="rack1-n3", pid=4190),
    }
    docs = {
        "crashed": publication_bytes("gpu-01", "crashed", node_snapshot(), published_at=T - 12),
        "new": publication_bytes("gpu-01", "new", node_snapshot(), published_at=T - 1),
    }
    node = read(regs, docs).nodes[0]
    assert (node.status, node.free, node.instances) == ("up", 8, ("new",))
    elsewhere = dict(regs, new=registration_bytes("gpu-01", started_at=T - 5, host="rack4-n9", pid=977))
    assert read(elsewhere, docs).nodes[0].status == "conflict", "another host claiming the name still is one"


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "is a list, not an object"),
        (json.dumps({"fleet": 1, "instance": "i1"}).encode(), "no snapshot line"),
        (json.dumps({"fleet": 1}).encode() + b"\nnull", "has no 'instance'"),
        (json.dumps({"fleet": 99, "instance": "i1"}).encode() + b"\nnull", "newer than this tpnode-tui reads"),
        (b"[" * 100_000, "nested too deeply"),  # the parser's recursion limit: refused, not raised through
    ],
)
def test_a_malformed_publication_marks_its_node_and_nothing_is_free(raw, says):
    fleet = read({"i1": registration_bytes("gpu-01")}, {"i1": raw})
    node = fleet.nodes[0]
    assert node.status == "malformed" and says in node.problem
    assert node.free == 0 and fleet.free == 0 and {c.state for c in node.cards} == {"unknown"}


def _doc(**changes) -> bytes:
    envelope, snapshot = publication_parts("gpu-01", "i1", node_snapshot())
    for path, value in changes.items():
        *parts, last = path.split(".")
        target = snapshot if parts and parts[0] == "snapshot" else envelope
        for p in parts[1:] if parts and parts[0] == "snapshot" else parts:
            target = target[int(p)] if p.isdigit() else target[p]
        target[last] = value
    return stored(envelope, snapshot)


@pytest.mark.parametrize(
    "raw, says",
    [
        (_doc(**{"snapshot.cards": "all free"}), "cards is a string, not a list"),
        (_doc(**{"snapshot.total": -1}), "not a card count"),
        (_doc(**{"snapshot.cards.0.state": 7}), "state is a number"),
        (_doc(**{"snapshot.cards.0.intruders": ["4242"]}), "intruders is not a list of pids"),
        (_doc(taken_at=None), "taken_at is null"),
        (stored(publication_parts("gpu-01", "i1", node_snapshot())[0], [1, 2]), "snapshot is not an object"),
        (_doc(period_s=0), "not a period"),
        (_doc(published_at="now"), "published_at is a string"),
        (_doc(published_at=1e300), "published_at is 1e+300, not a time"),
        (_doc(published_at=float("inf")), "published_at is inf (Infinity or NaN), not a number"),  # JSON Python reads
        (_doc(published_at=float("nan")), "published_at is nan (Infinity or NaN), not a number"),
        (_doc(node=""), "not a node name"),
        (_doc(instance="someone-else"), "not the instance it is stored under"),
        (_doc(node="gpu-99"), "registered as 'gpu-01'"),
    ],
)
def test_a_publication_is_read_strictly(raw, says):
    node = read({"i1": registration_bytes("gpu-01")}, {"i1": raw}).nodes[0]
    assert node.status == "malformed" and says in node.problem, node.problem
    assert node.free == 0


def test_a_registration_that_cannot_be_read_is_reported_not_shown():
    decoder = record.Decoder()
    with pytest.raises(WireError):
        record.decode_registration("x", b'{"fleet": 1, "node": 5}')
    with pytest.raises(WireError, match="nested too deeply"):
        record.decode_registration("x", b"[" * 100_000)
    stopped_never = json.loads(registration_bytes("gpu-01"))
    stopped_never["stopped_at"] = 1e300  # no clock can show it: refused, never a frame that fails
    with pytest.raises(WireError, match="stopped_at is 1e\\+300, not a time"):
        record.decode_registration("x", json.dumps(stopped_never).encode())
    assert record.clock(1e300) == "--:--:--"
    assert read({"i1": registration_bytes("gpu-01")}, {}, decoder=decoder).nodes[0].name == "gpu-01"


def test_a_stale_reading_is_published_as_such_and_nothing_on_it_is_free():
    regs, docs = one(error="cannot read the state file")
    node = read(regs, docs).nodes[0]
    assert (node.status, node.reachable, node.free) == ("stale", True, 0)
    assert "cannot read the state file" in node.problem and node.snapshot is not None


def test_intruders_are_read_from_the_cards_and_absent_means_none():
    snap = node_snapshot(jobs=(job("train", (0, 1)),))
    regs, docs = one(snap=snap, intruders={1: [777, 778]})
    node = read(regs, docs).nodes[0]
    assert node.intruder_cards == 1 and node.cards[1].intruders == (777, 778)
    assert read(*one(snap=snap)).nodes[0].intruder_cards == 0


def test_an_unchanged_picture_is_not_decoded_again_but_its_time_moves():
    decoder = record.Decoder()
    snap = node_snapshot()
    first = decoder.decode("i1", publication_bytes("gpu-01", "i1", snap, published_at=T))
    later = decoder.decode(
        "i1", publication_bytes("gpu-01", "i1", node_snapshot(taken_at=T + 1), published_at=T + 1, seq=2)
    )
    assert later.taken_at == T + 1 and later.published_at == T + 1
    assert later.snapshot.cards is first.snapshot.cards  # reused, not decoded again
    changed = decoder.decode("i1", publication_bytes("gpu-01", "i1", node_snapshot(external=(3,)), seq=3))
    assert changed.snapshot.cards[3].state == "external"


def test_the_largest_free_window_across_the_fleet():
    assert record.largest_window([0, 1, 2, 5, 6, 7, 8]) == 4
    assert record.largest_window([]) == 0
    regs = {"a": registration_bytes("gpu-01"), "b": registration_bytes("gpu-07")}
    docs = {
        "a": publication_bytes("gpu-01", "a", node_snapshot(jobs=(job("j", (1, 4)),))),
        "b": publication_bytes("gpu-07", "b", node_snapshot(jobs=(job("k", (0, 1, 2, 3)),), external=(5,))),
    }
    fleet = read(regs, docs)
    assert fleet.widest == ("gpu-01", 3)
    assert "gpu-01: 3 consecutive free cards" in record.summary_words(fleet)
    assert "2 nodes: 2 up, 0 down" in record.summary_words(fleet)


def test_fleet_json_has_the_documented_keys_and_counts_nothing_unknown_as_free():
    regs = {"a": registration_bytes("gpu-01"), "b": registration_bytes("gpu-02")}
    docs = {"a": publication_bytes("gpu-01", "a", node_snapshot(jobs=(job("j", (0,)),)))}
    doc = record.fleet_json(read(regs, docs))
    assert (doc["free"], doc["total"], doc["up"], doc["down"]) == (7, 16, 1, 1)
    up, down = doc["nodes"]
    assert {
        "name",
        "reachable",
        "last_seen",
        "series",
        "total",
        "free",
        "unhealthy",
        "drained",
        "intruders",
        "largest_free_window",
        "cards",
    } <= set(up)
    assert up["cards"][0] == {"index": 0, "state": "job"} and up["free"] == 7
    assert (down["reachable"], down["free"], down["unhealthy"], down["largest_free_window"]) == (False, 0, None, None)
    assert {c["state"] for c in down["cards"]} == {"unknown"}
    json.dumps(doc)


def test_redis_and_prometheus_are_imported_only_when_configured():
    import subprocess
    import sys

    code = (
        "import sys, tpnode_tui.cli, tpnode_tui.agent.serve, tpnode_tui.fleet.record; "
        "print(sorted(m for m in ('redis', 'prometheus_client') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "published, reached",
    [
        ("gpu-01", "gpu-01"),
        ("ops@gpu-01.example.org:2222", "ops@gpu-01.example.org:2222"),
        ("", None),
        ("-oProxyCommand=touch /tmp/x", None),
        ("gpu 01", None),
        ("\x1b[2Jgpu", None),
    ],
)
def test_fleet_json_says_how_to_reach_each_node_and_only_a_destination_is_believed(published, reached):
    regs, docs = one()
    regs = {"i1": registration_bytes("gpu-01", ssh=published)}
    [node] = read(regs, docs).nodes
    [said] = record.fleet_json(read(regs, docs))["nodes"]
    assert (None if node.ssh is None else str(node.ssh)) == reached
    assert said["ssh"] == reached
    assert said["dashboard"] == (None if reached is None else f"tpnode-tui --host {reached}")
