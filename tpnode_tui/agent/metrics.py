"""Prometheus ``/metrics``, served by the agent on an opt-in TCP address.

A scrape reads the service's latest reading and nothing else, so a hung probe
or a slow engine cannot make a scrape hang; device facts carry dcgm-exporter's
names and labels, and a value not read is left out, never sent as 0. See
docs/architecture.md, section 'Many nodes', and docs/metrics.md for every
metric.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Mapping, Optional, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tpnode_tui import __version__
from tpnode_tui.model.checks import OUTCOMES
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.states import CARD_STATES, SLICE_STATES
from tpnode_tui.model.views import CardView
from tpnode_tui.service import NodeService
from tpnode_tui.service.journal import LAUNCH_RESULTS
from tpnode_tui.state.ledger import UsageLedger
from tpnode_tui.text.printable import printable

#: dcgm-exporter's labels, in its order, but for its ``modelName``, written
#: ``model_name`` as Prometheus names a label (``promtool check metrics`` refuses
#: camelCase); docs/metrics.md shows the relabelling that gives it back
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "model_name", "Hostname")
#: dcgm-exporter's labels on a MIG instance's samples, in its order: the card's, and
#: the GPU instance's profile and id before the host name
DCGM_MIG_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "model_name", "GPU_I_PROFILE", "GPU_I_ID", "Hostname")
#: what names a slice in the allocator's own series: its card, dcgm-exporter's
#: MIG labels, and the MIG device's index (two compute instances share one GPU instance)
SLICE_LABELS = ("gpu", "GPU_I_ID", "GPU_I_PROFILE", "mig_device")

#: what the exposition is, for the Content-Type header
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _text(value: Optional[str]) -> str:
    """A label value from someone else's text (owners, run ids, the driver's
    names): escaped as the screen shows it, so a lone surrogate from a command
    line cannot make the whole scrape fail to encode."""
    return printable(value or "")


class NodeCollector(Collector):
    """Every metric, made afresh from the service's latest reading at each scrape."""

    def __init__(self, service: NodeService, node: str, clock: Callable[[], float] = time.time) -> None:
        self.service = service
        self.node = node
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        reading = self.service.reading
        snap = reading.snapshot
        yield from self._device(snap)
        yield from self._allocator(snap, stale=reading.error is not None)
        yield from _usage(self.service.ledger)
        launches = CounterMetricFamily(
            "tpnode_launches",
            "Launches and reservations asked of this agent since it started, by result",
            labels=["result"],
        )
        counted = self.service.launch_results
        for result in LAUNCH_RESULTS:  # every one from the start, at 0 until it happens
            launches.add_metric([result], counted.get(result, 0))
        yield launches
        info = GaugeMetricFamily(
            "tpnode_node_info", "This node's name, series and agent version", labels=["node", "series", "agent_version"]
        )
        info.add_metric([self.node, _text(snap.series if snap else ""), __version__], 1)
        yield info

    def _device(self, snap: Optional[NodeSnapshot]) -> Iterator[GaugeMetricFamily]:
        families = {
            "util": GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=DCGM_LABELS),
            "used": GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=DCGM_LABELS),
            "free": GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=DCGM_LABELS),
            "temp": GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels=DCGM_LABELS),
            "power": GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=DCGM_LABELS),
            "xid": GaugeMetricFamily(
                "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=DCGM_LABELS
            ),
        }
        for card in snap.cards if snap is not None else ():
            f = card.facts
            if f is None:
                continue
            labels = [
                str(card.index),
                _text(f.uuid),
                _text(f.pci_bus_id),
                f"nvidia{card.index}",
                _text(f.name),
                self.node,
            ]
            values = {
                "util": f.utilization_pct,
                "used": f.memory_used_mib,
                "free": (
                    f.memory_total_mib - f.memory_used_mib
                    if f.memory_total_mib is not None and f.memory_used_mib is not None
                    else None
                ),
                "temp": f.temperature_c,
                "power": f.power_w,
                # as dcgm-exporter: 0 until the card reports one (here: since the agent started)
                "xid": self.service.last_xid.get(card.index, 0),
            }
            for key, value in values.items():
                if value is not None:
                    families[key].add_metric(labels, value)
            for s in card.slices:
                sf = s.facts
                mig = dict(zip(DCGM_MIG_LABELS, [*labels[:5], _text(sf.profile), _gi(sf.gpu_instance_id), self.node]))
                slice_values = {
                    "used": sf.memory_used_mib,
                    "free": (
                        sf.memory_total_mib - sf.memory_used_mib
                        if sf.memory_total_mib is not None and sf.memory_used_mib is not None
                        else None
                    ),
                }
                for key, value in slice_values.items():
                    if value is not None:
                        families[key].add_sample(families[key].name, mig, value)
        yield from families.values()

    def _allocator(self, snap: Optional[NodeSnapshot], stale: bool) -> Iterator[GaugeMetricFamily]:
        cards = snap.cards if snap is not None else ()
        now = self.clock()
        yield from _card_states(cards)
        yield from _slice_states(cards)
        yield _drains(cards)
        yield from _checks(cards)
        yield _idle_reservations(snap, now)
        yield _job_fences(snap.jobs if snap is not None else ())
        yield from _node_gauges(snap, stale, now)


