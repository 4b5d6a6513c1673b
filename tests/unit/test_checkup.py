"""A card's check, read without a child: tier A over an nvidia-ml-py that raises the real error
classes (tests/helpers/nvml.py), each criterion judged, what a drain until a reboot asks, and
where a check is kept (the drain file's new fields, checks.json, the snapshot document).

The check's own processes, its command and what it does to a node are in tests/service/test_checks.py.
"""

from __future__ import annotations

import json
import time

import pytest

from helpers.nvml import (
    FakeCard,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_NotSupported,
    NVMLError_Unknown,
    consumer_style,
)
from tpnode_tui.core.checkup import command_finding, read_findings, reboot_finding, stays_drained, xid_finding
from tpnode_tui.model.checks import (
    FAILED,
    MET,
    NOT_ASKED,
    NOT_MET,
    PASSED,
    UNKNOWN,
    UNTOLD,
    CardCheck,
    CheckFacts,
    CommandRun,
    Finding,
    outcome_of,
)
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.views import Drain
from tpnode_tui.port.wire.checks import check_from_json, check_to_json
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.probes.checkup import facts_from_json, facts_to_json, nvml_facts
from tpnode_tui.probes.simulated import SimulatedProbe, check_facts
from tpnode_tui.state.checks import CheckStore
from tpnode_tui.state.drains import DrainStore

UUID = "GPU-1c0f8a1e-0000-4000-8000-000000000001"


def judged(card: FakeCard, drain: Drain | None = None) -> dict[str, Finding]:
    """Tier A of card 1 of a two-card node, each criterion by name."""
    facts = nvml_facts(FakeNvml([FakeCard(), card]), UUID)
    return {f.name: f for f in read_findings(facts, None, drain)}


def outcomes(findings: dict[str, Finding]) -> dict[str, str]:
    return {name: f.outcome for name, f in findings.items()}


# ── tier A, through NVML ────────────────────────────────────────────────────


def test_a_healthy_card_meets_every_criterion_found_by_its_uuid():
    found = judged(FakeCard(recovery_action=0))
    assert outcomes(found) == {
        "answers": MET,
        "ecc": MET,
        "row remapping": MET,
        "recovery": MET,
        "pcie": MET,
        "processes": MET,
    }
    assert found["answers"].words == f"the card answers by its uuid {UUID}"
    assert found["pcie"].words == "PCIe link at gen 5 x16, its maximum"
    assert outcome_of(tuple(found.values())) == PASSED


def test_the_drivers_recovery_action_keeps_a_card_out_and_says_what_it_needs():
    reset, reboot = judged(FakeCard(recovery_action=1)), judged(FakeCard(recovery_action=2))
    assert reset["recovery"] == Finding(
        "recovery", NOT_MET, "the driver asks to reset the GPU (nvidia-smi -r) once nothing runs on it"
    )
    assert reboot["recovery"] == Finding("recovery", NOT_MET, "the driver asks to reboot the node")
    assert judged(FakeCard(recovery_action=None))["recovery"].outcome == NOT_ASKED  # an older driver: no such field


def test_row_remapping_pending_or_failed_fails_the_check():
    assert judged(FakeCard(row_remap_pending=True))["row remapping"] == Finding(
        "row remapping", NOT_MET, "row remapping pending: reset the GPU (nvidia-smi -r)"
    )
    assert judged(FakeCard(row_remap_failure=True))["row remapping"].words == (
        "row remapping failed: the card must be serviced"
    )


def test_uncorrectable_ecc_errors_are_counted_from_the_drain_else_since_the_driver_loaded():
    drained = Drain(card=1, reason="XID 48", by="xid", at=1.0, source="xid", xid=48, ecc=3)
    # the errors that made the drain are in its count: only more fail the check
    assert judged(FakeCard(ecc_uncorrected=1, ecc_uncorrected_total=3), drained)["ecc"].outcome == MET
    assert judged(FakeCard(ecc_uncorrected_total=5), drained)["ecc"] == Finding(
        "ecc", NOT_MET, "2 more uncorrectable ECC errors since the drain (5, was 3)"
    )
    # no count from a drain: none since the driver last loaded
    assert judged(FakeCard(ecc_uncorrected=2))["ecc"] == Finding(
        "ecc", NOT_MET, "2 uncorrectable ECC errors since the driver last loaded"
    )
    assert judged(FakeCard(ecc_uncorrected_total=9))["ecc"].outcome == MET


