"""The nvidia-smi probe, running a stub nvidia-smi that prints real-format output."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers.paths import CAPTURES
from helpers.waiting import until, until_async
from tpnode_tui.model.facts import ProcessFacts, SliceFacts
from tpnode_tui.probes import health
from tpnode_tui.probes import smi as smi_module
from tpnode_tui.probes.smi import (
    SmiProbe,
    mig_slices,
    parse_compute_apps,
    parse_gpu_facts,
    parse_gpu_health,
    parse_index_uuid,
    parse_mig_list,
    parse_mig_modes,
    parse_mig_xml,
)
from tpnode_tui.text.printable import printable_view

CAPTURE = CAPTURES / "h200-mig"
UUID0 = "GPU-1c0f8a1e-5b3e-4b1a-9f4e-000000000000"
UUID1 = "GPU-1c0f8a1e-5b3e-4b1a-9f4e-000000000001"


async def test_reads_every_card(smi):
    reading = await SmiProbe().read()
    assert reading.source == "nvidia-smi"
    assert (reading.count, reading.external_probe_ok, reading.problem) == (2, True, None)
    card = reading.cards[0]
    assert (card.index, card.uuid, card.name, card.pci_bus_id) == (0, UUID0, "NVIDIA H200", "00000000:18:00.0")
    assert (card.memory_total_mib, card.memory_used_mib) == (143771, 1)
    assert (card.utilization_pct, card.temperature_c, card.power_w) == (0, 31, 74.38)
    assert card.processes == () and card.health == ()
    assert reading.cards[1].uuid == UUID1


async def test_each_cards_device_minor_is_read_from_the_drivers_information(smi, tmp_path):
    """nvidia-smi's queries have no device minor; the driver's /proc file does. A card
    whose file is missing, or names none, has no minor: it is never taken to be its index."""
    gpus = tmp_path / "gpus"
    (gpus / "0000:18:00.0").mkdir(parents=True)
    (gpus / "0000:18:00.0" / "information").write_text(
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t\t GPU-1c0f\n"
        "Device Minor: \t\t 1\nBus Location: \t 0000:18:00.0\n"
    )
    (gpus / "0000:19:00.0").mkdir()
    (gpus / "0000:19:00.0" / "information").write_text("Model: \t\t NVIDIA H200\n")
    reading = await SmiProbe(gpus_dir=gpus).read()
    assert [c.minor for c in reading.cards] == [1, None]
    assert reading.problem is None
    assert [c.minor for c in (await SmiProbe(gpus_dir=tmp_path / "none").read()).cards] == [None, None]


async def test_processes_are_put_on_their_card_by_uuid(smi):
    smi(APPS="1:4242:30000;1:777:[N/A]", SET="1:memory.used=30500")
    first, second = (await SmiProbe().read()).cards
    assert first.processes == ()
    assert second.processes == (ProcessFacts(4242, 30000), ProcessFacts(777, None))
    assert second.in_use(512) and not first.in_use(512)


async def test_na_fields_are_none(smi):
    smi(NA="name,temperature.gpu,power.draw,pci.bus_id")
    reading = await SmiProbe().read()
    card = reading.cards[0]
    assert (card.name, card.temperature_c, card.power_w, card.pci_bus_id) == (None, None, None, None)
    assert card.memory_used_mib == 1 and reading.external_probe_ok


async def test_memory_not_available_makes_the_cards_unverified(smi):
    smi(NA="memory.used")
    reading = await SmiProbe().read()
    assert reading.count == 2 and not reading.external_probe_ok
    assert "memory use could not be read on cards 0,1" in reading.problem


async def test_health_signals(smi):
    smi(
        SET="0:ecc.errors.uncorrected.volatile.total=4;"
        "1:remapped_rows.pending=Yes;1:clocks_throttle_reasons.hw_thermal_slowdown=Active;"
        "1:clocks_throttle_reasons.hw_slowdown=Active"
    )
    first, second = (await SmiProbe().read()).cards
    assert first.health == ("4 uncorrected ECC errors",)
    assert second.health == ("hardware slowdown (thermal)", health.ROW_REMAP_PENDING)


async def test_health_that_cannot_be_read_is_reported_but_not_blind(smi):
    smi(UNKNOWN="remapped_rows.pending")  # an older driver that does not know the field
    reading = await SmiProbe().read()
    assert reading.count == 2 and reading.external_probe_ok
    assert all(c.health == () for c in reading.cards)
    assert reading.problem.startswith("card health could not be read (nvidia-smi exited with status 2")


async def test_process_list_unknown_is_not_an_empty_list(smi):
    smi(MODE_APPS="fail")
    reading = await SmiProbe().read()
    assert all(c.processes is None for c in reading.cards)
    assert "compute processes could not be listed (nvidia-smi exited with status 9" in reading.problem
    assert reading.external_probe_ok  # memory used still shows use from outside


async def test_asked_and_nobody_is_not_blind(smi):
    smi(MODE="empty")
    reading = await SmiProbe().read()
    assert (reading.cards, reading.count, reading.external_probe_ok, reading.problem) == ((), 0, True, None)


async def test_a_failed_run_is_blind_not_empty(smi):
    smi(MODE_GPU="fail", EXIT="9")
    reading = await SmiProbe().read()
    assert (reading.cards, reading.count, reading.external_probe_ok) == ((), None, False)
    assert reading.problem.startswith("nvidia-smi exited with status 9: NVIDIA-SMI has failed")


async def test_junk_lines_between_cards_are_ignored(smi):
    smi(MODE="noise", APPS="0:4242:30000")
    reading = await SmiProbe().read()
    assert [c.index for c in reading.cards] == [0, 1]
    assert reading.cards[0].processes == (ProcessFacts(4242, 30000),)
    assert reading.problem is None


async def test_nothing_understandable_is_blind(smi):
    smi(MODE="junk")
    reading = await SmiProbe().read()
    assert not reading.external_probe_ok
    assert reading.problem.startswith("nvidia-smi answered something this probe does not understand")


async def test_a_hung_nvidia_smi_is_blind_and_killed(smi):
    smi(MODE="hang")
    reading = await SmiProbe(timeout_s=0.5).read()
    assert reading.problem == "nvidia-smi did not answer within 0.5 s"
    assert (reading.cards, reading.external_probe_ok) == ((), False)
    _gone(_running_stubs, "the killed nvidia-smi stubs")


@pytest.mark.parametrize("mode", ["hang", "hang-group", "hang-escape"])
async def test_a_hung_read_returns_at_its_deadline_whatever_holds_the_pipes(smi, tmp_path, mode):
    """hang-group: children in nvidia-smi's group keep its pipes open (they are
    killed with it); hang-escape: a child that left the group keeps them open
    and cannot be killed with it, as nvidia-smi itself cannot while stuck in
    the driver. Either way the read ends at its deadline."""
    pids = tmp_path / "escaped"
    smi(MODE=mode, HANG_S=HANG_S, PIDS=str(pids))
    try:
        started = time.monotonic()
        reading = await SmiProbe(timeout_s=1).read()
        took = time.monotonic() - started
        assert reading.problem == "nvidia-smi did not answer within 1 s"
        assert took < 1 + 1, f"a read with a 1 s timeout took {took:.1f} s"
        _gone(lambda: _running_stubs() + _sleepers(), "the hung nvidia-smi's process group")
    finally:
        for pid in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


async def test_an_nvidia_smi_that_outlives_its_kill_stops_new_ones_until_it_exits(smi, monkeypatch):
    """One stuck in the driver does not die when killed; every new one would
    hang beside it, so none is started while it lives."""
    smi(MODE="hang")
    probe = SmiProbe(timeout_s=0.5)
    monkeypatch.setattr(smi_module, "_kill_group", lambda proc: None)  # the kill has no effect
    await probe.read()
    stuck = _running_stubs()
    assert len(stuck) == 5  # one per query, and topo -m (a probe's first read reads the topology)
    smi(MODE="ok")
    again = await probe.read()
    assert not again.external_probe_ok and "has not exited" in again.problem, again.problem
    assert any(f"pid {p.pid}" in again.problem for p in stuck)
    assert sorted(p.pid for p in _running_stubs()) == sorted(p.pid for p in stuck)  # none started
    for proc in stuck:
        proc.kill()
    psutil.wait_procs(stuck, timeout=WAIT_S)
    recovered = await probe.read()
    assert recovered.external_probe_ok and recovered.count == 2


async def test_a_read_given_up_by_its_caller_kills_its_nvidia_smi(smi):
    smi(MODE="hang-group", HANG_S=HANG_S)
    task = asyncio.create_task(SmiProbe(timeout_s=60).read())
    await until_async(lambda: len(_sleepers()) == 10, "five hung nvidia-smi groups (four queries and topo -m)")
    task.cancel()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):
        await task
    took = time.monotonic() - started
    assert took < 2, f"giving up on a read took {took:.1f} s"
    _gone(_sleepers, "the abandoned nvidia-smi's process group")


#: How long the hang modes hang; unique to this test process, so its sleeps can be told apart.
HANG_S = f"40.{os.getpid()}"
WAIT_S = 20.0


def _running_stubs() -> list[psutil.Process]:
    """Our nvidia-smi stubs still running (session fixtures' servers are children too)."""
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any("nvidia-smi" in a for a in proc.cmdline()):
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def _sleepers() -> list[psutil.Process]:
    """The hang-group stub's sleeps, wherever they were reparented to."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.cmdline() == ["sleep", HANG_S] and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def _gone(find, what: str) -> None:
    """Killing is not waiting: the processes go soon after, not at once."""
    until(lambda: not find(), f"{what} to end", WAIT_S, show=lambda: f"still running: {[p.pid for p in find()]}")


async def test_not_on_path_is_blind(smi, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    reading = await SmiProbe().read()
    assert reading.problem == "nvidia-smi: not found on PATH"
    assert not reading.external_probe_ok


async def test_a_binary_that_cannot_start_is_blind(tmp_path, monkeypatch):
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    reading = await SmiProbe().read()
    assert reading.problem.startswith("nvidia-smi could not be run (")
    assert not reading.external_probe_ok


# -- MIG ---------------------------------------------------------------------------

MIG_UUID3 = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"


def capture_copy(tmp_path, **edits: tuple[str, str]) -> Path:
    """tests/captures/h200-mig with ``old`` replaced by ``new`` in each named file
    (file names with "-" and "." as "_": nvidia_smi_q_x_xml=(old, new))."""
    copy = tmp_path / "capture"
    shutil.copytree(CAPTURE, copy)
    for name, (old, new) in edits.items():
        path = copy / name.replace("_xml", ".xml").replace("_txt", ".txt").replace("_csv", ".csv").replace("_", "-")
        text = path.read_text()
        assert old in text, f"{old!r} is not in {path.name}"
        path.write_text(text.replace(old, new))
    return copy


async def test_mig_modes_are_read_and_nothing_more_is_asked_of_a_node_without_mig(smi):
    # -L and -q -x would fail: they must not be asked while no card is in MIG mode
    smi(
        SET="0:mig.mode.current=[N/A];0:mig.mode.pending=[N/A];1:mig.mode.pending=Enabled",
        MODE_LIST="fail",
        MODE_XML="fail",
    )
    reading = await SmiProbe().read()
    first, second = reading.cards
    assert (first.mig_mode, first.mig_pending, first.slices) == (False, None, ())  # cannot do MIG: whole
    assert (second.mig_mode, second.mig_pending, second.slices) == (False, True, ())  # enabled, waits for a reset
    assert second.utilization_pct == 0
    assert reading.problem is None


async def test_a_driver_that_does_not_know_mig_modes_is_unknown_and_said(smi):
    smi(UNKNOWN="mig.mode.current")
    reading = await SmiProbe().read()
    assert all((c.mig_mode, c.slices) == (None, None) for c in reading.cards)
    assert reading.problem.startswith("MIG mode could not be read (nvidia-smi exited with status 2: Field")
    assert reading.external_probe_ok and reading.cards[0].memory_used_mib == 1


async def test_a_card_in_mig_mode_with_no_devices_made_yet(smi):
    smi(SET="0:mig.mode.current=Enabled;0:mig.mode.pending=Enabled;0:utilization.gpu=[N/A]", APPS="0:4242:100")
    reading = await SmiProbe().read()
    first, second = reading.cards
    assert (first.mig_mode, first.slices, first.utilization_pct) == (True, (), None)
    assert first.processes == (ProcessFacts(4242, 100),)
    assert (second.mig_mode, second.slices) == (False, ())
    assert reading.problem is None


async def test_the_capture_with_mig_pending_disable(smi):
    smi(CAPTURE=str(CAPTURE), SET="0:mig.mode.pending=Disabled")
    (split, _whole) = (await SmiProbe().read()).cards
    assert (split.mig_mode, split.mig_pending, len(split.slices)) == (True, False, 5)


async def test_without_the_listing_the_slices_have_no_uuid_or_profile_but_the_rest(smi):
    smi(CAPTURE=str(CAPTURE), MODE_LIST="fail")
    reading = await SmiProbe().read()
    split = reading.cards[0]
    assert [(s.index, s.uuid, s.profile, s.gpu_instance_id, s.compute_instance_id) for s in split.slices] == [
        (0, None, None, 2, 0),
        (1, None, None, 2, 1),
        (2, None, None, 3, 0),
        (3, None, None, 9, 0),
        (4, None, None, 10, 0),
    ]
    assert split.slices[3].processes == (ProcessFacts(5151, 9000),)
    assert reading.problem.startswith("MIG devices could not be listed (nvidia-smi exited with status 9")
    assert reading.external_probe_ok


@pytest.mark.parametrize(
    "mode, why",
    [
        ("fail", "MIG devices could not be described (nvidia-smi exited with status 9"),
        ("junk", "MIG devices could not be described (nvidia-smi -q -x answered something this probe does not"),
    ],
)
async def test_without_the_document_the_slices_have_only_what_the_listing_says(smi, mode, why):
    smi(CAPTURE=str(CAPTURE), MODE_XML=mode)
    reading = await SmiProbe().read()
    split = reading.cards[0]
    assert [(s.index, s.profile) for s in split.slices] == [
        (0, "1c.3g.71gb"),
        (1, "2c.3g.71gb"),
        (2, "2g.35gb"),
        (3, "1g.18gb"),
        (4, "1g.18gb"),
    ]
    assert split.slices[3] == SliceFacts(3, MIG_UUID3, "1g.18gb", processes=None)
    assert split.processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))  # the compute apps still
    assert reading.problem.startswith(why) and reading.external_probe_ok


async def test_without_either_answer_the_slices_are_unknown(smi):
    smi(CAPTURE=str(CAPTURE), MODE_XML="fail", MODE_LIST="fail")
    reading = await SmiProbe().read()
    assert reading.cards[0].slices is None and reading.cards[0].mig_mode is True
    assert reading.cards[0].processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))
    assert reading.cards[1].slices == ()


async def test_a_process_whose_instances_match_no_slice_stays_on_the_card(smi, tmp_path):
    moved = (
        "\t\t\t\t<gpu_instance_id>5</gpu_instance_id>\n\t\t\t\t<compute_instance_id>0</compute_instance_id>\n"
        "\t\t\t\t<pid>5151</pid>"
    )
    smi(CAPTURE=str(capture_copy(tmp_path, nvidia_smi_q_x_xml=(moved.replace(">5<", ">9<"), moved))))
    split = (await SmiProbe().read()).cards[0]
    assert split.slices[3].processes == ()
    assert split.processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))


async def test_without_the_compute_apps_the_documents_processes_are_the_cards(smi):
    smi(CAPTURE=str(CAPTURE), MODE_APPS="fail")
    reading = await SmiProbe().read()
    split, whole = reading.cards
    assert split.processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))
    assert split.slices[0].processes == (ProcessFacts(4242, 20480),)
    assert whole.processes is None  # not in MIG mode: the document was not its list
    assert "compute processes could not be listed" in reading.problem


async def test_a_process_listed_under_its_mig_devices_uuid_is_on_its_card(smi, tmp_path):
    apps = "GPU-8f0d4c2e-31b7-6a5e-92c4-7d1e0b3a5f61, 5151"
    smi(CAPTURE=str(capture_copy(tmp_path, query_compute_apps_csv=(apps, f"{MIG_UUID3}, 5151"))))
    split = (await SmiProbe().read()).cards[0]
    assert split.processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))


async def test_odd_text_in_the_answers_is_data_and_reaches_the_screen_escaped(smi, tmp_path):
    """A process name is anybody's: a control character in it would make the XML
    unreadable. A profile is the driver's: whatever it is, it is kept as data."""
    smi(
        CAPTURE=str(
            capture_copy(
                tmp_path,
                nvidia_smi_q_x_xml=(
                    "<process_name>python3</process_name>",
                    "<process_name>\x1b]0;pwned\x07</process_name>",
                ),
                nvidia_smi_L_txt=("MIG 2g.35gb  ", "MIG 2g\x1b[31m"),
            )
        )
    )
    reading = await SmiProbe().read()
    split = reading.cards[0]
    assert split.slices[0].processes == (ProcessFacts(4242, 20480),)
    assert split.slices[2].profile == "2g\x1b[31m"
    assert printable_view(split).slices[2].profile == "2g\\x1b[31m"
    assert reading.problem is None


async def test_a_hung_mig_answer_ends_the_read_at_its_deadline(smi):
    smi(CAPTURE=str(CAPTURE), MODE_XML="hang", HANG_S=HANG_S)
    started = time.monotonic()
    reading = await SmiProbe(timeout_s=1).read()
    took = time.monotonic() - started
    assert took < 1 + 1, f"a read with a 1 s timeout took {took:.1f} s"
    assert "MIG devices could not be described (nvidia-smi did not answer within 1 s)" in reading.problem
    assert reading.cards[0].slices[3].processes is None and reading.cards[0].slices[3].profile == "1g.18gb"
    _gone(_running_stubs, "the hung nvidia-smi -q -x")


# -- the parsers, on their own ----------------------------------------------------


def test_health_parser_reads_the_seed_query_and_the_longer_one():
    assert parse_gpu_health("0, Yes, 0, Not Active\n1, No, 2, Active\n2, [N/A], [N/A], [N/A]\n") == {
        0: (health.RETIRED_PAGES_PENDING,),
        1: ("2 uncorrected ECC errors", "hardware slowdown (heat or power)"),
    }
    line = "3, [N/A], 0, Not Active, Not Active, Active, No, Yes"
    assert parse_gpu_health(line) == {3: ("hardware slowdown (power brake)", health.ROW_REMAP_FAILED)}


def test_index_uuid_mapper():
    text = f"0, {UUID0}, NVIDIA H200\n1, [N/A]\nx, GPU-zzz\n2, {UUID1}\n"
    assert parse_index_uuid(text) == {UUID0: 0, UUID1: 2}


def test_facts_parser_reads_units_and_skips_short_lines():
    text = (
        f"0, {UUID0}, NVIDIA H200, 00000000:18:00.0, 143771 MiB, 1 MiB, 0 %, 31, 74.38 W\n"
        "1, GPU-x, NVIDIA H200, 00000000:19:00.0, 143771\n"
    )
    (card,) = parse_gpu_facts(text)
    assert (card.memory_total_mib, card.memory_used_mib, card.power_w) == (143771, 1, 74.38)
    assert card.processes is None  # not part of this query: unknown until filled in


def test_compute_apps_parser():
    text = f"{UUID0}, 4242, 30000\n{UUID1}, 777, [N/A]\n{UUID1}, [Not Found], 5\ngarbage\n"
    assert parse_compute_apps(text) == [
        (UUID0, ProcessFacts(4242, 30000)),
        (UUID1, ProcessFacts(777, None)),
    ]


def test_mig_modes_parser():
    text = (
        "0, Enabled, Enabled\n1, Disabled, Enabled\n2, [N/A], [N/A]\n3, Enabled, Disabled\n"
        "4, [Unknown Error], x\n5, x\n"
    )
    assert parse_mig_modes(text) == {
        0: (True, None),
        1: (False, True),
        2: (False, None),
        3: (True, False),
        4: (None, None),
    }


def test_mig_listing_parser():
    text = (
        "  MIG 1g.18gb     Device  0: (UUID: MIG-before-any-card)\n"
        f"GPU 0: NVIDIA H200 (UUID: GPU-fake) (UUID: {UUID0})\n"
        "  MIG 1c.3g.71gb  Device  0: (UUID: MIG-a)\n"
        "WARNING: infoROM is corrupted at gpu 0000:18:00.0\n"
        "  MIG 1g.18gb     Device  3: (UUID: MIG-GPU-old-style/9/0)\n"
        "  MIG 1g.18gb     Device  3: (UUID: MIG-same-index-again)\n"
        f"GPU 1: NVIDIA H200 (UUID: {UUID1})\n"
    )
    assert parse_mig_list(text) == {
        UUID0: [(0, "1c.3g.71gb", "MIG-a"), (3, "1g.18gb", "MIG-GPU-old-style/9/0")],
        UUID1: [],
    }


def test_mig_document_parser_tolerates_what_is_missing():
    text = f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <gpu id="00000000:18:00.0"><uuid>{UUID0}</uuid>
    <mig_devices>
      <mig_device><index>1</index><gpu_instance_id>9</gpu_instance_id></mig_device>
      <mig_device><gpu_instance_id>7</gpu_instance_id></mig_device>
      <mig_device><index>2</index><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>0</compute_instance_id>
        <fb_memory_usage><total>16384 MiB</total><used>N/A</used></fb_memory_usage></mig_device>
    </mig_devices>
    <processes><process_info><gpu_instance_id>9</gpu_instance_id><pid>7</pid></process_info>
      <process_info><pid>N/A</pid></process_info></processes>
  </gpu>
  <gpu><uuid>{UUID1}</uuid><mig_devices>None</mig_devices></gpu>
  <gpu><mig_devices><mig_device><index>0</index></mig_device></mig_devices></gpu>
</nvidia_smi_log>"""
    assert parse_mig_xml(text) == {
        UUID0: (
            {
                1: SliceFacts(1, gpu_instance_id=9, processes=None),
                2: SliceFacts(2, compute_instance_id=0, memory_total_mib=16384, processes=None),
            },
            [(9, None, ProcessFacts(7))],
        ),
        UUID1: ({}, None),
    }
    assert parse_mig_xml("<html><gpu><uuid>x</uuid></gpu></html>") is None
    assert parse_mig_xml(
        f"<nvidia_smi_log><gpu><uuid>{UUID0}</uuid><processes><process_info><pid>7</pid>"
        "<process_name>\x1b\udcff</process_name></process_info></processes></gpu></nvidia_smi_log>"
    ) == {UUID0: ({}, [(None, None, ProcessFacts(7))])}
    assert parse_mig_xml("<nvidia_smi_log><gpu>") is None


def test_mig_slices_join_the_listing_and_the_document_by_index():
    listed = [(0, "1g.18gb", "MIG-a"), (2, "2g.35gb", "MIG-c")]
    described = (
        {
            0: SliceFacts(0, gpu_instance_id=9, compute_instance_id=0, processes=None),
            1: SliceFacts(1, gpu_instance_id=10, compute_instance_id=0, processes=None),
        },
        [(9, 0, ProcessFacts(7))],
    )
    assert mig_slices(listed, described) == (
        SliceFacts(0, "MIG-a", "1g.18gb", 9, 0, processes=(ProcessFacts(7),)),
        SliceFacts(1, None, None, 10, 0, processes=()),
        SliceFacts(2, "MIG-c", "2g.35gb", processes=None),  # no instance ids: its processes cannot be told
    )
    assert mig_slices(None, None) is None
    assert mig_slices([], None) == ()


_PARSERS = (
    parse_gpu_health,
    parse_index_uuid,
    parse_gpu_facts,
    parse_compute_apps,
    parse_mig_modes,
    parse_mig_list,
    parse_mig_xml,
)

#: pieces of real output and of what goes wrong with it, glued at random
_TOKENS = st.sampled_from(
    [
        "0",
        "1",
        "17",
        "-3",
        "1e999",
        "nan",
        "٣",
        "²",
        "9" * 5000,
        "30000 MiB",
        "74.38",
        "74.38.1",
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "Yes",
        "No",
        "Active",
        "Not Active",
        UUID0,
        "NVIDIA H200",
        "",
        " ",
        "\x00",
        "Enabled",
        "Disabled",
        "GPU 0: NVIDIA H200 (UUID: " + UUID0 + ")",
        "  MIG 1g.18gb     Device  3: (UUID: MIG-x)",
        "<nvidia_smi_log>",
        "<gpu>",
        "<uuid>" + UUID0 + "</uuid>",
        "<mig_devices>",
        "<mig_device>",
        "<index>0</index>",
        "<gpu_instance_id>9</gpu_instance_id>",
        "</mig_device>",
        "<processes>",
        "<process_info>",
        "<pid>7</pid>",
        "</gpu>",
        "</nvidia_smi_log>",
        "<!DOCTYPE x>",
        "&amp;",
        "&bogus;",
    ]
)
_LINES = st.lists(st.lists(st.one_of(_TOKENS, st.text(max_size=8)), max_size=10).map(", ".join), max_size=6).map(
    "\n".join
)


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(), _LINES))
def test_no_parser_raises_on_any_text(text):
    for parse in _PARSERS:
        parse(text)
    for card in parse_gpu_facts(text):
        assert isinstance(card.index, int) and card.index >= 0


@settings(max_examples=100, deadline=None)
@given(
    facts=st.one_of(st.text(), _LINES),
    health_text=_LINES,
    apps=_LINES,
    modes=_LINES,
    listing=st.one_of(st.text(), _LINES),
    document=st.one_of(st.text(), _LINES),
)
@example(  # a stray line maps an app's uuid to a card that is not in the answer
    facts=f"7, {UUID1}\n0, {UUID0}, H200, 0:18:00.0, 1, 1, 0, 31, 74",
    health_text="",
    apps=f"{UUID1}, 5, 10",
    modes="",
    listing="",
    document="",
)
@example(  # card 0 in MIG mode, its MIG devices told of in pieces that do not match
    facts=f"0, {UUID0}, H200, 0:18:00.0, 1, 1, 0, 31, 74",
    health_text="",
    apps=f"MIG-a, 5, 10\n{UUID0}, 6, 1",
    modes="0, Enabled, Enabled",
    listing=f"GPU 0: H200 (UUID: {UUID0})\n  MIG 1g.18gb     Device  3: (UUID: MIG-a)",
    document=f"<nvidia_smi_log><gpu><uuid>{UUID0}</uuid><mig_devices><mig_device><index>3</index></mig_device>"
    "<mig_device><index>x</index></mig_device></mig_devices><processes><process_info><pid>5</pid>"
    "<gpu_instance_id>N/A</gpu_instance_id></process_info></processes></gpu></nvidia_smi_log>",
)
def test_the_probe_never_raises_on_any_output(facts, health_text, apps, modes, listing, document):
    """Whatever nvidia-smi prints, a read gives a reading (stray lines naming a uuid too)."""

    async def answer(self, path, *args, timeout_s=None):
        query = " ".join(args)
        if args == ("-L",):
            return listing, ""
        if args == ("-q", "-x"):
            return document, ""
        return (
            apps
            if "compute-apps" in query
            else health_text
            if "retired" in query
            else modes
            if "mig.mode" in query
            else facts
        ), ""

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SmiProbe, "_run", answer)
        patch.setattr("shutil.which", lambda binary: "/usr/bin/nvidia-smi")
        reading = asyncio.run(SmiProbe().read())
    assert reading.external_probe_ok or reading.problem
    if reading.external_probe_ok:
        # "saw everything" must mean every card's use was read (on a MIG card, or
        # every slice's), or it is unhealthy
        assert all(
            c.memory_used_mib is not None
            or c.health
            or (c.mig_mode and c.slices and all(s.memory_used_mib is not None for s in c.slices))
            for c in reading.cards
        )
    for card in reading.cards:
        # a process on a slice is on its card too
        on_slices = {p.pid for s in card.slices or () for p in s.processes or ()}
        assert card.processes is None or on_slices <= {p.pid for p in card.processes}