def _card_states(cards: Sequence[CardView]) -> Iterator[GaugeMetricFamily]:
    """Each card's state, one series a state (1 for the current one), and its holder."""
    state = GaugeMetricFamily(
        "tpnode_card_state", "1 for the card's current state, 0 for the others", labels=["gpu", "state"]
    )
    holder = GaugeMetricFamily(
        "tpnode_card_holder_info",
        "The job or reservation holding the card",
        labels=["gpu", "run_id", "kind", "owner"],
    )
    for card in cards:
        for s in CARD_STATES:
            state.add_metric([str(card.index), s], 1 if s == card.state else 0)
        if card.state in ("job", "reservation") and card.run_id:
            job = card.job
            holder.add_metric([str(card.index), _text(card.run_id), card.state, _text(job.owner if job else "")], 1)
    yield state
    yield holder


def _drains(cards: Sequence[CardView]) -> GaugeMetricFamily:
    """Each drained card (a held card drained under its job too), and who drained it:
    what an alert on a card the XID watcher took out of service reads."""
    drained = GaugeMetricFamily(
        "tpnode_card_drain_info",
        "1 for each drained card: source is operator or xid, xid the XID that drained it",
        labels=["gpu", "source", "xid"],
    )
    for card in cards:
        d = card.drain
        if d is not None:
            drained.add_metric([str(card.index), _text(d.source), "" if d.xid is None else str(d.xid)], 1)
    return drained


def _checks(cards: Sequence[CardView]) -> Iterator[GaugeMetricFamily]:
    """Each card's last check (tpnode-tui check): when it ended, and how, one series
    an outcome (1 for its own); no sample for a card never checked."""
    when = GaugeMetricFamily(
        "tpnode_card_check_timestamp_seconds", "When the card's last check ended (unix seconds)", labels=["gpu"]
    )
    outcome = GaugeMetricFamily(
        "tpnode_card_check_outcome",
        "1 for how the card's last check ended (passed, failed, unknown), 0 for the others",
        labels=["gpu", "outcome"],
    )
    for card in cards:
        c = card.check
        if c is None:
            continue
        when.add_metric([str(card.index)], c.at)
        for o in OUTCOMES:
            outcome.add_metric([str(card.index), o], 1 if o == c.outcome else 0)
    yield when
    yield outcome


def _idle_reservations(snap: Optional[NodeSnapshot], now: float) -> GaugeMetricFamily:
    """Each reservation the node marks idle, and for how long its owner has used none of its cards."""
    idle = GaugeMetricFamily(
        "tpnode_reservation_idle_seconds",
        "Seconds since the owner of a reservation marked idle last used one of its cards",
        labels=["run_id", "owner"],
    )
    if snap is not None:
        owners = {j.key: j.owner for j in snap.jobs}
        for run_id, since in sorted(snap.idle.items()):
            idle.add_metric([_text(run_id), _text(owners.get(run_id))], max(0.0, now - since))
    return idle


def _usage(ledger: Optional[UsageLedger]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """What the usage ledger counted since the agent started, per owner (whole cards:
    a MIG slice is not a card), and when it last wrote its file (no sample before
    its first write, so an alert sees a ledger that never wrote)."""
    if ledger is None:  # served in-process: no ledger is kept
        return
    counted = ledger.counters()
    for name, old, doc, seconds in (
        (
            "tpnode_card_held_seconds",
            "tpnode_card_seconds_held",
            "Card-seconds each account's jobs and reservations held",
            counted.held_s,
        ),
        (
            "tpnode_card_idle_seconds",
            "tpnode_card_seconds_idle",
            "Of those, card-seconds with no process of the holder on the card, or under 5 % utilisation",
            counted.idle_s,
        ),
    ):
        yield _per_user(name, doc, seconds)
        # The name it had before the unit went last, as Prometheus names a counter:
        # served beside it, the same counts, until a later release removes it.
        yield _per_user(old, f"Deprecated: {name}_total under its old name, removed in a later release", seconds)
    yield _gauge(
        "tpnode_usage_ledger_last_write_timestamp_seconds",
        "When the usage ledger was last written (unix seconds); it writes once a minute",
        counted.last_write,
    )


def _per_user(name: str, doc: str, seconds: Mapping[str, float]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["user"])
    for user, value in sorted(seconds.items()):
        family.add_metric([_text(user)], value)
    return family


def _slice_states(cards: Sequence[CardView]) -> Iterator[GaugeMetricFamily]:
    """Each MIG slice's state, one series a state (1 for the current one), and its holder."""
    slice_state = GaugeMetricFamily(
        "tpnode_slice_state",
        "1 for the MIG slice's current state, 0 for the others",
        labels=[*SLICE_LABELS, "state"],
    )
    slice_holder = GaugeMetricFamily(
        "tpnode_slice_holder_info",
        "The job or reservation holding the MIG slice",
        labels=[*SLICE_LABELS, "run_id", "kind", "owner"],
    )
    slices = [(card, sv) for card in cards for sv in card.slices]
    for card, sv in slices:
        names = [str(card.index), _gi(sv.facts.gpu_instance_id), _text(sv.facts.profile), str(sv.index)]
        for st in SLICE_STATES:
            slice_state.add_metric([*names, st], 1 if st == sv.state else 0)
        if sv.state in ("job", "reservation") and sv.run_id:
            slice_holder.add_metric([*names, _text(sv.run_id), sv.state, _text(sv.job.owner if sv.job else "")], 1)
    yield slice_state
    yield slice_holder


def _job_fences(jobs: Sequence[JobState]) -> GaugeMetricFamily:
    """Whether each live job can open only its own cards' device files: 1, naming
    the mechanism, or 0, for an alert to find the jobs that could reach others' cards."""
    fenced = GaugeMetricFamily(
        "tpnode_job_fenced",
        "1 when a live job or reservation can open only its own cards' device files, else 0",
        labels=["run_id", "kind", "owner", "mechanism"],
    )
    for job in jobs:
        if job.live:
            fence = job.device_fence
            fenced.add_metric([_text(job.key), job.kind, _text(job.owner), fence.mechanism], 1 if fence.fenced else 0)
    return fenced


def _gauge(name: str, doc: str, value: Optional[float]) -> GaugeMetricFamily:
    """A gauge with no labels; without a sample when the value is unknown."""
    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], value)
    return family


