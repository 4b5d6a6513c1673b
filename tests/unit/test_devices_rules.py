"""The fence's rules, pure: what the driver's /proc files say, and which minors a job may open."""

from __future__ import annotations

import pytest

from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.nvidia import (
    MigMinors,
    NvidiaMajors,
    card_minor,
    parse_device_minor,
    parse_mig_minors,
    parse_proc_devices,
    proc_bus_id,
    read_majors,
    read_mig_minors,
)
from tpnode_tui.devices.rules import Grant, MajorRule, SliceGrant, device_rules

PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
195 nvidia-frontend
237 nvidia-uvm
238 nvidia-caps
511 nvidia-caps-imex-channels

Block devices:
  7 loop
238 not-a-char-device
"""

MIG_MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi1/access 5
gpu0/gi1/ci0/access 6
gpu2/gi1/access 21
gpu2/gi1/ci0/access 22
gpu2/gi1/ci1/access 23
gpu2/gi2/access 30
gpu2/gi2/ci0/access 31
gpu3/gi1/access 41
gpu3/gi1/ci0/access 42
"""


# ── /proc/devices ────────────────────────────────────────────────────────────


def test_proc_devices_gives_character_majors_by_name():
    majors = parse_proc_devices(PROC_DEVICES)
    assert majors["nvidia-uvm"] == 237
    assert majors["nvidia-caps"] == 238
    assert majors["nvidia-caps-imex-channels"] == 511
    assert majors["mem"] == 1
    # a block device's name is not a character device's
    assert "loop" not in majors and "not-a-char-device" not in majors


def test_proc_devices_skips_malformed_lines_and_keeps_the_first_of_a_name():
    text = (
        "Character devices:\n"
        "abc nvidia-uvm\n"  # not a number
        "  0 nvidia-uvm\n"  # major 0 is no device's
        "5000 nvidia-uvm\n"  # more than 12 bits
        "240\n"  # no name
        "241 nvidia-uvm\n"
        "242 nvidia-uvm\n"
        "\x1b[2J garbage line with escapes\n"
    )
    assert parse_proc_devices(text) == {"nvidia-uvm": 241}


def test_proc_devices_with_no_character_section_gives_nothing():
    assert parse_proc_devices("Block devices:\n  7 loop\n") == {}
    assert parse_proc_devices("") == {}


def test_majors_are_read_from_the_file_named(tmp_path):
    path = tmp_path / "devices"
    path.write_text(PROC_DEVICES)
    assert read_majors(path) == NvidiaMajors(uvm=237, caps=238)
    path.write_text("Character devices:\n  1 mem\n")
    assert read_majors(path) == NvidiaMajors(uvm=None, caps=None)


def test_majors_unreadable_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(CannotFence, match=r"cannot read .*/missing: No such file"):
        read_majors(tmp_path / "missing")


# ── mig-minors ───────────────────────────────────────────────────────────────


def test_mig_minors_names_each_capability():
    mig = parse_mig_minors(MIG_MINORS)
    assert mig.minor("config") == 1
    assert mig.minor("monitor") == 2
    assert mig.access(2, 1) == 21
    assert mig.access(2, 1, 0) == 22
    assert mig.access(2, 1, 1) == 23
    assert mig.access(3, 1, 0) == 42
    assert mig.access(5, 1) is None


def test_mig_minors_card_of_a_capability_is_its_gpu_number():
    assert MigMinors.card_of("gpu12/gi1/ci0/access") == 12
    assert MigMinors.card_of("gpu2/gi1/access") == 2
    assert MigMinors.card_of("config") is None
    assert MigMinors.card_of("gpuX/gi1/access") is None


def test_mig_minors_by_card_and_node_wide():
    mig = parse_mig_minors(MIG_MINORS)
    assert mig.on_card(2) == (21, 22, 23, 30, 31)
    assert mig.on_card(None) == (1, 2)
    assert mig.on_card(7) == ()