def test_the_pcie_link_below_its_maximum_fails_unless_an_idle_card_only_lowered_its_generation():
    assert judged(FakeCard(link_width=8))["pcie"] == Finding(
        "pcie", NOT_MET, "PCIe link x8, below its maximum width x16"
    )
    assert judged(FakeCard(link_gen=3))["pcie"] == Finding(
        "pcie", NOT_MET, "PCIe link at gen 3 x16, below its maximum gen 5"
    )
    idle = judged(FakeCard(link_gen=1, pstate=8))["pcie"]
    assert idle == Finding("pcie", MET, "PCIe link x16, its maximum width; gen 1 of 5: the card saves power in P8")
    assert judged(FakeCard(link_gen=1, link_width=4, pstate=8))["pcie"].outcome == NOT_MET


def test_processes_on_the_card_fail_the_check():
    assert judged(FakeCard(processes=[(4242, 100), (777, None)]))["processes"] == Finding(
        "processes", NOT_MET, "processes on it: pid 4242, 777"
    )


def test_a_fact_the_card_has_not_is_not_asked_and_one_that_cannot_be_read_is_not_told():
    card = consumer_style()
    for field in ("ecc", "remapped_rows", "field_values", "link_gen"):
        card.errors[field] = NVMLError_NotSupported
    card.errors["processes"] = NVMLError_Unknown
    found = judged(card)
    assert outcomes(found) == {
        "answers": MET,
        "ecc": NOT_ASKED,
        "row remapping": NOT_ASKED,
        "recovery": NOT_ASKED,
        "pcie": NOT_ASKED,
        "processes": UNTOLD,
    }
    assert found["processes"].words == "the process list could not be read (Unknown Error)"
    assert outcome_of(tuple(found.values())) == UNKNOWN  # unknown is not fine: it does not pass


def test_a_card_that_does_not_answer_by_its_uuid_fails_and_a_driver_that_cannot_start_is_not_told():
    lost = nvml_facts(FakeNvml([FakeCard(), FakeCard(lost=True)]), UUID)
    assert (lost.answered, lost.problem) == (False, "GPU is lost (fell off the bus; needs a reset or reboot)")
    [finding] = read_findings(lost, None, None)
    assert finding.outcome == NOT_MET and finding.words.startswith(f"the card does not answer by its uuid {UUID}")
    gone = nvml_facts(FakeNvml([FakeCard()]), UUID)
    assert not gone.answered and gone.problem.startswith(f"the driver finds no card by uuid {UUID}")
    down = nvml_facts(FakeNvml(init_error=NVMLError_DriverNotLoaded), UUID)
    assert not down.answered and not down.reached and "driver not loaded" in down.problem
    [not_asked] = read_findings(down, None, None)  # the node's fault, not the card's: it is not drained for it
    assert not_asked.outcome == UNTOLD and not_asked.words.startswith("the driver could not be asked: NVML: driver")
    [untold] = read_findings(None, "the driver did not answer within 30 s (the reading was killed)", None)
    assert untold.outcome == UNTOLD


def test_what_the_child_prints_reads_back_as_it_was_and_anything_else_is_refused():
    facts = nvml_facts(FakeNvml([FakeCard(), FakeCard(processes=[(5, 1)], recovery_action=1, pstate=8)]), UUID)
    assert facts_from_json(json.loads(json.dumps(facts_to_json(facts)))) == facts
    for bad in ({"uuid": UUID}, {**facts_to_json(facts), "processes": ["5"]}, {**facts_to_json(facts), "unread": [1]}):
        with pytest.raises(WireError):
            facts_from_json(bad)


# ── tier A, on the simulated node ───────────────────────────────────────────


