"""A card's check on a node served in the test's process: real child processes for tier A and
for the check command, a real drain file, a boot id the test changes (a reboot), XIDs raised
through the simulated node's file.

Tier A here reads the simulated node, in the check's own child, as it reads NVML on a real one
(tests/unit/test_checkup.py has NVML's side, over its stand-in); the command is a script of the
test's, as an operator's would be. Nothing here measures time: a check that hangs is shown to be
killed, and the node to go on meanwhile, by what happened, not by how long it took.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat

import psutil
import pytest

from helpers.callers import ALICE, BOB, ROOT
from helpers.waiting import until, until_async
from tpnode_tui.model.checks import FAILED, MET, PASSED, UNKNOWN, UNTOLD
from tpnode_tui.model.errors import Conflict, NotAllowed, exit_code
from tpnode_tui.port.types.checks import CheckRequest
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.operators import DrainRequest, UndrainRequest
from tpnode_tui.port.types.readings import Nothing
from tpnode_tui.state.checks import CheckStore

pytestmark = pytest.mark.service_node(probe="scene", runtime="memory", cards=8)


def uuid_of(card: int) -> str:
    """The simulated node's uuid of a card that names none."""
    return f"GPU-00000000-0000-4000-8000-{card:012d}"


@pytest.fixture
def boot(tmp_path):
    """This boot's id, as the node reads it (TUNEPLANE_BOOT_ID); write another to reboot."""
    path = tmp_path / "boot_id"
    path.write_text("boot-a\n")
    return path


def checked_node(make_node, boot, **settings):
    """A node that watches XIDs (as an agent does), its boot id the test's."""
    node = make_node(settings={"triage_boot_id": str(boot), **settings})
    node.serve()
    return node


async def watched(node) -> None:
    await until_async(lambda: (s := node.service.reading.snapshot) and s.xid_watch == "simulated", "the XID watcher")


def findings(check) -> dict[str, str]:
    return {f.name: f.outcome for f in check.findings}