def test_mig_minors_listing_a_name_twice_keeps_the_first():
    mig = parse_mig_minors("config 1\nconfig 9\n")
    assert mig.minor("config") == 1


def test_mig_minors_skips_malformed_lines():
    mig = parse_mig_minors(
        "config 1\nmonitor\ngpu0/gi0/access x\ngpu0/gi0/ci0/access 4 5\nfoo 2000000\ngpu1/gi0/access 9\n"
    )
    assert mig.entries == (("config", 1), ("gpu1/gi0/access", 9))


def test_mig_minors_unreadable_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(CannotFence, match=r"cannot read .*mig-minors"):
        read_mig_minors(tmp_path / "mig-minors")


# ── a card's minor ───────────────────────────────────────────────────────────


def test_bus_id_is_written_as_the_driver_names_its_directory():
    assert proc_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert proc_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert proc_bus_id(" 00000001:C1:1F.7 ") == "0001:c1:1f.7"


@pytest.mark.parametrize("bad", ["../../etc", "0000:3b:00", "0000:3b:00.8", "00000000:3B:00.0/x", ""])
def test_a_bus_id_that_is_no_pci_address_is_refused(bad):
    with pytest.raises(CannotFence, match="is not a PCI bus id"):
        proc_bus_id(bad)


INFORMATION = """Model: \t\t NVIDIA H200
IRQ:   \t\t 83
GPU UUID: \t\t GPU-11111111-2222-3333-4444-555555555555
Video BIOS: \t\t 96.00.9f.00.01
Bus Type: \t\t PCIe
DMA Size: \t\t 52 bits
DMA Mask: \t\t 0xfffffffffffff
Bus Location: \t\t 0000:3b:00.0
Device Minor: \t\t 5
GPU Excluded:\t\t No
"""


def test_device_minor_is_read_from_the_information_file():
    assert parse_device_minor(INFORMATION) == 5


@pytest.mark.parametrize("text", ["", "Device Minor: \t abc\n", "Device Minor: 254\n", "Minor: 3\n"])
def test_no_device_minor_or_one_out_of_range_is_none(text):
    assert parse_device_minor(text) is None


def test_card_minor_reads_the_cards_directory(tmp_path):
    card = tmp_path / "0000:3b:00.0"
    card.mkdir()
    (card / "information").write_text(INFORMATION)
    assert card_minor("00000000:3B:00.0", tmp_path) == 5
    (card / "information").write_text("Model: x\n")
    with pytest.raises(CannotFence, match="names no Device Minor"):
        card_minor("00000000:3B:00.0", tmp_path)
    with pytest.raises(CannotFence, match=r"cannot read .*0000:5e:00.0/information"):
        card_minor("00000000:5E:00.0", tmp_path)


# ── the rules ────────────────────────────────────────────────────────────────

MAJORS = NvidiaMajors(uvm=237, caps=238)


def _rule(rules, major) -> MajorRule:
    return next(r for r in rules.majors if r.major == major)


def test_a_card_job_may_open_its_card_the_control_devices_and_uvm():
    rules = device_rules(Grant(cards=frozenset({2})), MAJORS, parse_mig_minors(MIG_MINORS))
    for major, minor in ((195, 2), (195, 255), (195, 254), (237, 0), (237, 1)):
        assert rules.allows(major, minor), (major, minor)


def test_a_card_job_may_open_no_other_card_and_no_capability():
    rules = device_rules(Grant(cards=frozenset({2})), MAJORS, parse_mig_minors(MIG_MINORS))
    for minor in (0, 1, 3, 7, 253):
        assert not rules.allows(195, minor)
    for minor in (1, 2, 21, 22, 41):
        assert not rules.allows(238, minor)
    assert not rules.allows(237, 2)  # a uvm minor that does not exist yet