def _node_gauges(snap: Optional[NodeSnapshot], stale: bool, now: float) -> Iterator[GaugeMetricFamily]:
    """The node's counts, its probe's health and its queue; unknown (no sample) without a reading."""
    counts = _counts(snap, now) if snap is not None else {}
    probe_ok = snap is not None and not stale and snap.occupancy.external_probe_ok and snap.probe.problem is None
    yield _gauge("tpnode_cards", "Cards on this node", counts.get("total"))
    yield _gauge("tpnode_cards_free", "Cards checked free (unverified cards are not counted)", counts.get("free"))
    yield _gauge("tpnode_slices", "MIG slices on this node's cards in MIG mode", counts.get("slices_total"))
    yield _gauge(
        "tpnode_slices_free", "MIG slices checked free (unverified ones are not counted)", counts.get("slices_free")
    )
    yield _gauge("tpnode_drained_cards", "Cards drained: not handed out until undrained", counts.get("drained"))
    yield _gauge(
        "tpnode_intruders",
        "Processes on held cards that belong to neither the job nor the reservation's owner",
        counts.get("intruders"),
    )
    yield _gauge(
        "tpnode_probe_ok",
        "1 while the last poll succeeded and the probe saw every card's use, else 0",
        1 if probe_ok else 0,
    )
    yield _gauge("tpnode_reading_age_seconds", "Seconds since the reading these metrics come from", counts.get("age"))
    yield _gauge(
        "tpnode_queue_length",
        "Launches not started yet: queued for cards, waiting for the allocation lock, or being placed",
        counts.get("queued"),
    )
    yield _gauge(
        "tpnode_lock_wait_seconds",
        "How long the oldest launch waiting for the allocation lock has waited; 0 when none waits",
        counts.get("wait"),
    )
    yield _gauge(
        "tpnode_queue_wait_seconds",
        "How long the oldest launch not started yet (queued, waiting for the lock or being placed) has waited",
        counts.get("queue_wait"),
    )


def _counts(snap: NodeSnapshot, now: float) -> dict[str, float]:
    """What the node's gauges count in one reading."""
    cards = snap.cards
    slices = [sv for c in cards for sv in c.slices]
    waiting = [q.queued_at for q in snap.queue if q.state == "waiting"]
    queued = [q.queued_at for q in snap.queue]
    return {
        "total": snap.occupancy.total,
        "free": sum(1 for c in cards if c.state == "free"),
        "drained": sum(1 for c in cards if c.state == "drained"),
        "slices_total": len(slices),
        "slices_free": sum(1 for sv in slices if sv.state == "free"),
        "intruders": sum(len(getattr(c, "intruders", ()) or ()) for c in cards),
        "age": now - snap.taken_at,
        "queued": len(snap.queue),
        "wait": max(0.0, now - min(waiting)) if waiting else 0.0,
        "queue_wait": max(0.0, now - min(queued)) if queued else 0.0,
    }


def _gi(gpu_instance_id: Optional[int]) -> str:
    """A GPU instance id as a label: empty when the driver did not say."""
    return "" if gpu_instance_id is None else str(gpu_instance_id)


def metrics_app(service: NodeService, node: str) -> web.Application:
    registry = CollectorRegistry(auto_describe=False)
    # the service's clock: the idle marks it serves are in its time (a test's, where one is injected)
    registry.register(NodeCollector(service, node, clock=service.clock))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics)])
    return app