def script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def children_running(marker: str) -> list[psutil.Process]:
    """This node's check children still running: their command line names ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if any(marker in part for part in cmdline) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


# ── a card that passes, fails, or cannot be told ────────────────────────────


async def test_a_healthy_card_passes_and_its_check_is_kept_logged_and_in_every_snapshot(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    check = await node.service.check(ROOT, CheckRequest(1))
    assert (check.card, check.uuid, check.by, check.outcome, check.boot) == (1, uuid_of(1), "root", PASSED, "boot-a")
    assert findings(check) == {
        "answers": MET,
        "ecc": MET,
        "row remapping": MET,
        "recovery": MET,
        "pcie": MET,
        "processes": MET,
        "xid": MET,
    }
    assert check.effect == ""  # in service, and it stays so
    [entry] = node.kinds("check")
    assert (entry["cards"], entry["outcome"], entry["by"]) == ([1], "passed", "root")
    assert entry["message"] == "card 1 passed its check"
    [audit] = [e for e in node.kinds("action") if e["action"] == "check"]
    assert audit["result"] == "ok" and audit["message"] == "root checked card 1, which passed its check"
    view = await node.service.status(ROOT, Nothing())
    assert view.snapshot.cards[1].check == check and view.snapshot.cards[0].check is None
    assert CheckStore(node.state).read() == {1: check}
    await node.close()
    again = make_node(settings={"triage_boot_id": str(boot)})  # a restart: the check is still the card's last
    assert (await again.service.status(ROOT, Nothing())).snapshot.cards[1].check == check


async def test_only_an_operator_checks_a_card_and_never_one_a_job_holds(make_node, boot):
    node = checked_node(make_node, boot)
    with pytest.raises(NotAllowed, match="bob may not check card 1: only an operator") as refused:
        await node.service.check(BOB, CheckRequest(1))
    assert exit_code(refused.value) == 77
    launched = await node.service.launch(ALICE, LaunchRequest(cards=1, command=("train",), run_id="a1"))
    [held] = launched.launched.gpus
    with pytest.raises(Conflict, match=f"card {held} is held by a1 of alice: a check would disturb it"):
        await node.service.check(ROOT, CheckRequest(held))
    assert node.kinds("check") == []


async def test_a_card_that_fails_its_check_in_service_is_drained_by_the_node(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    node.edit(2, pcie={"width": 8}, health={"row_remap_pending": True}, recovery_action=1)
    check = await node.service.check(ROOT, CheckRequest(2))
    assert check.outcome == FAILED and check.effect == "drained"
    assert {f.name: f.words for f in check.against} == {
        "row remapping": "row remapping pending: reset the GPU (nvidia-smi -r)",
        "recovery": "the driver asks to reset the GPU (nvidia-smi -r) once nothing runs on it",
        "pcie": "PCIe link x8, below its maximum width x16",
    }
    snap = await node.service.read_now()
    drain = snap.cards[2].drain
    assert (drain.source, drain.by, drain.boot) == ("check", "check", "boot-a")
    assert drain.reason.startswith("failed its check: row remapping pending")
    assert [e["cards"] for e in node.kinds("drain")] == [[2]] and node.kinds("drain")[0]["source"] == "check"
    assert node.kinds("check")[0]["message"].endswith("; drained")
    with pytest.raises(Exception, match="no capacity|free"):
        await node.service.launch(ALICE, LaunchRequest(cards=8, command=("train",), run_id="all"))


async def test_a_process_on_the_card_fails_its_check(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    node.put(3, os.getpid())
    check = await node.service.check(ROOT, CheckRequest(3))
    assert check.outcome == FAILED and {f.words for f in check.against} == {f"processes on it: pid {os.getpid()}"}


async def test_a_check_whose_driver_hangs_is_killed_at_its_deadline_and_the_node_goes_on_meanwhile(make_node, boot):
    node = checked_node(make_node, boot, triage_check_timeout_s="2")
    await watched(node)
    node.edit(1, check_hang_s=3600)
    checking = asyncio.ensure_future(node.service.check(ROOT, CheckRequest(1)))
    marker = uuid_of(1)
    await until_async(lambda: children_running(marker), "the check's reading to start")
    # the node is read, answered and launched on while its driver hangs for the check
    status = await node.service.status(ROOT, Nothing())
    assert status.snapshot.cards[1].state == "free"
    launched = await node.service.launch(ALICE, LaunchRequest(cards=1, command=("train",), run_id="meanwhile"))
    assert not checking.done() and launched.launched.gpus
    with pytest.raises(Conflict, match="card 1 is being checked already, by root since"):
        await node.service.check(ROOT, CheckRequest(1))
    check = await checking
    assert check.outcome == UNKNOWN and check.effect == ""  # not drained: the card may be fine
    assert check.against[0].words == (
        "the driver could not be asked: the driver did not answer within 2 s (the reading was killed)"
    )
    until(lambda: not children_running(marker), "the killed reading to be gone")
    assert (await node.service.read_now()).cards[1].drain is None


async def test_the_nvml_reading_runs_in_a_child_with_the_real_nvidia_ml_py_and_says_why_it_cannot_answer():
    """On a machine without the driver NVML does not start: the node's fault, not the card's.
    On one with it, no card has this uuid."""
    from tpnode_tui.triage.checkup import Checkup

    facts, problem = await Checkup(60).facts("nvml", "GPU-00000000-dead-beef-0000-000000000000")
    assert problem is None and not facts.answered
    if facts.reached:
        assert facts.problem.startswith("the driver finds no card by uuid GPU-00000000-dead-beef")
    else:
        assert facts.problem.startswith("NVML")


async def test_xids_not_watched_leave_a_check_unknown(make_node, boot):
    node = make_node(settings={"triage_boot_id": str(boot)})  # served by no one: nothing watches XIDs
    check = await node.service.check(ROOT, CheckRequest(1))
    assert check.outcome == UNKNOWN and findings(check)["xid"] == UNTOLD
    assert (await node.service.read_now()).cards[1].drain is None


# ── the check command ───────────────────────────────────────────────────────


async def test_the_check_command_runs_on_the_cards_uuid_in_a_clean_environment_and_passes_on_exit_0(
    make_node, boot, tmp_path
):
    seen = tmp_path / "seen.env"
    burn = script(tmp_path, "burn.sh", f'echo "$@" > {seen}.args\nenv > {seen}\necho burned fine\n')
    node = checked_node(make_node, boot, triage_check_command=f"{burn} --gpu {{uuid}} --card={{card}}")
    await watched(node)
    check = await node.service.check(ROOT, CheckRequest(2))
    assert check.outcome == PASSED and findings(check)["command"] == MET
    assert check.command.command == f"{burn} --gpu {uuid_of(2)} --card=2"
    assert (check.command.exit_code, check.command.tail) == (0, ("burned fine",))
    assert (tmp_path / "seen.env.args").read_text() == f"--gpu {uuid_of(2)} --card=2\n"
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["CUDA_VISIBLE_DEVICES"] == env["TUNEPLANE_CHECK_UUID"] == uuid_of(2)
    assert env["TUNEPLANE_CHECK_CARD"] == "2"
    assert not any(k.startswith("TUNEPLANE_STATE") or k.startswith("PYTHON") for k in env)


async def test_a_failing_command_fails_the_check_keeping_only_its_last_lines_made_printable(make_node, boot, tmp_path):
    loud = script(
        tmp_path,
        "loud.sh",
        "i=0; while [ $i -lt 5000 ]; do echo \"line $i $(printf 'x%.0s' $(seq 1 50))\"; i=$((i+1)); done\n"
        "printf 'ECC fault \\033[2J at %s\\n' \"$1\" >&2\nexit 3\n",
    )
    node = checked_node(make_node, boot, triage_check_command=f"{loud} {{uuid}}")
    await watched(node)
    check = await node.service.check(ROOT, CheckRequest(1))
    assert check.outcome == FAILED and check.effect == "drained"
    run = check.command
    assert run.exit_code == 3 and len(run.tail) == 20 and all(len(line) <= 300 for line in run.tail)
    assert run.tail[-1] == f"ECC fault \\x1b[2J at {uuid_of(1)}"  # standard error too, escaped
    assert run.tail[-2].startswith("line 4999 ")
    assert {f.name for f in check.against} == {"command"}
    assert check.against[0].words.endswith(f"it said: ECC fault \\x1b[2J at {uuid_of(1)}")


async def test_a_command_that_hangs_is_killed_with_what_it_started_and_the_card_fails(make_node, boot, tmp_path):
    mine = f"3600.{os.getpid()}{random.randrange(10**6)}"  # this test's sleeps, among everyone's on the machine
    hangs = script(tmp_path, "hangs.sh", f"sleep {mine}1 &\necho started\nsleep {mine}2\n")
    node = checked_node(make_node, boot, triage_check_command=hangs, triage_check_command_timeout_s="2")
    await watched(node)
    check = await node.service.check(ROOT, CheckRequest(1))
    assert check.outcome == FAILED and check.command.timed_out and check.command.exit_code is None
    assert check.command.tail == ("started",)
    assert "did not end within its time-out and was killed" in check.against[0].words
    until(lambda: not children_running(mine), "the command's group killed")


async def test_a_command_that_cannot_be_started_leaves_the_check_unknown(make_node, boot, tmp_path):
    node = checked_node(make_node, boot, triage_check_command=str(tmp_path / "no-such-burn"))
    await watched(node)
    check = await node.service.check(ROOT, CheckRequest(1))
    assert check.outcome == UNKNOWN and findings(check)["command"] == UNTOLD and check.effect == ""
    assert "could not be started" in check.against[0].words


async def test_the_command_is_not_run_on_a_card_tier_a_failed(make_node, boot, tmp_path):
    ran = tmp_path / "ran"
    burn = script(tmp_path, "burn.sh", f"touch {ran}\n")
    node = checked_node(make_node, boot, triage_check_command=burn)
    await watched(node)
    node.edit(1, recovery_action=2)
    check = await node.service.check(ROOT, CheckRequest(1))
    assert check.outcome == FAILED and check.command is None and not ran.exists()


# ── return to service ───────────────────────────────────────────────────────


def raise_xid(node, card: int, xid: int, event: str) -> None:
    node.edit(card, xid_events=[*node.cards[card].get("xid_events", []), {"id": event, "xid": xid}])


async def drained_by(node, card: int, source: str):
    async def drained():
        snap = await node.service.read_now()
        return snap.cards[card].drain if snap.cards[card].drain and snap.cards[card].drain.source == source else None

    return await until_async(drained, f"card {card} drained by {source}")


def until_words(snap, card: int) -> str:
    """What the dashboard, status and the page say of the card's drain, from the snapshot alone."""
    from tpnode_tui.text.cards import drain_until

    view = snap.cards[card]
    return drain_until(view.drain, view.check, snap.return_after_check, snap.boot)


