"""Evicting squatters: real processes of real test accounts, on a simulated node.

The operator here is a Caller made by hand (the agent names it from the
kernel; that is tested with the agent), but every process signalled is real
and belongs to a real account made by tests/helpers/accounts.py, and the process job
whose child must not be evicted runs under the real process runtime.
"""

from __future__ import annotations

import asyncio
import subprocess

import psutil
import pytest

from helpers.callers import ROOT
from helpers.service_node import ServiceNode
from helpers.waiting import until_async
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import Conflict, JobNotFound, NotAllowed, exit_code
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.operators import EvictRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.triage.evict import ENDED, KILLED, LISTED, RUNNING

#: ignores SIGTERM: an ignored signal stays ignored across exec, so the sleep ignores it too
STUBBORN = ["sh", "-c", "trap '' TERM; echo ready; exec sleep 300"]


#: 4 simulated cards showing whichever pids a test puts there, real processes, and a 1 s grace
pytestmark = pytest.mark.service_node(evict_grace_s=1.0)


def run_stubborn(node: ServiceNode, account) -> subprocess.Popen:
    proc = node.run_as(account, STUBBORN)
    assert proc.stdout.readline().strip() == "ready"  # SIGTERM is ignored from here on
    return proc


def alive(proc: subprocess.Popen) -> bool:
    try:
        return psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_dry_run_names_what_would_be_signalled_and_signals_nothing(service_node, accounts):
    squatter = service_node.run_as(accounts.bob, ["sleep", "300"])
    service_node.put(2, squatter.pid)
    report = await service_node.service.evict(ROOT, EvictRequest(2, dry_run=True))
    [listed] = report.processes
    assert (listed.card, listed.pid, listed.user, listed.command, listed.belongs, listed.outcome) == (
        2,
        squatter.pid,
        accounts.bob.name,
        "sleep 300",
        "external",
        LISTED,
    )
    assert listed.fate == "would be sent SIGTERM" and report.dry_run
    await asyncio.sleep(0.2)
    assert alive(squatter)
    assert [e["kind"] for e in service_node.log.read()] == ["action"]  # the dry run is audited, nothing was evicted


async def test_an_external_process_ends_at_sigterm_and_its_fate_is_logged(service_node, accounts):
    squatter = service_node.run_as(accounts.bob, ["sleep", "300"])
    service_node.put(1, squatter.pid)
    report = await service_node.service.evict(ROOT, EvictRequest(1))
    [done] = report.processes
    assert (done.outcome, done.fate) == (ENDED, "ended after SIGTERM")
    assert not alive(squatter)
    [event] = [e for e in service_node.log.read() if e["kind"] == "evict"]
    assert event["cards"] == [1] and event["pid"] == squatter.pid and event["outcome"] == ENDED
    assert event["message"] == (
        f"card 1: {accounts.bob.name}'s pid {squatter.pid} (sleep 300), evicted by root: ended after SIGTERM"
    )


async def test_a_pid_named_with_its_start_time_is_signalled_only_while_it_is_that_process(service_node, accounts):
    """A confirmation can take minutes: a pid that changed hands meanwhile was not the one asked about."""
    squatter = service_node.run_as(accounts.bob, ["sleep", "300"])
    service_node.put(3, squatter.pid)
    [listed] = (await service_node.service.evict(ROOT, EvictRequest(3, dry_run=True))).processes
    assert listed.started_at == pytest.approx(psutil.Process(squatter.pid).create_time(), abs=0.01)
    with pytest.raises(Conflict, match=f"pid {squatter.pid} on card 3 is no longer the process that was listed"):
        await service_node.service.evict(ROOT, EvictRequest(3, squatter.pid, started_at=listed.started_at - 30))
    await asyncio.sleep(0.2)
    assert alive(squatter)
    [done] = (
        await service_node.service.evict(ROOT, EvictRequest(3, squatter.pid, started_at=listed.started_at))
    ).processes
    assert done.outcome == ENDED and not alive(squatter)