def test_the_simulated_node_answers_a_check_as_nvml_does(tmp_path):
    scene = tmp_path / "node.json"
    scene.write_text(
        json.dumps(
            {
                "cards": [
                    {},
                    {
                        "recovery_action": 2,
                        "pstate": 8,
                        "pcie": {"gen": 1, "width": 8},
                        "health": {"ecc_uncorrected_total": 4, "row_remap_pending": True},
                    },
                    {"lost": True},
                ]
            }
        )
    )
    uuids = [f"GPU-00000000-0000-4000-8000-{i:012d}" for i in range(3)]
    facts = check_facts(scene, uuids[1])
    assert facts == CheckFacts(
        uuids[1],
        answered=True,
        ecc_total=4,
        ecc_volatile=0,
        remap_pending=True,
        remap_failed=False,
        recovery_action=2,
        link_gen=1,
        link_gen_max=5,
        link_width=8,
        link_width_max=16,
        pstate=8,
        processes=(),
    )
    assert check_facts(scene, uuids[2]).problem == "GPU is lost (fell off the bus; needs a reset or reboot)"
    assert check_facts(scene, uuids[2]).reached  # the driver answers: the card is lost
    assert not check_facts(scene, "GPU-nobody").answered
    assert outcome_of(read_findings(check_facts(scene, uuids[0]), None, None)) == PASSED
    scene.write_text(json.dumps({"fail": "the driver is wedged", "cards": [{}]}))
    wedged = check_facts(scene, uuids[0])
    assert (wedged.reached, wedged.problem) == (False, "the driver is wedged")


async def test_the_simulated_drivers_recovery_action_and_ecc_count_are_in_its_reading(tmp_path):
    scene = tmp_path / "node.json"
    scene.write_text(json.dumps({"cards": [{"recovery_action": 1}, {"health": {"ecc_uncorrected_total": 7}}]}))
    first, second = (await SimulatedProbe(scene).read()).cards
    assert first.health == ("the driver asks to reset the GPU (nvidia-smi -r) once nothing runs on it",)
    assert (first.ecc_uncorrected_total, second.ecc_uncorrected_total, second.health) == (0, 7, ())


async def test_the_nvml_probe_reads_each_cards_ecc_count_over_its_life(nvml_probe):
    reading = await nvml_probe(FakeNvml([FakeCard(ecc_uncorrected_total=12), consumer_style()])).read()
    assert [c.ecc_uncorrected_total for c in reading.cards] == [12, 0]
    card = FakeCard()
    card.errors["ecc_total"] = NVMLError_NotSupported
    assert (await nvml_probe(FakeNvml([card])).read()).cards[0].ecc_uncorrected_total is None


# ── the other criteria ──────────────────────────────────────────────────────


def test_a_drain_until_a_reboot_asks_for_a_changed_boot_id():
    drain = Drain(card=7, reason="XID 79: GPU has fallen off the bus; reboot the node", by="xid", at=1.0, source="xid")
    assert reboot_finding(drain, "boot-a") is None  # not one until a reboot
    until = Drain(**{**vars(drain), "boot": "boot-a", "reboot": True})
    assert reboot_finding(until, "boot-a").outcome == NOT_MET
    assert reboot_finding(until, "boot-b") == Finding("reboot", MET, "the node has rebooted since the drain")
    assert reboot_finding(until, None).outcome == UNTOLD
    assert reboot_finding(Drain(**{**vars(drain), "reboot": True}), "boot-b").outcome == UNTOLD


def test_an_xid_after_the_drain_or_the_last_check_fails_the_check_and_unwatched_xids_are_not_told():
    now = time.time()
    assert xid_finding([(79, 100.0)], 100.0, "the drain at 10:00", None, now).outcome == MET  # the drain's own
    later = xid_finding([(79, 100.0), (13, 150.0), (31, 120.0)], 100.0, "the drain at 10:00", None, now)
    assert later.outcome == NOT_MET and later.words.startswith("XID 13 at ")
    assert later.words.endswith("after the drain at 10:00")
    assert xid_finding([], 0.0, "the node began watching", "starting", now).outcome == UNTOLD


def test_the_check_command_passes_on_exit_0_only():
    assert command_finding(CommandRun("burn 0", 0, 95.0)) == Finding("command", MET, "burn 0 exited 0 after 1m35s")
    failed = command_finding(CommandRun("burn 0", 3, 2.0, tail=("line", "ECC page fault at 0x1")))
    assert failed == Finding(
        "command", NOT_MET, "burn 0 ended with exit code 3 after 2s; it said: ECC page fault at 0x1"
    )
    assert command_finding(CommandRun("burn 0", -9, 2.0)).words == "burn 0 ended with signal 9 after 2s"
    assert command_finding(CommandRun("burn 0", None, 30.0, timed_out=True)).outcome == NOT_MET
    assert command_finding(CommandRun("burn 0", None, 0.0, problem="burn could not be started")).outcome == UNTOLD


