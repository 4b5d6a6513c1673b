"""Whose is each process on a card: real processes of real accounts, on a simulated node.

The simulated probe puts any real pid on a card, so the processes here are
real: a process job's own children (one of them re-parented away from it),
the test accounts' processes (made with useradd by tests/helpers/accounts.py), a
docker job's container on the tests' own dockerd and a container started by
hand beside it, and a process in a real cgroup.
"""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from helpers.waiting import until_async
from tpnode_tui.core.belonging import classify, part_of_job
from tpnode_tui.host.procinfo import describe
from tpnode_tui.model.facts import ProcessFacts
from tpnode_tui.model.jobs import JobSpec, JobState
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN


def sleeper(account, procs) -> int:
    proc = account.spawn(["sleep", "300"], env=account.env())
    procs.append(proc)
    return proc.pid


def belongs(card) -> dict[int, str]:
    return {h.pid: h.belongs for h in card.holders}


async def test_a_process_jobs_children_are_its_own_and_another_users_process_intrudes(service_node, accounts, spawned):
    alice, bob = accounts.alice, accounts.bob
    spec = JobSpec(
        run_id="train",
        cards=1,
        owner=alice.name,
        uid=alice.uid,
        command=("sh", "-c", "sleep 301 & (sleep 302 &) ; wait"),
    )
    launched = await service_node.allocator.launch(spec)
    assert launched.gpus == (0,)
    supervisor = launched.job.pid

    def job_sleeps():
        found = {
            p.info["cmdline"][1]: p.pid
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] in (["sleep", "301"], ["sleep", "302"]) and os.getsid(p.pid) == supervisor
        }
        return found if len(found) == 2 else None

    sleeps = await until_async(job_sleeps, "the job's two sleeps")
    # The second was started from a subshell that exited: it is nobody's child
    # now, only its session says it is the job's.
    assert supervisor not in [p.pid for p in psutil.Process(sleeps["302"]).parents()]
    intruder = sleeper(bob, spawned)
    own = sleeper(alice, spawned)  # the job's owner, from her shell: her card, not an intrusion
    for pid in (sleeps["301"], sleeps["302"], intruder, own):
        service_node.put(0, pid, 30 * 1024 if pid == intruder else 1024)

    snap = await service_node.allocator.snapshot()
    card = snap.cards[0]
    assert card.state == "job" and card.run_id == "train"
    assert belongs(card) == {sleeps["301"]: HOLDER, sleeps["302"]: HOLDER, intruder: INTRUDER, own: HOLDER}
    assert card.intruders == (intruder,) and snap.intruder_cards == (0,)
    assert card.warning == (
        f"{bob.name} (pid {intruder}, sleep 300, 30.0 GiB) is using card 0, held by train of {alice.name}"
    )
    [shown] = [h for h in card.holders if h.pid == intruder]
    assert (shown.user, shown.uid) == (bob.name, bob.uid)


async def test_a_reservation_belongs_to_its_owners_processes_and_anyone_elses_intrude(service_node, accounts, spawned):
    alice, bob = accounts.alice, accounts.bob
    launched = await service_node.allocator.reserve(1, 3600, owner=alice.name, run_id="rsv-a")
    card_index = launched.gpus[0]
    hers, his = sleeper(alice, spawned), sleeper(bob, spawned)
    service_node.put(card_index, hers)
    service_node.put(card_index, his, 30720)

    snap = await service_node.allocator.snapshot()
    card = snap.cards[card_index]
    assert card.state == "reservation"
    assert belongs(card) == {hers: HOLDER, his: INTRUDER}
    until_words = time.strftime("%H:%M", time.localtime(launched.job.expires_at))
    assert card.warning == (
        f"{bob.name} (pid {his}, sleep 300, 30.0 GiB) is using card {card_index}, "
        f"reserved by {alice.name} until {until_words}"
    )


async def test_on_a_card_nobody_holds_a_process_is_external_and_an_unseen_pid_unknown(service_node, accounts, spawned):
    his = sleeper(accounts.bob, spawned)
    unseen = 3_999_999
    while psutil.pid_exists(unseen):
        unseen -= 1
    service_node.put(2, his)
    service_node.put(2, unseen)
    snap = await service_node.allocator.snapshot()
    card = snap.cards[2]
    assert card.state == "external" and card.warning is None
    assert belongs(card) == {his: EXTERNAL, unseen: UNKNOWN}
    assert snap.intruder_cards == ()