async def test_a_process_that_ignores_sigterm_needs_kill(service_node, accounts):
    stubborn = run_stubborn(service_node, accounts.bob)
    service_node.put(0, stubborn.pid)
    [still] = (await service_node.service.evict(ROOT, EvictRequest(0))).processes
    assert still.outcome == RUNNING and "evict it again with kill" in still.fate and alive(stubborn)
    [killed] = (await service_node.service.evict(ROOT, EvictRequest(0, stubborn.pid, kill=True))).processes
    assert killed.outcome == KILLED and "killed with SIGKILL" in killed.fate
    assert not alive(stubborn)


async def test_on_a_reservation_only_the_intruder_is_evicted(service_node, accounts):
    await service_node.service.reserve(
        ROOT, ReserveRequest(cards=1, duration_s=600, run_id="rsv-ops", owner=accounts.alice.name)
    )
    hers = service_node.run_as(accounts.alice, ["sleep", "300"])
    his = service_node.run_as(accounts.bob, ["sleep", "300"])
    service_node.put(0, hers.pid)
    service_node.put(0, his.pid)
    [done] = (await service_node.service.evict(ROOT, EvictRequest(0))).processes
    assert (done.pid, done.belongs, done.outcome) == (his.pid, "intruder", ENDED)
    assert alive(hers) and not alive(his)
    with pytest.raises(
        Conflict,
        match=f"pid {hers.pid} belongs to {accounts.alice.name}, whose reservation "
        "rsv-ops holds card 0: it is not a squatter",
    ):
        await service_node.service.evict(ROOT, EvictRequest(0, hers.pid))


async def job_command(supervisor_pid: int) -> psutil.Process:
    """The process a process job's supervisor started, once it runs."""
    [command] = await until_async(psutil.Process(supervisor_pid).children, "the job's command to start")
    return command


async def test_a_platform_jobs_process_is_refused_and_stop_is_named(service_node, accounts):
    result = await service_node.service.launch(ROOT, LaunchRequest(cards=1, command=("sleep", "300"), run_id="train"))
    card = result.launched.gpus[0]
    command = await job_command(result.launched.job.pid)
    service_node.put(card, command.pid)
    with pytest.raises(
        Conflict,
        match=f"pid {command.pid} is part of platform job train on card {card}; "
        "end the job with: tpnode-tui stop train",
    ):
        await service_node.service.evict(ROOT, EvictRequest(card, command.pid))
    with pytest.raises(
        JobNotFound,
        match=f"card {card} has no process from outside the platform or of someone "
        "else to evict \\(it is held by train\\)",
    ):
        await service_node.service.evict(ROOT, EvictRequest(card))
    assert command.is_running()


async def test_a_platform_job_s_process_on_a_card_it_was_not_given_is_named_and_not_evicted(service_node, accounts):
    """It squats on that card, but it is a job's: stop ends it, not evict."""
    result = await service_node.service.launch(ROOT, LaunchRequest(cards=1, command=("sleep", "300"), run_id="train"))
    command = await job_command(result.launched.job.pid)
    service_node.put(3, command.pid)  # it opened card 3 too
    snap = await service_node.service.read_now()
    [holder] = snap.cards[3].holders
    assert (holder.belongs, holder.job_elsewhere) == ("external", "train")
    with pytest.raises(
        Conflict,
        match=f"pid {command.pid} is part of platform job train, using card 3 though it "
        "was not given it; end the job with: tpnode-tui stop train",
    ):
        await service_node.service.evict(ROOT, EvictRequest(3, command.pid))
    with pytest.raises(JobNotFound, match="card 3 has no process from outside the platform"):
        await service_node.service.evict(ROOT, EvictRequest(3))
    assert command.is_running()


