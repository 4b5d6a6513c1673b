"""MIG as every probe reads it: the rules they share, and a node in MIG mode read by each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.nvml import FakeNvml, h200_in_mig_mode
from helpers.paths import CAPTURES
from helpers.services import write_scene
from tpnode_tui.model.facts import CardFacts, ProcessFacts, SliceFacts
from tpnode_tui.probes import mig
from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.probes.smi import SmiProbe
from tpnode_tui.text.printable import printable_view

CAPTURE = CAPTURES / "h200-mig"

#: tests/captures/h200-mig's card 0, slice by slice:
#: (index, profile, uuid, GPU instance, compute instance, MiB total, MiB used, pids)
H200_SLICES = [
    (0, "1c.3g.71gb", "MIG-4b6e2f1a-7c3d-5e8f-9a0b-1c2d3e4f5a6b", 2, 0, 71424, 20493, [4242]),
    (1, "2c.3g.71gb", "MIG-9d8c7b6a-5f4e-5d3c-8b2a-190817263544", 2, 1, 71424, 20493, []),
    (2, "2g.35gb", "MIG-a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5d", 3, 0, 33280, 13, []),
    (3, "1g.18gb", "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", 9, 0, 16384, 9013, [5151]),
    (4, "1g.18gb", "MIG-c7d8e9f0-a1b2-5c3d-94e5-f6a7b8c9d0e1", 10, 0, 16384, 13, []),
]


def slice_table(card: CardFacts) -> list[tuple]:
    return [
        (
            s.index,
            s.profile,
            s.uuid,
            s.gpu_instance_id,
            s.compute_instance_id,
            s.memory_total_mib,
            s.memory_used_mib,
            [p.pid for p in s.processes],
        )
        for s in card.slices
    ]


def assert_reads_as_the_h200_capture(reading) -> None:
    assert (reading.count, reading.external_probe_ok, reading.problem) == (2, True, None)
    split, whole = reading.cards
    assert (split.mig_mode, split.mig_pending) == (True, None)
    assert slice_table(split) == H200_SLICES
    assert split.processes == (ProcessFacts(4242, 20480), ProcessFacts(5151, 9000))
    assert split.slices[0].processes == (ProcessFacts(4242, 20480),)
    # utilisation is not reported in MIG mode; the card's memory is the whole card's
    assert (split.utilization_pct, split.memory_total_mib, split.memory_used_mib) == (None, 143771, 30444)
    assert (whole.mig_mode, whole.slices, whole.processes, whole.utilization_pct) == (False, (), (), 0)


async def test_nvml_reads_the_h200_in_mig_mode_as_five_slices():
    probe = NvmlProbe(nvml=FakeNvml(h200_in_mig_mode()))
    try:
        assert_reads_as_the_h200_capture(await probe.read())
    finally:
        await probe.close()


@pytest.fixture
def smi_capture(smi):
    """The nvidia-smi stub first on PATH, replaying tests/captures/h200-mig."""
    smi(CAPTURE=str(CAPTURE))


async def test_nvidia_smi_reads_the_h200_capture_as_five_slices(smi_capture):
    assert_reads_as_the_h200_capture(await SmiProbe().read())


async def test_both_probes_read_the_h200_alike(smi_capture):
    probe = NvmlProbe(nvml=FakeNvml(h200_in_mig_mode()))
    try:
        by_nvml = await probe.read()
    finally:
        await probe.close()
    by_smi = await SmiProbe().read()
    assert by_nvml.cards[0].slices == by_smi.cards[0].slices
    assert [c.processes for c in by_nvml.cards] == [c.processes for c in by_smi.cards]
    assert [(c.uuid, c.mig_mode, c.memory_used_mib) for c in by_nvml.cards] == [
        (c.uuid, c.mig_mode, c.memory_used_mib) for c in by_smi.cards
    ]


async def test_the_simulated_probe_reads_the_h200_written_as_a_scene_alike(tmp_path):
    def slice_(index, profile, uuid, gi, ci, total, used, pids):
        used_by = {4242: 20480, 5151: 9000}
        return {
            "profile": profile,
            "uuid": uuid,
            "gpu_instance_id": gi,
            "compute_instance_id": ci,
            "memory_total_mib": total,
            "memory_used_mib": used,
            "processes": [{"pid": pid, "used_memory_mib": used_by[pid]} for pid in pids],
        }

    split = {
        "uuid": "GPU-8f0d4c2e-31b7-6a5e-92c4-7d1e0b3a5f61",
        "memory_used_mib": 30444,
        "mig": True,
        "slices": [slice_(*row) for row in H200_SLICES],
    }
    whole = {"uuid": "GPU-3a91e7c5-0b24-4d6f-a8e3-5c7b2f9d1e04", "memory_used_mib": 1}
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [split, whole])).read()
    assert_reads_as_the_h200_capture(reading)


# -- the shared rules -------------------------------------------------------------


@pytest.mark.parametrize(
    "name, profile",
    [
        ("NVIDIA H200 MIG 1g.18gb", "1g.18gb"),
        ("NVIDIA H200 MIG 1c.3g.71gb", "1c.3g.71gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", "1g.5gb+me"),
        ("A100-SXM4-40GB MIG 3g.20gb ", "3g.20gb"),
        ("x" * 100_000 + " MIG 2g.35gb", "2g.35gb"),
        ("NVIDIA H200", None),
        ("NVIDIA H200 MIG", None),
        ("NVIDIA H200 MIGHTY 1g", None),
        (None, None),
    ],
)
def test_the_profile_is_the_word_after_mig_in_the_devices_name(name, profile):
    assert mig.profile_of(name) == profile


@given(st.text())
def test_the_profile_of_any_name_is_some_of_its_own_text_or_none(name):
    found = mig.profile_of(name)
    assert found is None or (found in name and 0 < len(found) <= 40)


def test_odd_text_from_the_driver_is_kept_as_data_and_escaped_where_it_is_shown():
    name = "NVIDIA H200 MIG 1g.18gb\x1b]0;pwned\x07"
    facts = SliceFacts(0, uuid="MIG-\u202eabc", profile=mig.profile_of(name))
    assert facts.profile == "1g.18gb\x1b]0;pwned\x07"
    shown = printable_view(CardFacts(0, mig_mode=True, slices=(facts,)))
    assert shown.slices[0].profile == "1g.18gb\\x1b]0;pwned\\x07"
    assert shown.slices[0].uuid == "MIG-\\u202eabc"


A, B, C = ProcessFacts(1, 10), ProcessFacts(2, 20), ProcessFacts(3, None)


def test_a_slice_gets_the_cards_processes_that_name_its_instances_only_where_it_listed_none():
    unlisted = SliceFacts(0, gpu_instance_id=2, compute_instance_id=1, processes=None)
    listed = SliceFacts(1, gpu_instance_id=9, compute_instance_id=0, processes=(C,))
    no_ids = SliceFacts(2, processes=None)
    tagged = [(2, 1, A), (2, 0, B), (9, 0, B), (None, None, C)]
    assert [s.processes for s in mig.attribute([unlisted, listed, no_ids], tagged)] == [(A,), (C,), None]
    assert mig.attribute([unlisted], None) == (unlisted,)  # nothing to tell them by: still unknown


def test_the_cards_list_is_never_shorter_than_its_slices():
    slices = [SliceFacts(0, processes=(A, B)), SliceFacts(1, processes=(C,))]
    assert mig.card_processes([B], slices) == (B, A, C)
    assert mig.card_processes(None, slices) == (A, B, C)
    assert mig.card_processes(None, [*slices, SliceFacts(2, processes=None)]) is None
    assert mig.card_processes(None, []) is None
    assert mig.card_processes([A], []) == (A,)
