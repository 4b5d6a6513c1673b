"""Exited jobs beyond an account's limit leave the node's list, with their logs, once the usage ledger has them.

Nodes served in the test's process (helpers/service_node.py) with a usage
ledger in their state dir, as the agent keeps one: the process runtime with
real jobs of a moment (``true``), and the docker runtime with real containers
on the tests' own dockerd, whose labels are the only record. What is checked
is what the node lists afterwards, what is left in the state dir, and what
the ledger's report says of every job.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from helpers.callers import ALICE, BOB, ROOT
from helpers.waiting import until_async
from tpnode_tui.model.jobs import JobSpec, JobState
from tpnode_tui.runtimes.docker import DockerRuntime
from tpnode_tui.service.exited import beyond
from tpnode_tui.state.ledger import LEDGER_FILE, UsageLedger
from tpnode_tui.state.usage import usage_report


def done(run_id: str, owner=ALICE, started_at: float | None = 0.0, status: str = "exited") -> JobState:
    uid = None if owner is None else owner.uid
    return JobState(f"tpn-{run_id}", run_id, (0,), status, owner="carol", uid=uid, started_at=started_at)


def test_beyond_the_limit_are_each_accounts_oldest_exited_jobs():
    jobs = [
        done("a3", started_at=30),
        done("a1", started_at=10),
        done("live", started_at=1, status="running"),
        done("a2", started_at=20),
        done("b1", BOB, started_at=5),
        done("c1", None, started_at=1),  # no uid recorded: its owner's name is its account
        done("c2", None, started_at=2),
        done("made-by-hand", started_at=None),  # no start known: the oldest
    ]
    assert [j.run_id for j in beyond(jobs, 1)] == ["made-by-hand", "c1", "a1", "a2"]
    assert [j.run_id for j in beyond(jobs, 2)] == ["made-by-hand", "a1"]
    assert [j.run_id for j in beyond(jobs, 0)] == ["made-by-hand", "c1", "c2", "b1", "a1", "a2", "a3"]
    assert beyond(jobs, 4) == []


async def settle(node, want) -> list[JobState]:
    """Poll and prune, as the agent's loop does, until the node lists what ``want`` says."""

    async def listed():
        await node.service.poll()
        await node.service.prune_exited()
        jobs = await node.runtime.ps()
        return jobs if want(jobs) else None

    return await until_async(listed, "the node to list what it keeps", 60)


async def test_the_oldest_exited_process_jobs_go_with_their_logs_and_stay_in_the_ledger(make_node, tmp_path):
    node = make_node(cards=8, exited_per_user=2, ledger=UsageLedger(tmp_path / "state"))
    for n in range(5):
        await node.allocator.launch(_quick(f"a{n}", ALICE))
    await node.allocator.launch(_quick("b0", BOB))
    # b0 may still be running when alice's oldest are gone: the list settles once it has ended too
    await settle(node, lambda jobs: all(not j.live for j in jobs) and len(jobs) == 3)
    assert sorted(j.run_id for j in await node.runtime.ps()) == ["a3", "a4", "b0"]
    logs = sorted(p.name for p in (node.state / "logs").iterdir())
    assert logs == ["a3.log", "a4.log", "b0.log"]  # the others' went with their records
    report = usage_report(node.service.ledger, time.time() - 3600, time.time() + 60, "job", ROOT)
    assert sorted(r.run_id for r in report.rows) == ["a0", "a1", "a2", "a3", "a4", "b0"]
    assert {r.user for r in report.rows if r.run_id.startswith("a")} == {ALICE.user}


async def test_nothing_leaves_the_list_while_the_ledger_cannot_write(make_node, tmp_path):
    node = make_node(cards=4, exited_per_user=1, ledger=UsageLedger(tmp_path / "state"))
    await node.service.poll()
    blocker = sqlite3.connect(node.state / LEDGER_FILE, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the file
    node.service.ledger._conn.execute("PRAGMA busy_timeout = 0")
    try:
        for n in range(3):
            await node.allocator.launch(_quick(f"a{n}", ALICE))
        await until_async(lambda: _all_exited(node, 3), "the three jobs to end", 30)
        for _ in range(5):
            await node.service.poll()
            await node.service.prune_exited()
        assert sorted(j.run_id for j in await node.runtime.ps()) == ["a0", "a1", "a2"]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await settle(node, lambda jobs: [j.run_id for j in jobs] == ["a2"])


async def test_a_run_id_reclaimed_and_given_again_since_the_reading_is_not_removed(make_node):
    """What is removed is the job as read: the same name, another job by now (its
    owner reclaimed it and ran it again), is not that job, and is not in the ledger yet."""
    node = make_node(cards=2)
    await node.allocator.launch(_quick("again", ALICE))
    [old] = await until_async(lambda: _all_exited(node, 1), "the first to end")
    await node.runtime.remove("again")
    await node.allocator.launch(_quick("again", ALICE))
    [new] = await until_async(lambda: _all_exited(node, 1), "the second to end")
    assert await node.runtime.remove_exited([old]) == []
    assert await node.runtime.ps() == [new] and (node.state / "logs" / "again.log").exists()
    assert await node.runtime.remove_exited([new]) == ["again"]


@pytest.mark.docker
async def test_the_oldest_exited_containers_of_an_account_are_removed(make_node, dockerd, tmp_path):
    """Labels are the truth: an account's exited containers beyond the limit are
    removed, the oldest first, and another account's are left alone."""
    runtime = DockerRuntime(gpu_mode="none", hold_image=dockerd.image, stop_timeout_s=1)
    node = make_node(cards=4, runtime=runtime, exited_per_user=1, ledger=UsageLedger(tmp_path / "state"))
    for run_id, owner in (("a0", ALICE), ("a1", ALICE), ("b0", BOB), ("a2", ALICE)):
        await node.allocator.launch(_quick(run_id, owner, image=dockerd.image))
        await until_async(lambda r=run_id: _exited(node, r), f"{run_id} to end", 30)
        time.sleep(1.1)  # the engine says when each was made to the second
    kept = await settle(node, lambda jobs: sorted(j.run_id for j in jobs) == ["a2", "b0"])
    assert {j.run_id: j.owner for j in kept} == {"a2": ALICE.user, "b0": BOB.user}
    report = usage_report(node.service.ledger, time.time() - 3600, time.time() + 60, "job", ROOT)
    assert sorted(r.run_id for r in report.rows) == ["a0", "a1", "a2", "b0"]


def _quick(run_id: str, owner, image: str | None = None) -> JobSpec:
    return JobSpec(run_id=run_id, cards=1, command=("true",), owner=owner.user, uid=owner.uid, image=image)


async def _exited(node, run_id: str) -> bool:
    return any(j.run_id == run_id and not j.live for j in await node.runtime.ps())


async def _all_exited(node, count: int) -> list[JobState] | None:
    jobs = await node.runtime.ps()
    return jobs if len(jobs) == count and not any(j.live for j in jobs) else None
