"""The simulated probe: a node described by a JSON file that is read on every read."""

from __future__ import annotations

import asyncio
import json

import pytest

from helpers.services import write_scene
from tpnode_tui.model.facts import ProcessFacts, SliceFacts
from tpnode_tui.probes import health
from tpnode_tui.probes.simulated import SimulatedProbe


async def test_an_idle_node(scene):
    reading = await SimulatedProbe(scene).read()
    assert reading.source == "simulated"
    assert (reading.count, reading.external_probe_ok, reading.problem) == (8, True, None)
    card = reading.cards[3]
    assert (card.index, card.name, card.memory_total_mib, card.memory_used_mib) == (3, "NVIDIA H200", 143771, 0)
    assert card.processes == () and card.health == ()
    assert len({c.uuid for c in reading.cards}) == 8


async def test_missing_keys_take_idle_defaults(tmp_path):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [{}])).read()
    (card,) = reading.cards
    assert (card.memory_used_mib, card.utilization_pct, card.processes, card.health) == (0, 0, (), ())
    assert (card.mig_mode, card.mig_pending, card.slices) == (False, None, ())  # a whole card
    assert not card.in_use(512)
    assert (card.temperature_c, card.power_w) == (None, None)  # not made up


async def test_a_cards_device_minor_is_its_index_unless_given_and_null_is_unknown(tmp_path):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [{}, {"minor": 7}, {"minor": None}])).read()
    assert [c.minor for c in reading.cards] == [0, 7, None]
    big = await SimulatedProbe(write_scene(tmp_path / "big.json", [{}] * 256)).read()
    assert [c.minor for c in big.cards[252:]] == [252, 253, None, None]  # 254 and 255 are the driver's own files


@pytest.mark.parametrize("minor", [254, -1, "3", 1.5])
async def test_a_minor_no_card_file_can_have_is_a_bad_scene(tmp_path, minor):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [{"minor": minor}])).read()
    assert not reading.external_probe_ok and '"minor" must be' in reading.problem


async def test_the_file_is_read_again_on_every_read(scene):
    probe = SimulatedProbe(scene)
    assert not (await probe.read()).cards[2].in_use(512)

    write_scene(scene, [{}, {}, {"memory_used_mib": 30000, "processes": [{"pid": 4242, "used_memory_mib": 30000}]}])
    reading = await probe.read()
    assert reading.count == 3
    assert reading.cards[2].processes == (ProcessFacts(4242, 30000),)
    assert reading.cards[2].in_use(512)

    write_scene(scene, 8)
    assert (await probe.read()).count == 8


async def test_every_field_given(tmp_path):
    card = {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-abc",
        "pci_bus_id": "00000000:07:00.0",
        "memory_total_mib": 81920,
        "memory_used_mib": 12,
        "utilization_pct": 55,
        "temperature_c": 40,
        "power_w": 88.5,
        "processes": [{"pid": 9}],
    }
    (facts,) = (await SimulatedProbe(write_scene(tmp_path / "n.json", [card])).read()).cards
    assert (facts.name, facts.uuid, facts.pci_bus_id) == ("NVIDIA A100-SXM4-80GB", "GPU-abc", "00000000:07:00.0")
    assert (facts.memory_total_mib, facts.memory_used_mib, facts.utilization_pct) == (81920, 12, 55)
    assert (facts.temperature_c, facts.power_w) == (40, 88.5)
    assert facts.processes == (ProcessFacts(9, None),)


@pytest.mark.parametrize(
    "signals, reasons",
    [
        ({"retired_pages_pending": True}, (health.RETIRED_PAGES_PENDING,)),
        ({"row_remap_pending": True}, (health.ROW_REMAP_PENDING,)),
        ({"row_remap_failure": True}, (health.ROW_REMAP_FAILED,)),
        ({"ecc_uncorrected_volatile": 5}, ("5 uncorrected ECC errors",)),
        ({"hw_slowdown": True}, ("hardware slowdown (heat or power)",)),
        ({"hw_slowdown": "thermal"}, ("hardware slowdown (thermal)",)),
        ({"ecc_uncorrected_volatile": 0, "hw_slowdown": False}, ()),
    ],
)
async def test_health_uses_the_same_words_as_the_drivers(tmp_path, signals, reasons):
    path = write_scene(tmp_path / "n.json", [{}, {"health": signals}])
    reading = await SimulatedProbe(path).read()
    assert reading.cards[1].health == reasons and reading.cards[0].health == ()


async def test_a_lost_gpu(tmp_path):
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [{}, {"lost": True}])).read()
    assert reading.count == 2
    assert reading.cards[1].health == (health.GPU_LOST,) and reading.cards[1].memory_used_mib is None
    assert (reading.cards[1].mig_mode, reading.cards[1].slices) == (None, None)
    assert reading.external_probe_ok


async def test_blind_keeps_the_count_but_sees_no_use(tmp_path):
    path = write_scene(tmp_path / "n.json", [{"memory_used_mib": 30000}, {}], blind=True)
    reading = await SimulatedProbe(path).read()
    assert reading.count == 2 and not reading.external_probe_ok
    assert all(c.memory_used_mib is None and c.processes is None for c in reading.cards)
    assert "cannot be probed" in reading.problem and str(path) in reading.problem


async def test_one_card_whose_memory_cannot_be_read(tmp_path):
    path = write_scene(tmp_path / "n.json", [{}, {"memory_used_mib": None, "processes": None}])
    reading = await SimulatedProbe(path).read()
    assert not reading.external_probe_ok
    assert reading.problem.startswith("memory use could not be read on card 1")