def test_every_device_that_is_not_nvidias_stays_allowed():
    rules = device_rules(Grant(cards=frozenset({2})), MAJORS, parse_mig_minors(MIG_MINORS))
    assert rules.allows(1, 3)  # /dev/null
    assert rules.allows(511, 0)  # nvidia-caps-imex-channels is not fenced
    assert {r.major for r in rules.majors} == {195, 237, 238}


def test_a_job_on_several_cards_may_open_each():
    rules = device_rules(Grant(cards=frozenset({0, 5})), MAJORS)
    assert rules.allows(195, 0) and rules.allows(195, 5)
    assert not rules.allows(195, 1)


def test_a_mig_job_may_open_its_card_and_its_instances_capabilities_only():
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    rules = device_rules(grant, MAJORS, parse_mig_minors(MIG_MINORS))
    assert rules.allows(195, 2)
    assert _rule(rules, 238).allowed == {21, 22}
    assert not rules.allows(238, 23)  # another compute instance of its GPU instance
    assert not rules.allows(238, 30)  # another GPU instance of its card
    assert not rules.allows(238, 1) and not rules.allows(238, 2)  # config and monitor
    assert not rules.allows(195, 3)


def test_the_deny_list_names_every_card_minor_but_the_jobs():
    rules = device_rules(Grant(cards=frozenset({2})), MAJORS, parse_mig_minors(MIG_MINORS))
    denied = _rule(rules, 195).denied
    assert denied is not None
    assert 2 not in denied and 254 not in denied and 255 not in denied
    assert set(denied) == set(range(254)) - {2}
    assert _rule(rules, 237).denied == ()


def test_the_capabilities_deny_list_names_the_node_wide_ones_and_the_jobs_own_cards():
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    rules = device_rules(grant, MAJORS, parse_mig_minors(MIG_MINORS))
    # config, monitor, and card 2's capabilities but the slice's own; card 0's and 3's need their card's file
    assert _rule(rules, 238).denied == (1, 2, 23, 30, 31)


def test_no_mig_minors_leaves_the_capabilities_deny_list_unknown_not_empty():
    rules = device_rules(Grant(cards=frozenset({2})), MAJORS, None, "cannot read it")
    caps = _rule(rules, 238)
    assert caps.allowed == frozenset() and caps.denied is None


def test_a_slice_whose_capability_is_not_listed_cannot_be_fenced():
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=5, compute_instance=0),))
    with pytest.raises(CannotFence, match="lists no gpu2/gi5/access"):
        device_rules(grant, MAJORS, parse_mig_minors(MIG_MINORS))


def test_a_slice_without_mig_minors_cannot_be_fenced_and_says_why():
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    with pytest.raises(CannotFence, match="not known \\(cannot read /x\\)"):
        device_rules(grant, MAJORS, None, "cannot read /x")
    with pytest.raises(CannotFence, match="lists no nvidia-caps major"):
        device_rules(grant, NvidiaMajors(uvm=237), parse_mig_minors(MIG_MINORS))


def test_a_module_not_loaded_has_no_rule():
    rules = device_rules(Grant(cards=frozenset({1})), NvidiaMajors())
    assert [r.major for r in rules.majors] == [195]


@pytest.mark.parametrize(
    "majors", [NvidiaMajors(uvm=195, caps=238), NvidiaMajors(uvm=238, caps=238), NvidiaMajors(caps=195)]
)
def test_majors_that_collide_are_refused(majors):
    with pytest.raises(CannotFence, match="one major twice"):
        device_rules(Grant(cards=frozenset({1})), majors)


@pytest.mark.parametrize("card", [-1, 254, 255, 1000])
def test_a_card_minor_no_card_can_have_is_refused(card):
    with pytest.raises(CannotFence, match="is not a card's device minor"):
        device_rules(Grant(cards=frozenset({card})), MAJORS)


def test_a_mig_id_out_of_range_is_refused():
    with pytest.raises(CannotFence, match="is not a MIG id"):
        device_rules(Grant(slices=(SliceGrant(2, -1, 0),)), MAJORS, parse_mig_minors(MIG_MINORS))