async def test_pid_1_an_unseen_pid_and_a_pid_not_on_the_card_are_refused(service_node, accounts):
    unseen = 3_999_999
    while psutil.pid_exists(unseen):
        unseen -= 1
    service_node.put(3, 1)
    service_node.put(3, unseen)
    with pytest.raises(Conflict, match="pid 1 is the system's init process"):
        await service_node.service.evict(ROOT, EvictRequest(3, 1))
    with pytest.raises(Conflict, match=f"pid {unseen} cannot be looked at from this machine"):
        await service_node.service.evict(ROOT, EvictRequest(3, unseen))
    with pytest.raises(JobNotFound, match="pid 4242 is not on card 3"):
        await service_node.service.evict(ROOT, EvictRequest(3, 4242))
    with pytest.raises(JobNotFound, match="card 2 has no process"):
        await service_node.service.evict(ROOT, EvictRequest(2))


async def test_only_an_operator_may_evict(service_node, accounts):
    squatter = service_node.run_as(accounts.bob, ["sleep", "300"])
    service_node.put(1, squatter.pid)
    alice = Caller(uid=accounts.alice.uid, gid=accounts.alice.gid, user=accounts.alice.name)
    with pytest.raises(NotAllowed, match="only an operator") as refused:
        await service_node.service.evict(alice, EvictRequest(1, dry_run=True))
    assert exit_code(refused.value) == 77 and alive(squatter)


def test_a_process_whose_start_time_cannot_be_read_is_not_signalled():
    """Without it, a later process given the same pid could not be told from it."""
    from tpnode_tui.model.views import CardView, HolderInfo
    from tpnode_tui.triage.evict import targets

    squatter = HolderInfo(pid=4242, visible=True, user="bob", uid=5002, belongs="external", started_at=None)
    card = CardView(2, "external", holders=(squatter,))
    with pytest.raises(Conflict, match="pid 4242's start time cannot be read"):
        targets(card, 4242)
    with pytest.raises(JobNotFound, match="no process from outside the platform"):
        targets(card)


async def test_an_eviction_whose_asker_goes_away_is_finished_and_logged_as_it_ended(service_node, accounts):
    """The agent cancels a request whose client hung up; signals already sent must still be logged."""
    stubborn = run_stubborn(service_node, accounts.bob)
    service_node.put(1, stubborn.pid)
    asking = asyncio.ensure_future(service_node.service.evict(ROOT, EvictRequest(1)))
    await asyncio.sleep(0.3)  # SIGTERM sent, the grace period under way
    asking.cancel()
    await asyncio.gather(asking, return_exceptions=True)
    # the process's fate is logged as the grace period ends, the action's answer just after
    await until_async(
        lambda: {"evict", "action"} <= {e["kind"] for e in service_node.log.read()},
        "the eviction to be logged as it ended",
    )
    [event] = [e for e in service_node.log.read() if e["kind"] == "evict"]
    assert event["pid"] == stubborn.pid and event["outcome"] == RUNNING
    [action] = [e for e in service_node.log.read() if e["kind"] == "action"]
    assert action["result"] == "ok" and "evicted from card 1" in action["message"], action


async def test_why_nothing_on_a_card_may_be_evicted_is_one_answer_and_one_log_line(service_node, accounts):
    unseen = 3_999_999
    while psutil.pid_exists(unseen):
        unseen -= 1
    service_node.put(2, 1)
    service_node.put(2, unseen)
    with pytest.raises(JobNotFound) as refused:
        await service_node.service.evict(ROOT, EvictRequest(2, dry_run=True))
    said = str(refused.value)
    assert said.startswith("card 2 has no process from outside the platform or of someone else to evict: ")
    assert "pid 1 is the system's init process" in said and f"pid {unseen} cannot be looked at" in said
    assert "\n" not in said, "one line, as the CLI prints it"
    assert len([e for e in service_node.log.read() if e["kind"] == "action"]) == 1
    with pytest.raises(
        JobNotFound, match="^card 3 has no process from outside the platform or of someone else to evict$"
    ):
        await service_node.service.evict(ROOT, EvictRequest(3, dry_run=True))