async def test_an_unseen_pid_on_a_held_card_is_not_called_an_intruder(service_node, accounts):
    await service_node.allocator.reserve(1, 3600, owner=accounts.alice.name, run_id="rsv-b")
    unseen = 3_999_999
    while psutil.pid_exists(unseen):
        unseen -= 1
    service_node.put(0, unseen)
    card = (await service_node.allocator.snapshot()).cards[0]
    assert belongs(card) == {unseen: UNKNOWN} and card.intruders == () and card.warning is None


def test_a_process_in_the_jobs_cgroup_is_the_jobs_even_outside_its_session(tmp_path, spawned):
    """A process that called setsid() leaves the job's session and tree; its cgroup keeps it."""
    from tpnode_tui.runtimes.jobprocs import cgroup_parent

    parent, why = cgroup_parent()
    if parent is None:
        pytest.skip(f"no cgroup v2 to make a job cgroup in here: {why}")
    cgroup = parent / f"tpnode-tui.intruder-test.{os.getpid()}"
    cgroup.mkdir()
    try:
        outside = subprocess.Popen(["setsid", "sleep", "300"])
        spawned.append(outside)
        inside = subprocess.Popen(["setsid", "sleep", "300"])
        spawned.append(inside)
        (cgroup / "cgroup.procs").write_text(str(inside.pid))
        job = JobState(
            name="tpn-cg",
            run_id="cg",
            gpus=(0,),
            status="running",
            owner="nobody-here",
            pid=1_000_000_000,
            cgroup=str(cgroup),
        )
        assert part_of_job(describe(ProcessFacts(inside.pid)), job)
        assert not part_of_job(describe(ProcessFacts(outside.pid)), job)
        assert classify(describe(ProcessFacts(outside.pid)), job).belongs == INTRUDER
    finally:
        for proc in spawned:
            proc.kill()
            proc.wait()
        cgroup.rmdir()


async def test_a_process_job_that_leaves_its_session_is_still_its_own_through_its_cgroup(service_node, spawned):
    """End to end: the process runtime records the job's cgroup, and its
    reading carries it, so a setsid() escapee on the card is not an intruder."""
    from tpnode_tui.runtimes.jobprocs import cgroup_parent

    if cgroup_parent()[0] is None:
        pytest.skip(f"no cgroup v2 to make a job cgroup in here: {cgroup_parent()[1]}")
    launched = await service_node.allocator.launch(
        JobSpec(run_id="escapes", cards=1, owner="root", uid=0, command=("sh", "-c", "setsid sleep 303 & wait"))
    )
    assert launched.job.cgroup, "the job got no cgroup"

    def escapee():
        return next((p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "303"]), None)

    pid = await until_async(escapee, "the job's setsid sleep")
    assert os.getsid(pid) != launched.job.pid  # out of the job's session and tree
    service_node.put(0, pid)
    card = (await service_node.allocator.snapshot()).cards[0]
    assert belongs(card) == {pid: HOLDER} and card.intruders == ()


@pytest.mark.docker
async def test_a_docker_jobs_container_is_its_own_and_a_hand_started_one_intrudes(
    dockerd, accounts, spawned, make_node
):
    from tpnode_tui.runtimes.docker import DockerRuntime

    runtime = DockerRuntime(gpu_mode="none", hold_image=dockerd.image, stop_timeout_s=1)
    node = make_node(runtime=runtime)
    launched = await node.allocator.launch(
        JobSpec(
            run_id="web",
            cards=1,
            image=dockerd.image,
            owner=accounts.alice.name,
            command=("sh", "-c", "trap 'exit 0' TERM; sleep 120 & wait"),
        )
    )
    job = launched.job
    assert job.container_id and len(job.container_id) == 64 and job.pid
    dockerd.cli("run", "-d", "--name", "squatter", dockerd.image, "sleep", "120")
    squatter = int(dockerd.cli("inspect", "-f", "{{.State.Pid}}", "squatter").stdout)
    his = sleeper(accounts.bob, spawned)
    for pid in (job.pid, squatter, his):
        node.put(0, pid)

    card = (await node.allocator.snapshot()).cards[0]
    assert belongs(card) == {job.pid: HOLDER, squatter: INTRUDER, his: INTRUDER}
    shown = {h.pid: h for h in card.holders}
    assert (shown[job.pid].container, shown[job.pid].container_name, shown[job.pid].container_image) == (
        job.container_id,
        "tpn-web",
        dockerd.image,
    )
    assert (shown[squatter].container_name, shown[squatter].container_image) == ("squatter", dockerd.image)
    assert "in container squatter" in card.warning
