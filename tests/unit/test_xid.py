"""XIDs: the catalog's verdicts, the kernel log's lines, and the watchers.

The NVML watcher runs against tests/helpers/nvml.py, which delivers events,
times out and raises nvidia-ml-py's own error classes; the kernel-log
watcher reads records written to a pipe, as they come from /dev/kmsg; the
lines parsed are NVIDIA drivers' own, as published in NVIDIA's
documentation and operators' reports.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from helpers.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_GPU_UNAVAILABLE,
    EVENT_XID,
    FakeCard,
    FakeNvml,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
    NVMLError_Unknown,
)
from helpers.waiting import until_async
from tpnode_tui.config.sections import DEFAULT_XID_DRAIN
from tpnode_tui.core.xid import APPLICATION, DRAIN, IGNORED, OTHER, REBOOT, XidRules, parse_kmsg, pci_key
from tpnode_tui.probes import NvmlProbe, SimulatedProbe, SmiProbe
from tpnode_tui.probes.auto import AutoProbe
from tpnode_tui.probes.simulated import xid_events
from tpnode_tui.triage import watch
from tpnode_tui.triage.watch import KmsgXidWatcher, NvmlXidWatcher, SimulatedXidWatcher, watcher_for

WAIT_S = 10.0
RULES = XidRules.of(DEFAULT_XID_DRAIN)


# ── the catalog ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize("xid", [46, 48, 62, 64, 74, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158])
def test_faults_that_need_a_reset_drain_until_the_card_is_reset(xid):
    verdict = RULES.judge(xid)
    assert verdict.kind == DRAIN and verdict.drains
    assert verdict.words().startswith(f"XID {xid}: ") and verdict.words().endswith(
        "; reset the GPU (nvidia-smi -r) once nothing runs on it"
    )
    assert "catalog" not in verdict.meaning  # each has its own meaning


def test_79_drains_and_says_the_node_needs_a_reboot():
    verdict = RULES.judge(79)
    assert verdict.kind == REBOOT and verdict.drains
    assert verdict.words() == "XID 79: GPU has fallen off the bus; reboot the node"


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 69, 94])
def test_application_faults_are_the_programs_and_drain_nothing(xid):
    verdict = RULES.judge(xid)
    assert verdict.kind == APPLICATION and not verdict.drains
    assert "the card is fine" in verdict.words()


@pytest.mark.parametrize("xid", [8, 63, 92, 154, 9999])
def test_any_other_xid_is_shown_not_drained(xid):
    verdict = RULES.judge(xid)
    assert verdict.kind == OTHER and not verdict.drains and verdict.action is None


def test_the_lists_are_configurable_and_ignore_wins():
    rules = XidRules.of(drain=(13,), ignore=(48,))
    assert rules.judge(13).kind == DRAIN
    assert rules.judge(48).kind == IGNORED and rules.judge(48).words() == "XID 48: double bit ECC error"
    assert rules.judge(79).kind == OTHER  # no longer in the drain list


@pytest.mark.parametrize(
    "action, kind, words",
    [
        (1, DRAIN, "reset the GPU (nvidia-smi -r) once nothing runs on it"),
        (2, REBOOT, "reboot the node"),
        (3, DRAIN, "stop the jobs that use peer-to-peer transfers with it (drain P2P)"),
        (4, DRAIN, "stop the jobs that use peer-to-peer transfers with it, then reset the GPU"),
    ],
)
def test_the_drivers_recovery_action_wins_over_the_catalog(action, kind, words):
    verdict = RULES.judge(31, recovery_action=action)
    assert verdict.kind == kind and verdict.action.startswith(words)
    assert RULES.judge(31, recovery_action=0).kind == APPLICATION  # "none": the catalog decides


# ── the kernel log ──────────────────────────────────────────────────────────

#: NVRM lines as drivers write them (from NVIDIA's XID documentation and operators' dmesg captures)
REAL_LINES = [
    (
        "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC "
        "response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
        ("0:9b:0", 119, 2024380, "nvidia-smi", "Timeout after 6s"),
    ),
    (
        "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ("0:5:0", 79, None, None, "GPU has fallen off the bus."),
    ),
    (
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
        "(GPC 7, TPC 0, SM 0): Out Of Range Address",
        ("0:cb:0", 13, None, None, "Graphics SM Warp Exception"),
    ),
    (
        "NVRM: Xid (PCI:0000:b9:00): 74, pid=<unknown>, name=<unknown>, NVLink: fatal error detected on "
        "link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
        ("0:b9:0", 74, None, None, "NVLink: fatal error"),
    ),
    (
        "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.",
        ("0:18:0", 79, 1234, None, "GPU has fallen off the bus."),
    ),
    (
        "NVRM: Xid (PCI:0000:04:00): 69, pid=34566, name=python3, BAR1 access failure at address 0xffff80001234abcd",
        ("0:4:0", 69, 34566, "python3", "BAR1 access failure"),
    ),
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", ("0:3:0", 14, None, None, "Channel 00000001")),
    (
        "Oct 02 10:41:07 srv-r07-u12 kernel: NVRM: Xid (PCI:0000:3d:00): 79, pid=0, GPU has fallen off the bus.",
        ("0:3d:0", 79, None, None, "GPU has fallen off the bus."),
    ),
]


@pytest.mark.parametrize("line, want", REAL_LINES)
def test_real_nvrm_lines_are_read_as_kmsg_records_and_as_plain_lines(line, want):
    pci, xid, pid, name, text = want
    for record in (line, f"4,1234,5678901234,-;{line}", f"4,1234,5678901234,-;{line}\n SUBSYSTEM=pci"):
        found = parse_kmsg(record)
        assert (found.pci, found.xid, found.pid, found.process) == (pci, xid, pid, name)
        assert found.text.startswith(text)


@pytest.mark.parametrize(
    "line",
    [
        "6,99,1,-;usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "4,100,2,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03",
        "4,101,3,-;NVRM: GPU at PCI:0000:18:00: GPU-1c0f8a1e-0000-4000-8000-000000000001",
        "4,102,4,-;NVRM: Xid (PCI:zzzz:18:00): 79, GPU has fallen off the bus.",
        "",
    ],
)
def test_anything_else_in_the_kernel_log_is_no_xid(line):
    assert parse_kmsg(line) is None


def test_nvml_and_kernel_log_addresses_name_the_same_card():
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == pci_key("3b:00") == "0:3b:0"
    assert pci_key("0001:3b:00") != pci_key("0000:3b:00")
    assert pci_key("not an address") is None


# ── the watchers ────────────────────────────────────────────────────────────


class Collected:
    """What a watcher delivered, on the event loop."""

    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    async def until(self, count: int, what: str) -> list:
        """The events, once there are ``count`` of them."""
        await until_async(lambda: len(self.events) >= count, what, show=lambda: f"got {self.events}")
        return self.events


@pytest.fixture
async def nvml_watcher():
    made = []

    async def start(fake):
        watcher = NvmlXidWatcher(fake, wait_ms=20, retry_s=0.05)
        got = Collected()
        await watcher.start(got)
        made.append(watcher)
        await until_async(lambda: watcher.problem is None, "the watcher to start", show=lambda: watcher.problem)
        return watcher, got

    yield start
    for watcher in made:
        await watcher.close()


async def test_nvml_events_arrive_by_card_and_a_timeout_is_the_normal_answer(nvml_watcher):
    fake = FakeNvml([FakeCard(), FakeCard(), FakeCard(recovery_action=2)])
    watcher, got = await nvml_watcher(fake)
    await asyncio.sleep(0.1)  # several waits time out meanwhile
    assert fake.calls["event_wait"] >= 2 and got.events == [] and watcher.problem is None
    fake.xid(1, 79)
    fake.event(0, EVENT_DOUBLE_BIT_ECC)
    fake.xid(2, 13)
    first, second, third = await got.until(3, "three events")
    assert (first.card, first.xid, first.source) == (1, 79, "nvml")
    assert (second.card, second.xid) == (0, 48)
    assert (third.card, third.xid, third.recovery_action) == (2, 13, 2)
    [event_set] = fake.event_sets
    assert set(event_set.registered.values()) == {EVENT_XID | EVENT_DOUBLE_BIT_ECC | EVENT_GPU_UNAVAILABLE}


async def test_a_card_without_gpu_unavailable_events_is_registered_for_the_rest(nvml_watcher):
    older = FakeCard(supported_events=EVENT_XID | EVENT_DOUBLE_BIT_ECC)
    refuses = FakeCard()
    refuses.errors["supported_events"] = NVMLError_NotSupported  # cannot say: every type is tried
    fake = FakeNvml([older, refuses])
    refuses.supported_events = EVENT_XID  # what registering will accept
    watcher, got = await nvml_watcher(fake)
    [event_set] = fake.event_sets
    assert event_set.registered == {older: EVENT_XID | EVENT_DOUBLE_BIT_ECC, refuses: EVENT_XID}
    fake.xid(1, 48)
    [event] = await got.until(1, "the XID")
    assert (event.card, event.xid) == (1, 48)


async def test_one_card_the_driver_refuses_keeps_no_other_card_from_being_watched(nvml_watcher):
    refuses, lost, good = FakeCard(), FakeCard(), FakeCard()
    refuses.errors["register_events"] = NVMLError_Unknown
    lost.errors["supported_events"] = NVMLError_GpuIsLost
    fake = FakeNvml([refuses, lost, good])
    watcher, got = await nvml_watcher(fake)
    [event_set] = fake.event_sets  # registered once, not again and again on the same card
    assert set(event_set.registered) == {good}
    [said] = await got.until(1, "the lost card said lost")
    assert (said.card, said.text) == (1, "GPU is lost")
    fake.xid(2, 79)
    await got.until(2, "the good card's XID")
    assert (got.events[-1].card, got.events[-1].xid) == (2, 79)
    assert len(fake.event_sets) == 1


async def test_a_lost_gpu_is_found_by_card_and_the_rest_are_registered_again(nvml_watcher):
    fake = FakeNvml([FakeCard(), FakeCard()])
    watcher, got = await nvml_watcher(fake)
    fake.cards[1].lost = True
    fake.fail_wait(NVMLError_GpuIsLost)
    [lost] = await got.until(1, "the lost card")
    assert (lost.card, lost.xid, lost.text) == (1, None, "GPU is lost")
    await until_async(lambda: len(fake.event_sets) >= 2 and watcher.problem is None, "the watcher to register again")
    assert fake.event_sets[0].freed
    fake.xid(0, 62)
    await got.until(2, "an event after registering again")
    assert (got.events[-1].card, got.events[-1].xid) == (0, 62)
    fake.fail_wait(NVMLError_Unknown)  # a third registration finds card 1 lost again
    await until_async(
        lambda: len(fake.event_sets) >= 3 and watcher.problem is None, "the watcher to register a third time"
    )
    fake.xid(0, 64)
    await got.until(3, "an event after the third registration")
    assert [(e.card, e.xid) for e in got.events] == [(1, None), (0, 62), (0, 64)]  # lost: said once


async def test_after_a_driver_error_the_watcher_says_so_and_registers_afresh(nvml_watcher):
    fake = FakeNvml([FakeCard()])
    watcher, got = await nvml_watcher(fake)
    fake.fail_wait(NVMLError_Unknown)
    await until_async(lambda: len(fake.event_sets) >= 2, "the watcher to register again")
    await until_async(lambda: watcher.problem is None, "the watcher to say it watches again")
    fake.xid(0, 95)
    [event] = await got.until(1, "an event after the error")
    assert event.xid == 95


async def test_a_node_where_no_card_takes_events_says_xids_are_not_watched():
    fake = FakeNvml([FakeCard(supported_events=0)])
    watcher = NvmlXidWatcher(fake, wait_ms=20, retry_s=0.05)
    await watcher.start(Collected())
    try:
        await until_async(lambda: watcher.problem != "starting", "the watcher to say how it started")
        assert watcher.problem == "XID events cannot be watched: no card accepts event registration"
    finally:
        await watcher.close()


async def test_the_kernel_log_watcher_reads_nvrm_records_as_they_come(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    cards = {"0:3b:0": 2}
    watcher = KmsgXidWatcher(cards.get, fifo, wait_ms=20, retry_s=0.05)
    got = Collected()
    writer_ready = threading.Event()
    holder: list[int] = []

    def open_writer() -> None:
        holder.append(os.open(fifo, os.O_WRONLY))
        writer_ready.set()

    threading.Thread(target=open_writer, daemon=True).start()
    await watcher.start(got)
    try:
        assert writer_ready.wait(WAIT_S)
        fd = holder[0]
        os.write(fd, b"6,1,100,-;usb 1-1: new device\n SUBSYSTEM=usb\n")
        os.write(
            fd,
            b"4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
        )
        os.write(fd, b"4,3,300,-;NVRM: Xid (PCI:0000:5e:00): 31, pid=4242, name=python3, MMU Fault\n")
        first, second = await got.until(2, "two XIDs")
        assert (first.card, first.xid, first.source, first.pid) == (2, 79, "kmsg", None)
        assert (second.card, second.xid, second.pid, second.process, second.pci) == (
            None,
            31,
            4242,
            "python3",
            "0:5e:0",
        )
        assert watcher.problem is None
        os.close(fd)
    finally:
        await watcher.close()


async def test_an_unreadable_kernel_log_says_why_xids_are_not_watched(tmp_path):
    watcher = KmsgXidWatcher(lambda _pci: None, tmp_path / "no-such-kmsg", wait_ms=20, retry_s=0.05)
    await watcher.start(Collected())
    try:
        await until_async(lambda: watcher.problem != "starting", "the watcher to say how it started")
        assert watcher.problem.startswith("XID events are not watched: cannot read ")
        assert "No such file or directory" in watcher.problem
    finally:
        await watcher.close()


async def test_each_probe_gets_its_watcher_or_the_reason_there_is_none(tmp_path):
    scene = tmp_path / "node.json"
    scene.write_text('{"cards": [{}]}')
    assert isinstance(watcher_for(NvmlProbe(nvml=FakeNvml()), lambda p: None)[0], NvmlXidWatcher)
    assert isinstance(watcher_for(SmiProbe(), lambda p: None)[0], KmsgXidWatcher)
    assert isinstance(watcher_for(SimulatedProbe(scene), lambda p: None)[0], SimulatedXidWatcher)
    none, why = watcher_for(AutoProbe(), lambda p: None)
    assert none is None and why == "XID events are not watched: no probe can read the GPUs yet"


async def test_the_simulated_watcher_says_what_is_wrong_with_a_bad_event(tmp_path):
    scene = tmp_path / "node.json"
    scene.write_text('{"cards": [{"xid_events": [{"xid": 79}]}]}')
    watcher = SimulatedXidWatcher(scene, interval_s=0.02)
    got = Collected()
    await watcher.start(got)
    try:
        await until_async(lambda: watcher.problem is not None, "the watcher to name the problem")
        assert '"id" is missing' in watcher.problem and got.events == []
        reading = await SimulatedProbe(scene).read()
        assert not reading.external_probe_ok and '"id" is missing' in reading.problem
    finally:
        await watcher.close()


class CountedScene:
    """The real xid_events, counting the scene files it parses."""

    def __init__(self) -> None:
        self.parsed = 0

    def __call__(self, path):
        self.parsed += 1
        return xid_events(path)


async def test_the_simulated_watcher_parses_the_scene_only_when_it_changed(tmp_path, monkeypatch):
    scene = tmp_path / "node.json"
    scene.write_text('{"cards": [{}, {}]}')
    counted = CountedScene()
    monkeypatch.setattr(watch, "xid_events", counted)
    watcher = SimulatedXidWatcher(scene, interval_s=0.01, reread_s=3600)
    got = Collected()
    await watcher.start(got)
    try:
        await until_async(lambda: counted.parsed == 1, "the first parse")
        await asyncio.sleep(0.2)  # about 20 looks at a file that did not change
        assert counted.parsed == 1
        scene.write_text('{"cards": [{}, {"xid_events": [{"id": "a", "xid": 79}]}]}')
        (event,) = await got.until(1, "the XID written after the watcher started")
        assert (event.card, event.xid) == (1, 79)
        assert counted.parsed == 2
    finally:
        await watcher.close()


async def test_the_simulated_watcher_reads_again_when_a_change_does_not_show(tmp_path, monkeypatch):
    """A rewrite of the same size within the file system's clock tick leaves the stat as it was."""
    scene = tmp_path / "node.json"
    scene.write_text('{"cards": [{}]}')
    watcher = SimulatedXidWatcher(scene, interval_s=0.01, reread_s=0.05)
    monkeypatch.setattr(watcher, "_stamp", lambda: (1, 1, 1, 1))
    got = Collected()
    await watcher.start(got)
    try:
        await until_async(lambda: watcher._read_stamp is not None, "the first parse")
        scene.write_text('{"cards": [{"xid_events": [{"id": "b", "xid": 48}]}]}')
        (event,) = await got.until(1, "the XID written unseen by the stat")
        assert (event.card, event.xid) == (0, 48)
    finally:
        await watcher.close()


async def test_the_nvml_probe_reports_the_drivers_recovery_action_as_a_health_problem():
    """So a card an XID drained cannot be undrained while the driver still asks for a reset."""
    probe = NvmlProbe(nvml=FakeNvml([FakeCard(recovery_action=1), FakeCard(recovery_action=0), FakeCard()]))
    try:
        needs_reset, fine, unreported = (await probe.read()).cards
    finally:
        await probe.close()
    assert needs_reset.health == ("the driver asks to reset the GPU (nvidia-smi -r) once nothing runs on it",)
    assert fine.health == () and unreported.health == ()