async def test_a_card_the_node_drained_goes_back_when_a_check_passes_only_when_the_operator_said_so(make_node, boot):
    node = checked_node(make_node, boot, triage_return_after_check="on")
    await watched(node)
    raise_xid(node, 2, 48, "dbe")
    drain = await drained_by(node, 2, "xid")
    assert (drain.xid, drain.reboot, drain.boot) == (48, False, "boot-a")
    check = await node.service.check(ROOT, CheckRequest(2))
    assert check.outcome == PASSED and check.effect == "returned to service"
    assert (await node.service.read_now()).cards[2].state == "free"
    [back] = node.kinds("undrain")
    assert (back["cards"], back["by"], back["source"], back["xid"]) == ([2], "check", "xid", 48)
    assert back["message"].startswith("card 2 is back in service: it passed its check")
    # an operator's drain is the operator's to lift, whatever a check says
    await node.service.drain(ROOT, DrainRequest(3, "fan to be replaced"))
    kept = await node.service.check(ROOT, CheckRequest(3))
    assert kept.passed and kept.effect.startswith("it stays drained: root drained it, and only an operator undrains")
    assert (await node.service.read_now()).cards[3].state == "drained"


async def test_without_the_setting_a_passing_check_leaves_the_nodes_drain_to_an_operator(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    raise_xid(node, 2, 48, "dbe")
    await drained_by(node, 2, "xid")
    check = await node.service.check(ROOT, CheckRequest(2))
    assert check.passed and "TUNEPLANE_RETURN_AFTER_CHECK" in check.effect
    snap = await node.service.read_now()
    assert snap.cards[2].state == "drained" and node.kinds("undrain") == []
    assert snap.return_after_check is False and snap.boot is None, "this boot is read only for a drain until a reboot"
    assert until_words(snap, 2).startswith("it stays out of service until an operator undrains it: a check that")


async def test_an_xid_after_the_drain_fails_one_check_and_ecc_errors_since_the_drain_fail_every_one(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    node.edit(1, health={"ecc_uncorrected_total": 2})
    await node.service.drain(ROOT, DrainRequest(1, "ECC errors seen by the vendor tool"))

    async def counted():
        return (await node.service.read_now()).cards[1].drain.ecc == 2

    await until_async(counted, "the drain to keep the card's ECC count")
    raise_xid(node, 1, 13, "app")
    await until_async(lambda: node.kinds("xid"), "the XID")
    first = await node.service.check(ROOT, CheckRequest(1))
    assert first.outcome == FAILED and [f.name for f in first.against] == ["xid"]
    assert first.against[0].words.startswith("XID 13 at ") and "after the drain at " in first.against[0].words
    second = await node.service.check(ROOT, CheckRequest(1))
    assert second.passed  # the XID came before the last check: this one looks since it
    node.edit(1, health={"ecc_uncorrected_total": 5})
    third = await node.service.check(ROOT, CheckRequest(1))
    assert {f.words for f in third.against} == {"3 more uncorrectable ECC errors since the drain (5, was 2)"}


async def test_xid_79_keeps_its_card_until_a_reboot_and_a_check_passed_since(make_node, boot):
    node = checked_node(make_node, boot, triage_return_after_check="on")
    await watched(node)
    raise_xid(node, 6, 79, "off-the-bus")
    drain = await drained_by(node, 6, "xid")
    assert (drain.reboot, drain.boot) == (True, "boot-a")
    snap = await node.service.read_now()
    assert (snap.return_after_check, snap.boot) == (True, "boot-a")
    assert until_words(snap, 6).startswith("it stays out of service until the node has rebooted and a check has pass")
    with pytest.raises(Conflict, match="card 6 stays drained until the node has rebooted: XID 79") as refused:
        await node.service.undrain(ROOT, UndrainRequest(6))
    assert "reboot it, then check the card (tpnode-tui check 6)" in str(refused.value)
    before = await node.service.check(ROOT, CheckRequest(6))
    assert before.outcome == FAILED and {f.name for f in before.against} == {"reboot"}
    assert before.effect == "it stays drained"

    boot.write_text("boot-b\n")  # the node rebooted
    with pytest.raises(Conflict, match="no check of the card has passed since"):
        await node.service.undrain(ROOT, UndrainRequest(6))
    assert until_words(await node.service.read_now(), 6).startswith(
        "the node has rebooted since; it stays out of service until a check passes, which returns it; undrain refuses"
    )
    after = await node.service.check(ROOT, CheckRequest(6))
    assert after.passed and findings(after)["reboot"] == MET and after.effect == "returned to service"
    assert (await node.service.read_now()).cards[6].state == "free"


async def test_undrain_lifts_a_drain_for_a_reboot_once_a_check_passed_since_and_force_lifts_it_at_once(make_node, boot):
    node = checked_node(make_node, boot)
    await watched(node)
    raise_xid(node, 6, 79, "off-the-bus")
    raise_xid(node, 7, 79, "off-the-bus-too")
    await drained_by(node, 6, "xid")
    await drained_by(node, 7, "xid")
    boot.write_text("boot-b\n")
    check = await node.service.check(ROOT, CheckRequest(6))
    assert check.passed and "TUNEPLANE_RETURN_AFTER_CHECK" in check.effect
    lifted = await node.service.undrain(ROOT, UndrainRequest(6))
    assert lifted.xid == 79
    boot.write_text("boot-a\n")  # card 7: no reboot seen, no check; an operator who knows better
    forced = await node.service.undrain(ROOT, UndrainRequest(7, force=True))
    assert forced.reboot
    messages = [e["message"] for e in node.kinds("undrain")]
    assert "undrained by root with --force" in messages[-1] and "with --force" not in messages[0]
    assert [c.state for c in (await node.service.read_now()).cards[6:8]] == ["free", "free"]