async def test_fail_and_hang_for_fault_tests(tmp_path):
    path = write_scene(tmp_path / "n.json", 2, fail="NVML: driver not loaded")
    reading = await SimulatedProbe(path).read()
    assert (reading.problem, reading.external_probe_ok, reading.cards) == ("NVML: driver not loaded", False, ())

    write_scene(path, 2, hang_s=60)
    reading = await asyncio.wait_for(SimulatedProbe(path, timeout_s=0.1).read(), 5)
    assert reading.problem == "the simulated driver did not answer within 0.1 s"
    assert not reading.external_probe_ok


async def test_a_card_in_mig_mode_lists_its_slices_and_their_processes(tmp_path):
    card = {
        "mig": True,
        "memory_used_mib": 12000,
        "processes": [{"pid": 777}],
        "slices": [
            {
                "profile": "1g.18gb",
                "uuid": "MIG-a",
                "gpu_instance_id": 9,
                "compute_instance_id": 0,
                "memory_total_mib": 16384,
                "memory_used_mib": 9013,
                "processes": [{"pid": 5151, "used_memory_mib": 9000}],
            },
            {"profile": "2g.35gb"},
        ],
    }
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [card, {}])).read()
    split, whole = reading.cards
    assert (split.mig_mode, split.mig_pending, split.utilization_pct) == (True, None, None)
    assert split.slices == (
        SliceFacts(0, "MIG-a", "1g.18gb", 9, 0, 16384, 9013, (ProcessFacts(5151, 9000),)),
        SliceFacts(1, "MIG-00000000-0000-5000-8000-000000000001", "2g.35gb", memory_used_mib=0, processes=()),
    )
    # the card's list: the process whose slice cannot be told, and every slice's
    assert split.processes == (ProcessFacts(777), ProcessFacts(5151, 9000))
    assert (whole.mig_mode, whole.slices) == (False, ())
    assert reading.external_probe_ok and reading.problem is None


@pytest.mark.parametrize(
    "card, mode",
    [
        ({"mig_pending": True}, (False, True, ())),
        ({"mig": True, "mig_pending": False}, (True, False, ())),
        ({"mig": True, "mig_pending": True}, (True, None, ())),
        ({"mig": True, "slices": None}, (True, None, None)),
        ({"mig": None}, (None, None, None)),
    ],
)
async def test_mig_modes_pending_a_reset_and_unknowns(tmp_path, card, mode):
    (facts,) = (await SimulatedProbe(write_scene(tmp_path / "n.json", [card])).read()).cards
    assert (facts.mig_mode, facts.mig_pending, facts.slices) == mode


async def test_blind_sees_no_use_on_slices_either(tmp_path):
    card = {"mig": True, "slices": [{"memory_used_mib": 9000, "processes": [{"pid": 1}]}]}
    reading = await SimulatedProbe(write_scene(tmp_path / "n.json", [card], blind=True)).read()
    (facts,) = reading.cards
    assert (facts.slices[0].memory_used_mib, facts.slices[0].processes, facts.processes) == (None, None, None)
    assert not reading.external_probe_ok


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "cannot be read (No such file or directory)"),
        ("{not json", "is not valid JSON (Expecting property name enclosed in double quotes at line 1, column 2)"),
        ("[]", "the file must be a JSON object"),
        ('{"cards": 3}', 'must hold a "cards" list'),
        ('{"cards": [7]}', "card 0 must be a JSON object, not 7"),
        ('{"cards": [{"memory_used_mib": "lots"}]}', 'card 0: "memory_used_mib" must be a whole number of 0 or more'),
        ('{"cards": [{"memory_used_mib": true}]}', 'card 0: "memory_used_mib" must be a whole number'),
        ('{"cards": [{}, {"memory_total_mib": -1}]}', 'card 1: "memory_total_mib" must be a whole number of 0 or more'),
        ('{"cards": [{"processes": [{"used_memory_mib": 3}]}]}', 'card 0, process 0: "pid" is missing'),
        ('{"cards": [{"health": {"hw_slowdown": "yes"}}]}', '"hw_slowdown" must be true, false, "thermal"'),
        ('{"cards": [{"health": {"row_remap_pending": 1}}]}', '"row_remap_pending" must be true or false'),
        ('{"blind": "no", "cards": []}', '"blind" must be true or false'),
        ('{"cards": [{"mig": "yes"}]}', 'card 0: "mig" must be true, false or null, not "yes"'),
        ('{"cards": [{"slices": [{}]}]}', 'card 0: "slices" are listed, but the card is not in MIG mode'),
        ('{"cards": [{"mig": true, "slices": 3}]}', 'card 0: "slices" must be a list, not 3'),
        ('{"cards": [{"mig": true, "slices": [7]}]}', "card 0, slice 0 must be a JSON object, not 7"),
        (
            '{"cards": [{"mig": true, "slices": [{}, {"gpu_instance_id": -1}]}]}',
            'card 0, slice 1: "gpu_instance_id" must be a whole number of 0 or more',
        ),
        ('{"cards": [{"mig": true, "slices": [{"processes": [{}]}]}]}', 'card 0, slice 0, process 0: "pid" is missing'),
    ],
)
async def test_a_bad_file_is_blind_and_says_what_is_wrong(tmp_path, content, says):
    path = tmp_path / "node.json"
    if content is not None:
        path.write_text(content)
    reading = await SimulatedProbe(path).read()
    assert (reading.cards, reading.external_probe_ok) == ((), False)
    assert reading.problem.startswith(f"simulated node {path}: ")
    assert says in reading.problem


async def test_a_file_that_is_not_text(tmp_path):
    path = tmp_path / "node.json"
    path.write_bytes(b"\xff\xfe" + json.dumps({"cards": []}).encode("utf-16-le"))
    reading = await SimulatedProbe(path).read()
    assert "is not UTF-8 text" in reading.problem and not reading.external_probe_ok
