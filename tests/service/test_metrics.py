"""Prometheus /metrics: parsed as Prometheus parses it, from a real agent and from readings made by hand.

The agent runs in the test's loop (as in tests/service/test_agent_api.py) with its
metrics on a free loopback port; the scrape is plain HTTP and its text is
read with prometheus_client's own parser.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from helpers.agents import Agent, running
from helpers.clocks import MovedClock
from helpers.fleet import T, job, node_snapshot
from helpers.paths import CHECKOUT
from helpers.services import free_port, promtool, write_scene
from helpers.waiting import until_async
from tpnode_tui.agent.metrics import CARD_STATES, DCGM_LABELS, NodeCollector
from tpnode_tui.model.jobs import DeviceFence, QueuedLaunch
from tpnode_tui.model.views import Drain
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.readings import Reading
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.service.journal import LAUNCH_RESULTS
from tpnode_tui.state.ledger import LedgerCounters

DCGM = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
)
GRAFANA = CHECKOUT / "contrib" / "grafana" / "tpnode.json"
ALERTS = CHECKOUT / "contrib" / "prometheus" / "alerts.yml"


def scene_cards(n: int = 8) -> list[dict]:
    cards = [
        {
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "memory_used_mib": 0,
            "uuid": f"GPU-{i:08d}-0000-4000-8000-000000000000",
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
            "utilization_pct": 10 * i,
            "temperature_c": 30 + i,
            "power_w": 70.5 + i,
        }
        for i in range(n)
    ]
    del cards[7]["temperature_c"]  # the driver could not say: no sample, never a 0
    cards[5]["memory_used_mib"] = 30000
    cards[5]["processes"] = [{"pid": 4242, "used_memory_mib": 30000}]
    return cards


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


class MetricsAgent(Agent):
    """The tests' agent on the scene above, with its metrics on a free loopback port."""

    def __init__(self, tmp_path, clock=time.time) -> None:
        super().__init__(tmp_path, clock)
        write_scene(self.scene, scene_cards())
        self.port = free_port()
        s = self.settings
        self.settings = replace(
            s,
            agent=replace(s.agent, metrics_addr=("127.0.0.1", self.port)),
            fleet=replace(s.fleet, node_name="gpu-07"),
            probe=replace(s.probe, timeout_s=60.0),
            triage=replace(s.triage, idle_reservation_min=1),
        )

    async def scrape(self) -> str:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{self.port}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                return await response.text()


@pytest.fixture
async def agent(tmp_path):
    async with running(MetricsAgent(tmp_path)) as a:
        yield a


async def scrape_when(agent: MetricsAgent, ready) -> dict:
    """The metrics families, once ``ready`` says they show what the test waits for."""

    async def scraped() -> dict:
        found = families(await agent.scrape())
        return found if ready(found) else {}

    return await until_async(scraped, "the metrics to show it", every=0.1)