def test_a_drain_until_a_reboot_is_lifted_only_after_a_reboot_and_a_check_passed_since():
    drain = Drain(card=7, reason="XID 79: GPU has fallen off the bus; reboot the node", by="xid", at=100.0)
    until = Drain(**{**vars(drain), "source": "xid", "boot": "a", "reboot": True})
    assert stays_drained(drain, "a", None, 200.0) is None  # not one until a reboot: as before
    same_boot = stays_drained(until, "a", None, 200.0)
    assert "has not rebooted since" in same_boot and "undrain 7 --force" in same_boot
    passed = CardCheck(7, "GPU-x", "root", 150.0, 160.0, "b", PASSED, ())
    assert "no check of the card has passed since" in stays_drained(until, "b", None, 200.0)
    assert "no check" in stays_drained(until, "b", CardCheck(**{**vars(passed), "outcome": FAILED}), 200.0)
    assert "no check" in stays_drained(until, "c", passed, 200.0)  # passed in another boot
    assert stays_drained(until, "b", passed, 200.0) is None


# ── where a check is kept ───────────────────────────────────────────────────


def a_check(card: int = 3) -> CardCheck:
    return CardCheck(
        card,
        "GPU-x",
        "root",
        10.0,
        20.5,
        "boot-a",
        FAILED,
        (Finding("answers", MET, "the card answers"), Finding("command", NOT_MET, "burn ended with exit code 1")),
        CommandRun("burn GPU-x", 1, 10.5, tail=("\\x1b[2J", "bye")),
        "drained",
    )


def test_a_check_reads_back_from_its_json_as_it_was_and_strictly():
    check = a_check()
    assert check_from_json(json.loads(json.dumps(check_to_json(check)))) == check
    for wrong in ({"outcome": "maybe"}, {"findings": [{"name": "x", "outcome": "ok"}]}, {"at": "noon"}):
        with pytest.raises(WireError):
            check_from_json(check_to_json(check) | wrong)


def test_each_cards_last_check_is_kept_and_one_that_cannot_be_read_is_set_aside(tmp_path):
    store = CheckStore(tmp_path)
    store.keep(a_check(3))
    store.keep(a_check(5))
    store.keep(CardCheck(**{**vars(a_check(3)), "outcome": PASSED, "at": 30.0}))
    kept = store.read()
    assert sorted(kept) == [3, 5] and (kept[3].outcome, kept[3].at) == (PASSED, 30.0)
    doc = json.loads(store.path.read_text())
    doc["cards"]["5"]["outcome"] = "maybe"
    store.path.write_text(json.dumps(doc))
    assert sorted(store.read()) == [3]
    assert (tmp_path / "checks.rejected.json").exists()


def test_a_drain_file_of_the_first_version_is_read_and_what_a_check_needs_is_noted_on_a_drain(tmp_path):
    (tmp_path / "drains.json").write_text(
        json.dumps(
            {"version": 1, "cards": {"7": {"reason": "XID 79", "by": "xid", "at": 5.0, "source": "xid", "xid": 79}}}
        )
    )
    drains = DrainStore(tmp_path)
    old = drains.read()[7]
    assert (old.boot, old.reboot, old.ecc, old.later_xid) == (None, False, None, None)
    assert drains.note_xid(7, 13, 5.0) is None  # the drain's own moment: not after it
    assert drains.note_xid(7, 13, 9.0).later_xid == 13 and drains.note_xid(3, 13, 9.0) is None
    assert drains.note_ecc(old, 4).ecc == 4 and drains.note_ecc(old, 6) is None  # once
    assert drains.read()[7].ecc == 4 and json.loads(drains.path.read_text())["version"] == 2
    other = Drain(card=7, reason="another", by="root", at=6.0)
    assert drains.undrain_if(other) is None and 7 in drains.read()  # judged against another drain: kept
    assert drains.undrain_if(old).reason == "XID 79" and drains.read() == {}


def test_a_drain_file_with_a_wrong_new_field_stops_allocation_as_before(tmp_path):
    (tmp_path / "drains.json").write_text(
        json.dumps({"version": 2, "cards": {"7": {"reason": "r", "by": "b", "at": 5.0, "reboot": "yes"}}})
    )
    with pytest.raises(RuntimeUnavailable, match="reboot true or false"):
        DrainStore(tmp_path).read()