async def test_every_card_state_and_device_fact_with_dcgm_exporter_labels(agent):
    node = AgentNode(agent.socket)
    try:
        await node.launch(LaunchRequest(cards=2, command=("sleep", "60"), run_id="train-1"))
        with pytest.raises(Exception, match="no capacity|free"):
            await node.launch(LaunchRequest(cards=8, command=("sleep", "60"), run_id="too-big"))
    finally:
        await node.close()
    found = await scrape_when(
        agent,
        lambda f: (
            any(s.labels.get("run_id") == "train-1" for s in f["tpnode_card_holder_info"].samples)
            and f["tpnode_queue_length"].samples[0].value == 0
        ),
    )  # the refused launch is gone from it

    states = [s for s in found["tpnode_card_state"].samples]
    for gpu in range(8):
        mine = {s.labels["state"]: s.value for s in states if s.labels["gpu"] == str(gpu)}
        assert set(mine) == set(CARD_STATES) and sum(mine.values()) == 1, (gpu, mine)
    current = {s.labels["gpu"]: s.labels["state"] for s in states if s.value == 1}
    assert current == {
        "0": "job",
        "1": "job",
        "2": "free",
        "3": "free",
        "4": "free",
        "5": "external",
        "6": "free",
        "7": "free",
    }
    holders = {
        (s.labels["gpu"], s.labels["run_id"], s.labels["kind"], s.labels["owner"])
        for s in found["tpnode_card_holder_info"].samples
    }
    assert holders == {("0", "train-1", "job", "root"), ("1", "train-1", "job", "root")}

    for name in DCGM:
        for sample in found[name].samples:
            assert set(sample.labels) == set(DCGM_LABELS), (name, sample.labels)
    util = {s.labels["gpu"]: s for s in found["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert len(util) == 8 and util["3"].value == 30
    assert util["3"].labels == {
        "gpu": "3",
        "UUID": "GPU-00000003-0000-4000-8000-000000000000",
        "pci_bus_id": "00000000:1B:00.0",
        "device": "nvidia3",
        "model_name": "NVIDIA H200",
        "Hostname": "gpu-07",
    }
    used = {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_FB_USED"].samples}
    free = {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_FB_FREE"].samples}
    assert (used["5"], free["5"]) == (30000, 143771 - 30000)
    temps = {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_GPU_TEMP"].samples}
    assert temps["2"] == 32 and "7" not in temps  # unknown is left out, never 0
    assert {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_POWER_USAGE"].samples}["1"] == 71.5
    assert {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_XID_ERRORS"].samples} == {
        str(gpu): 0 for gpu in range(8)
    }, "as dcgm-exporter: 0 until a card reports one"

    def value(name: str) -> float:
        return found[name].samples[0].value

    assert (value("tpnode_cards_free"), value("tpnode_cards"), value("tpnode_probe_ok")) == (5, 8, 1)
    assert (value("tpnode_queue_length"), value("tpnode_lock_wait_seconds")) == (0, 0)
    assert (value("tpnode_intruders"), value("tpnode_drained_cards")) == (0, 0)
    launches = {
        s.labels["result"]: s.value for s in found["tpnode_launches"].samples if s.name == "tpnode_launches_total"
    }
    assert launches == {result: 0 for result in LAUNCH_RESULTS} | {"placed": 1, "no_capacity": 1}
    assert found["tpnode_launches"].type == "counter"

    cards = scene_cards()
    cards[6]["xid_events"] = [{"id": "e1", "xid": 13}]  # an application fault: logged, the card stays in service
    write_scene(agent.scene, cards)
    found = await scrape_when(
        agent, lambda f: any(s.labels["gpu"] == "6" and s.value == 13 for s in f["DCGM_FI_DEV_XID_ERRORS"].samples)
    )
    assert {s.labels["gpu"]: s.value for s in found["DCGM_FI_DEV_XID_ERRORS"].samples}["5"] == 0
    assert found["tpnode_node_info"].samples[0].labels["node"] == "gpu-07"


async def test_a_scrape_during_a_hung_probe_answers_at_once_from_the_last_reading(agent):
    await scrape_when(agent, lambda f: len(f["tpnode_card_state"].samples) == 8 * len(CARD_STATES))
    hung = json.loads(agent.scene.read_text()) | {"hang_s": 60}
    agent.scene.write_text(json.dumps(hung))
    await asyncio.sleep(1.0)  # the next poll is now stuck in the probe (timeout 60 s)
    started = time.monotonic()
    found = families(await asyncio.wait_for(agent.scrape(), 5))
    assert time.monotonic() - started < 5  # a correctness bound: the probe hangs for 60 s
    assert {s.labels["gpu"] for s in found["DCGM_FI_DEV_GPU_UTIL"].samples} == {str(i) for i in range(8)}
    assert sum(s.value for s in found["tpnode_card_state"].samples) == 8
    hung.pop("hang_s")
    agent.scene.write_text(json.dumps(hung))


def generate(reading: Reading, clock=lambda: T + 12, results=None, ledger=None) -> str:
    """The exposition a scrape gets for ``reading``."""
    service = SimpleNamespace(
        reading=reading, launch_results=collections.Counter(results or {}), last_xid={}, ledger=ledger
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(service, "gpu-07", clock=clock))
    return generate_latest(registry).decode()


def collect(reading: Reading, clock=lambda: T + 12, results=None, ledger=None) -> dict:
    return families(generate(reading, clock, results, ledger))


def test_lock_wait_is_the_oldest_waiting_launch_and_the_queue_counts_every_launch_not_started():
    queue = (
        QueuedLaunch("a", 2, "alice", T - 30, state="queued"),
        QueuedLaunch("b", 1, "bob", T, state="waiting", waiting_for="held by pid 7"),
        QueuedLaunch("c", 1, "carol", T + 5, state="waiting"),
        QueuedLaunch("d", 1, "dave", T + 6, state="placing"),
    )
    snap = node_snapshot()
    found = collect(Reading(1, snap.__class__(**{**snap.__dict__, "queue": queue})))
    assert found["tpnode_lock_wait_seconds"].samples[0].value == 12
    assert found["tpnode_queue_length"].samples[0].value == 4


def test_drained_cards_and_a_stale_reading():
    found = collect(Reading(1, node_snapshot(drained=(6, 7))))
    assert found["tpnode_drained_cards"].samples[0].value == 2
    assert {
        s.labels["gpu"] for s in found["tpnode_card_state"].samples if s.labels["state"] == "drained" and s.value == 1
    } == {"6", "7"}
    stale = collect(Reading(2, node_snapshot(), error="cannot read the state file", stale_since=T))
    assert stale["tpnode_probe_ok"].samples[0].value == 0
    assert stale["tpnode_reading_age_seconds"].samples[0].value == 12
    nothing = collect(Reading(0, None))
    assert nothing["tpnode_probe_ok"].samples[0].value == 0 and nothing["tpnode_cards_free"].samples == []


def test_other_peoples_words_in_labels_cannot_break_a_scrape():
    owner = 'eve\ud800\x1b[2J"}\n'
    snap = node_snapshot(jobs=(job("r1", (0,), owner=owner),))
    found = collect(Reading(1, snap))
    labels = found["tpnode_card_holder_info"].samples[0].labels
    assert labels["owner"] == 'eve\\ud800\\x1b[2J"}\\n'


def test_queue_wait_is_the_oldest_launch_not_started_whatever_it_waits_for():
    queue = (
        QueuedLaunch("a", 2, "alice", T - 30, state="queued"),
        QueuedLaunch("b", 1, "bob", T, state="waiting"),
    )
    found = collect(Reading(1, replace(node_snapshot(), queue=queue)))
    assert found["tpnode_queue_wait_seconds"].samples[0].value == 42
    assert found["tpnode_lock_wait_seconds"].samples[0].value == 12
    empty = collect(Reading(1, node_snapshot()))
    assert empty["tpnode_queue_wait_seconds"].samples[0].value == 0


def test_each_drained_card_says_who_drained_it():
    snap = node_snapshot(jobs=(job("train", (2,)),), drained=(6, 7))
    drains = {
        6: Drain(6, "asked", by="ana", at=T - 60),
        7: Drain(7, "XID 79: reboot", by="xid", at=T - 5, source="xid", xid=79),
        2: Drain(2, "XID 48", by="xid", at=T - 5, source="xid", xid=48),  # drained under its job
    }
    cards = tuple(replace(c, drain=drains.get(c.index)) for c in snap.cards)
    found = collect(Reading(1, replace(snap, cards=cards)))
    assert {
        (s.labels["gpu"], s.labels["source"], s.labels["xid"], s.value) for s in found["tpnode_card_drain_info"].samples
    } == {
        ("6", "operator", "", 1),
        ("7", "xid", "79", 1),
        ("2", "xid", "48", 1),
    }
    assert collect(Reading(1, node_snapshot()))["tpnode_card_drain_info"].samples == []


def test_each_cards_last_check_is_served_as_prometheus_names_it_and_promtool_accepts_it():
    from tpnode_tui.model.checks import FAILED, PASSED, CardCheck

    snap = node_snapshot()
    checks = {
        2: CardCheck(2, "GPU-2", "root", T - 70, T - 60, "boot-a", FAILED, ()),
        5: CardCheck(5, "GPU-5", "root", T - 20, T - 10, "boot-a", PASSED, ()),
    }
    cards = tuple(replace(c, check=checks.get(c.index)) for c in snap.cards)
    text = generate(Reading(1, replace(snap, cards=cards)))
    found = families(text)
    when = {s.labels["gpu"]: s.value for s in found["tpnode_card_check_timestamp_seconds"].samples}
    assert when == {"2": T - 60, "5": T - 10}  # a card never checked has no sample
    outcome = {(s.labels["gpu"], s.labels["outcome"]): s.value for s in found["tpnode_card_check_outcome"].samples}
    assert outcome == {
        ("2", "passed"): 0,
        ("2", "failed"): 1,
        ("2", "unknown"): 0,
        ("5", "passed"): 1,
        ("5", "failed"): 0,
        ("5", "unknown"): 0,
    }
    ours = "\n".join(line for line in text.splitlines() if "tpnode_card_check_" in line) + "\n"
    linted = promtool("check", "metrics", stdin=ours)
    assert (linted.returncode, linted.stdout + linted.stderr) == (0, "")
    assert promtool(
        "check", "metrics", stdin=ours.replace("tpnode_card_check_outcome", "CheckOutcome_total")
    ).returncode
    assert collect(Reading(1, node_snapshot()))["tpnode_card_check_outcome"].samples == []


def test_an_idle_reservation_is_served_with_its_owner_and_seconds_unused():
    jobs = (job("rsv-1", (0,), kind="reservation", owner="eve\x1b[2J"), job("rsv-2", (1,), kind="reservation"))
    snap = replace(node_snapshot(jobs=jobs), idle={"rsv-1": T - 3600})
    [sample] = collect(Reading(1, snap))["tpnode_reservation_idle_seconds"].samples
    assert (sample.labels, sample.value) == ({"run_id": "rsv-1", "owner": "eve\\x1b[2J"}, 3612)


def test_the_ledgers_counters_per_user_and_its_last_write():
    counted = LedgerCounters({"alice": 7200.0, "bob\ud800": 60.0}, {"alice": 1800.0}, T - 30, None)
    found = collect(Reading(1, node_snapshot()), ledger=SimpleNamespace(counters=lambda: counted))
    held = {s.labels["user"]: s.value for s in found["tpnode_card_held_seconds"].samples}
    assert held == {"alice": 7200, "bob\\ud800": 60}
    assert found["tpnode_card_held_seconds"].type == "counter"
    assert {s.labels["user"]: s.value for s in found["tpnode_card_idle_seconds"].samples} == {"alice": 1800}
    # the names they had, served beside them until a later release, the same counts
    renamed = {
        "tpnode_card_seconds_held": "tpnode_card_held_seconds",
        "tpnode_card_seconds_idle": "tpnode_card_idle_seconds",
    }
    for old, new in renamed.items():
        assert [(s.labels, s.value) for s in found[old].samples] == [(s.labels, s.value) for s in found[new].samples]
        assert found[old].documentation.startswith(f"Deprecated: {new}_total under its old name")
    assert found["tpnode_usage_ledger_last_write_timestamp_seconds"].samples[0].value == T - 30
    unwritten = LedgerCounters({}, {}, None, "cannot open the usage ledger")
    found = collect(Reading(1, node_snapshot()), ledger=SimpleNamespace(counters=lambda: unwritten))
    assert found["tpnode_usage_ledger_last_write_timestamp_seconds"].samples == []  # what the alert looks for


def names_in(found: dict) -> set[str]:
    """Every name a scrape served with at least one sample: families', and their samples' (``_total``)."""
    names: set[str] = set()
    for family in found.values():
        if family.samples:
            names.add(family.name)
            names.update(s.name for s in family.samples)
    return names


def test_each_live_job_says_whether_it_is_fenced_and_by_what():
    fenced = replace(job("train", (0,)), device_fence=DeviceFence.by("cgroup-v2"))
    loose = replace(job("notebook", (1,), owner="bob"), device_fence=DeviceFence.missing("cgroup v2: not root"))
    held = replace(job("rsv-1", (2,), kind="reservation"), device_fence=DeviceFence.by("docker"))
    ended = replace(job("done", (3,)), status="exited", exit_code=0, device_fence=DeviceFence.by("cgroup-v1"))
    found = collect(Reading(1, node_snapshot(jobs=(fenced, loose, held, ended))))
    assert found["tpnode_job_fenced"].type == "gauge"
    assert {
        (s.labels["run_id"], s.labels["kind"], s.labels["owner"], s.labels["mechanism"], s.value)
        for s in found["tpnode_job_fenced"].samples
    } == {
        ("train", "job", "alice", "cgroup-v2", 1),
        ("notebook", "job", "bob", "", 0),
        ("rsv-1", "reservation", "alice", "docker", 1),
    }  # the ended job holds nothing and is not listed


def served_names() -> set[str]:
    snap = node_snapshot(jobs=(job("r1", (0,)),))
    return names_in(collect(Reading(1, snap), results={"placed": 1}))


def alerted_names() -> set[str]:
    """The metrics contrib/prometheus/alerts.yml reads (not Prometheus' own ``up``)."""
    return set(re.findall(r"\b((?:tpnode|DCGM)_[A-Za-z0-9_:]*)", ALERTS.read_text()))


async def test_every_metric_an_alert_reads_is_served_by_a_real_agent(tmp_path):
    """A drained card, an idle reservation, the queue and the ledger's write, each
    with a sample, from an agent whose clock the test moves on."""
    clock = MovedClock()
    async with running(MetricsAgent(tmp_path, clock)) as agent:
        node = AgentNode(agent.socket)
        try:
            await node.reserve(ReserveRequest(cards=1, duration_s=3600, run_id="rsv-idle"))
            checked = await node.check(5)  # someone's process is on it: it fails
        finally:
            await node.close()
        assert checked.outcome == "failed"
        cards = scene_cards()
        cards[7]["xid_events"] = [{"id": "e1", "xid": 48}]  # drains the card until an operator undrains it
        write_scene(agent.scene, cards)
        await scrape_when(agent, lambda f: any(s.labels["gpu"] == "7" for s in f["tpnode_card_drain_info"].samples))
        clock.advance(120)  # past TUNEPLANE_IDLE_RESERVATION_MIN, 1 here
        found = await scrape_when(
            agent,
            lambda f: (
                f["tpnode_reservation_idle_seconds"].samples
                and f["tpnode_card_idle_seconds"].samples
                and f["tpnode_usage_ledger_last_write_timestamp_seconds"].samples
            ),
        )
    named = alerted_names()
    assert {"tpnode_card_drain_info", "tpnode_usage_ledger_last_write_timestamp_seconds"} <= named
    assert named - names_in(found) == set()
    drains = {s.labels["gpu"]: s.labels for s in found["tpnode_card_drain_info"].samples}
    assert drains["7"] == {"gpu": "7", "source": "xid", "xid": "48"}
    assert drains["5"] == {"gpu": "5", "source": "check", "xid": ""}  # drained for the check it failed
    failed = [s.labels for s in found["tpnode_card_check_outcome"].samples if s.value == 1]
    assert failed == [{"gpu": "5", "outcome": "failed"}]
    [idle] = found["tpnode_reservation_idle_seconds"].samples
    assert idle.labels == {"run_id": "rsv-idle", "owner": "root"} and idle.value >= 120
    held = {s.labels["user"]: s.value for s in found["tpnode_card_held_seconds"].samples}
    assert set(held) == {"root"} and held["root"] > 0
    assert found["tpnode_card_idle_seconds"].samples[0].value > 0  # nobody's process is on the reserved card
    last_write = found["tpnode_usage_ledger_last_write_timestamp_seconds"].samples[0].value
    assert abs(last_write - clock()) <= 61  # in the agent's time, moved on: written each minute
    assert (agent.state / "usage.sqlite").exists()


def test_every_metric_the_grafana_dashboard_queries_is_served():
    dashboard = json.loads(GRAFANA.read_text())
    exprs = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query", "definition") and isinstance(value, str):
                    exprs.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    assert len(exprs) >= 6, "the walk found too few queries to mean anything"
    named = {m for e in exprs for m in re.findall(r"\b((?:tpnode|DCGM)_[A-Za-z0-9_:]*)", e)}
    assert named, "no metric names found in the dashboard"
    assert named - served_names() == set()
    # and the check can fail: a name the agent does not serve is caught
    assert {"tpnode_no_such_metric"} - served_names() == {"tpnode_no_such_metric"}


def mig_cards() -> list[dict]:
    """The scene's cards with card 1 in MIG mode: two compute instances of one GPU
    instance (one of them in use from outside) and a 1g.18gb slice."""
    cards = scene_cards()
    cards[1].update(
        mig=True,
        utilization_pct=None,
        memory_used_mib=20000,
        slices=[
            {
                "profile": "1c.3g.71gb",
                "uuid": "MIG-aaaa0000-7c3d-5e8f-9a0b-1c2d3e4f5a6b",
                "gpu_instance_id": 2,
                "compute_instance_id": 0,
                "memory_total_mib": 71424,
                "memory_used_mib": 20493,
                "processes": [{"pid": 4343, "used_memory_mib": 20480}],
            },
            {
                "profile": "2c.3g.71gb",
                "uuid": "MIG-aaaa0001-7c3d-5e8f-9a0b-1c2d3e4f5a6b",
                "gpu_instance_id": 2,
                "compute_instance_id": 1,
                "memory_total_mib": 71424,
                "memory_used_mib": 20493,
            },
            {
                "profile": "1g.18gb",
                "uuid": "MIG-aaaa0002-7c3d-5e8f-9a0b-1c2d3e4f5a6b",
                "gpu_instance_id": 9,
                "compute_instance_id": 0,
                "memory_total_mib": 16384,
                "memory_used_mib": 13,
            },
        ],
    )
    return cards


async def test_each_mig_slice_has_its_memory_with_dcgm_exporters_mig_labels_and_its_own_state(agent):
    from tpnode_tui.agent.metrics import DCGM_MIG_LABELS

    cards = mig_cards()
    write_scene(agent.scene, cards)
    node = AgentNode(agent.socket)
    try:
        await node.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="nb", slice="1g.18gb"))
    finally:
        await node.close()
    found = await scrape_when(
        agent,
        lambda f: (
            "tpnode_slice_holder_info" in f
            and any(s.labels.get("run_id") == "nb" for s in f["tpnode_slice_holder_info"].samples)
        ),
    )

    per_slice = [s for s in found["DCGM_FI_DEV_FB_USED"].samples if "GPU_I_ID" in s.labels]
    assert [(s.labels["gpu"], s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.value) for s in per_slice] == [
        ("1", "1c.3g.71gb", "2", 20493),
        ("1", "2c.3g.71gb", "2", 20493),
        ("1", "1g.18gb", "9", 13),
    ]
    assert all(set(s.labels) == set(DCGM_MIG_LABELS) for s in per_slice)
    assert per_slice[0].labels["UUID"] == cards[1]["uuid"] and per_slice[0].labels["device"] == "nvidia1"
    free = [s for s in found["DCGM_FI_DEV_FB_FREE"].samples if s.labels.get("GPU_I_PROFILE") == "1g.18gb"]
    assert [s.value for s in free] == [16384 - 13]
    whole = [s for s in found["DCGM_FI_DEV_FB_USED"].samples if s.labels["gpu"] == "1" and "GPU_I_ID" not in s.labels]
    assert [s.value for s in whole] == [20000]  # the card's own sample stays, beside its slices'

    current = {
        (s.labels["GPU_I_PROFILE"], s.labels["mig_device"]): s.labels["state"]
        for s in found["tpnode_slice_state"].samples
        if s.value == 1
    }
    assert current == {("1c.3g.71gb", "0"): "external", ("2c.3g.71gb", "1"): "shared", ("1g.18gb", "2"): "job"}
    [held] = found["tpnode_slice_holder_info"].samples
    assert (held.labels["gpu"], held.labels["GPU_I_ID"], held.labels["run_id"], held.labels["kind"]) == (
        "1",
        "9",
        "nb",
        "job",
    )
    assert found["tpnode_slices"].samples[0].value == 3
    assert found["tpnode_slices_free"].samples[0].value == 0
    states = {s.labels["gpu"]: s.labels["state"] for s in found["tpnode_card_state"].samples if s.value == 1}
    assert states["1"] == "mig"


async def test_a_real_agents_scrape_passes_promtool_check_metrics(tmp_path):
    """Prometheus' own lint of an exposition (promtool check metrics: a gauge never
    ends in _total, a unit comes last, label names are snake_case), on a real
    agent's scrape with a sample in every family: a job on a MIG slice, a
    reservation gone idle, a card checked, a card drained by an XID, the ledger's counts."""
    clock = MovedClock()
    async with running(MetricsAgent(tmp_path, clock)) as agent:
        cards = mig_cards()
        cards[7]["xid_events"] = [{"id": "e1", "xid": 48}]
        write_scene(agent.scene, cards)
        node = AgentNode(agent.socket)
        try:
            await node.reserve(ReserveRequest(cards=1, duration_s=3600, run_id="rsv-idle"))
            await node.launch(LaunchRequest(cards=1, command=("sleep", "60"), run_id="nb", slice="1g.18gb"))
            await node.check(7)  # whatever it finds, the card's last check is served
        finally:
            await node.close()
        await scrape_when(
            agent, lambda f: f["tpnode_card_drain_info"].samples and f["tpnode_card_check_outcome"].samples
        )
        clock.advance(120)  # past TUNEPLANE_IDLE_RESERVATION_MIN, 1 here; the ledger writes each minute
        await scrape_when(
            agent,
            lambda f: (
                f["tpnode_reservation_idle_seconds"].samples
                and f["tpnode_card_idle_seconds"].samples
                and f["tpnode_slice_holder_info"].samples
                and f["tpnode_usage_ledger_last_write_timestamp_seconds"].samples
            ),
        )
        text = await agent.scrape()
    assert [name for name, family in families(text).items() if not family.samples] == []
    checked = promtool("check", "metrics", stdin=text)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
    # and the check can fail: the gauge this agent once served as tpnode_cards_total is caught
    old = "# HELP tpnode_cards_total Cards on this node\n# TYPE tpnode_cards_total gauge\ntpnode_cards_total 8.0\n"
    refused = promtool("check", "metrics", stdin=old)
    assert refused.returncode != 0 and 'non-counter metrics should not have "_total" suffix' in refused.stderr


def test_every_launch_result_is_served_from_zero_and_documented():
    """tpnode_launches_total's results are a closed set, each served at 0 until it
    happens: every way the journal words a launch's end, and docs/metrics.md says
    what each means (bad_request once was served and said nowhere)."""
    from tpnode_tui.model.errors import (
        BadRequest,
        Conflict,
        NeverFits,
        NoCapacity,
        NotAllowed,
        OverLimit,
        RuntimeUnavailable,
        TooMany,
        TpnodeError,
    )
    from tpnode_tui.port.types.refusals import Cancelled, OverQuota
    from tpnode_tui.service.journal import result_of

    kinds = (NoCapacity, TooMany, OverLimit, NotAllowed, OverQuota, BadRequest, NeverFits, Conflict, Cancelled)
    worded = {result_of(kind("x")).replace(" ", "_") for kind in (*kinds, RuntimeUnavailable, TpnodeError, OSError)}
    assert worded | {"placed", "queued", "abandoned", "dropped"} == set(LAUNCH_RESULTS)
    served = collect(Reading(1, node_snapshot()))["tpnode_launches"].samples
    assert [(s.labels["result"], s.value) for s in served] == [(result, 0) for result in LAUNCH_RESULTS]
    [row] = [
        line
        for line in (CHECKOUT / "docs" / "metrics.md").read_text().splitlines()
        if "`tpnode_launches_total`" in line and line.startswith("|")
    ]
    assert [result for result in LAUNCH_RESULTS if f"`{result}` (" not in row and f"`{result}`," not in row] == []
