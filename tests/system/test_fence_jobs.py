"""The fence, end to end: a job launched through the real agent, as a real account, opens only its own cards.

The agent runs as root (as systemd runs it) on a simulated node with the
stand-in driver of helpers/fence.py: device minors that are not all the
cards' indices, a card split into MIG slices, mknod'ed device nodes (an open
the fence allows fails with ENXIO, one it denies with EPERM).

Each job's command is a small script, run as the account that launched it,
that opens every node and writes what each open said to a file. The kernel is
asked too (``bpf.attached_programs``) whether the job's cgroup carries the
device program the record says it does.

Needs root, real accounts, cgroup v2 (here hybrid) and the v1 devices
controller, as this machine has; elsewhere these tests skip, and under
CI=true they fail.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from helpers.accounts import cli_as
from helpers.agents import SharedNode
from helpers.fence import CAP_NODES, CARD_NODES, COMMON, MINOR, job, opened, own_node, said, scene_cards
from helpers.load import BOUND_S, kill_process_jobs
from helpers.services import unavailable, write_scene
from helpers.waiting import until
from tpnode_tui.devices import v1
from tpnode_tui.devices.bpf import attached_programs
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.model.jobs import DeviceGrant, JobSpec
from tpnode_tui.runtimes.jobprocs import process_stat
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.runtimes.statefile import StateFile


def test_a_card_jobs_processes_open_their_own_card_and_nothing_of_anothers(fenced_node, accounts, driver):
    alice = accounts.alice
    out = alice.home / "card-job.json"
    done = fenced_node.cli(alice, "launch", "--cards", "1", "--run-id", "f-card", "--", *driver.command(out, "stay"))
    assert done.returncode == 0, done.stderr
    status = fenced_node.status(alice)
    record = job(status, "f-card")
    (card,) = record["gpus"]
    assert card in (2, 3)
    own = f"nvidia{MINOR[card]}"  # its device minor, not its index: nvidia2 is card 3's
    seen = said(out, fenced_node.state / "logs" / "f-card.log")
    assert opened(seen, {own} | COMMON) == {label: "ENXIO" for label in {own} | COMMON}, seen
    assert opened(seen, CARD_NODES - {own}) == {label: "EPERM" for label in CARD_NODES - {own}}, seen
    assert opened(seen, CAP_NODES) == {label: "EPERM" for label in CAP_NODES}, seen
    assert seen["null-copy"] == "ok"  # every device that is not NVIDIA's stays as it was

    assert (record["fenced"], record["fence_mechanism"]) == (True, "cgroup-v2") and "fence_problem" not in record
    assert status["node_fence"] == {"fenced": True, "mechanism": "cgroup-v2"}
    assert attached_programs(Path(record["cgroup"])), "the record says fenced, and the kernel must agree"
    assert fenced_node.cli(alice, "stop", "f-card").returncode == 0


def test_a_mig_jobs_processes_open_their_card_and_their_slices_capabilities_only(fenced_node, accounts, driver):
    bob = accounts.bob
    out = bob.home / "mig-job.json"
    done = fenced_node.cli(bob, "launch", "--slice", "1g.18gb", "--run-id", "f-mig", "--", *driver.command(out, "run"))
    assert done.returncode == 0, done.stderr
    record = job(fenced_node.status(bob), "f-mig")
    assert [s["card"] for s in record["slices"]] == [1] and record["fenced"] is True
    seen = said(out, fenced_node.state / "logs" / "f-mig.log")
    mine = {"nvidia1", "gpu1/gi9", "gpu1/gi9/ci0"} | COMMON
    assert opened(seen, mine) == {label: "ENXIO" for label in mine}, seen
    others = (CARD_NODES | CAP_NODES) - mine
    assert opened(seen, others) == {label: "EPERM" for label in others}, seen


def test_a_child_that_calls_setsid_and_forks_twice_stays_fenced(fenced_node, accounts, driver):
    alice = accounts.alice
    out = alice.home / "escape.json"
    done = fenced_node.cli(alice, "launch", "--cards", "1", "--run-id", "f-esc", "--", *driver.command(out, "escape"))
    assert done.returncode == 0, done.stderr
    record = job(fenced_node.status(alice), "f-esc")
    seen = said(out, fenced_node.state / "logs" / "f-esc.log")
    assert seen["sid"] != record["pid"]  # a session of its own (its parent's setsid), not the job's
    own = f"nvidia{MINOR[record['gpus'][0]]}"
    assert seen[own] == "ENXIO" and opened(seen, CARD_NODES - {own}) == {c: "EPERM" for c in CARD_NODES - {own}}


def test_off_fences_nothing_and_says_so(accounts, driver):
    with SharedNode.started(accounts, "tpn-unfenced-", TUNEPLANE_FENCE="off", **driver.settings) as node:
        write_scene(node.scene, scene_cards())
        alice = accounts.alice
        out = alice.home / "off.json"
        done = node.cli(alice, "launch", "--cards", "1", "--run-id", "f-off", "--", *driver.command(out, "run"))
        assert done.returncode == 0, done.stderr
        seen = said(out, node.state / "logs" / "f-off.log")
        assert opened(seen, CARD_NODES | CAP_NODES) == {label: "ENXIO" for label in CARD_NODES | CAP_NODES}
        status = node.status(alice)
        record = job(status, "f-off")
        assert record["fenced"] is False and record["fence_problem"].startswith("TUNEPLANE_FENCE=off")
        assert status["node_fence"]["fenced"] is False
        text = node.cli(alice, "status").stdout
        assert "fence: jobs are not fenced: TUNEPLANE_FENCE=off" in text


def test_required_refuses_a_job_where_no_cgroup_can_be_made_and_says_why(accounts, driver):
    """An ordinary account without the agent cannot make a cgroup (v2 or v1): under
    required nothing starts (exit 2, one line); under auto the job runs and says why
    it is not fenced."""
    alice = accounts.alice
    root, env = own_node(alice, driver, "own-node", TUNEPLANE_FENCE="required")
    try:
        refused = cli_as(alice, env, "launch", "--cards", "1", "--run-id", "must", "--", "sleep", "30")
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert "job 'must' cannot be fenced to its cards" in refused.stderr
        assert "TUNEPLANE_FENCE=required starts no job that is not" in refused.stderr
        assert "cgroup v1: cannot make a cgroup in" in refused.stderr
        status = json.loads(cli_as(alice, env, "status", "--json").stdout)
        assert status["jobs"] == [] and status["node_fence"]["fenced"] is False

        auto = env | {"TUNEPLANE_FENCE": "auto"}
        done = cli_as(alice, auto, "launch", "--cards", "1", "--run-id", "may", "--", "sleep", "30")
        assert done.returncode == 0, done.stderr
        record = job(json.loads(cli_as(alice, env, "status", "--json").stdout), "may")
        assert record["fenced"] is False
        assert "cgroup v2: the job has no cgroup of its own" in record["fence_problem"]
        assert "Permission denied, EACCES" in record["fence_problem"]
    finally:
        kill_process_jobs(root / "state")


# ── cgroup v1, where the job has no cgroup v2 ────────────────────────────────


def test_without_a_cgroup_v2_the_v1_devices_cgroup_fences_it_and_ends_what_escaped(driver, tmp_path):
    """The process runtime without cgroups of its own (as on a node without a
    writable cgroup v2): the job's command joins a cgroup of the v1 devices
    hierarchy, a setsid escapee stays in it (fenced, and found and ended with the
    job), and the cgroup is removed once nothing is left in it."""
    try:
        v1.hierarchy_dir()
    except CannotFence as e:
        unavailable(f"no cgroup v1 devices controller: {e}")
    state = tmp_path / "state"
    out = tmp_path / "v1.json"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, cgroups=False, fence_files=driver.files)
    spec = JobSpec("f-v1", 1, tuple(driver.command(out, "escape-linger")), granted=DeviceGrant(cards=(3,)))

    async def launch():
        return await runtime.run(spec, [2])

    try:
        started = asyncio.run(launch())
        assert started.device_fence.mechanism == "cgroup-v1"
        record = StateFile(state).read()["f-v1"]
        devices = Path(record.devices_cgroup)
        assert devices.name.startswith("tpnode-tui.f-v1.") and record.cgroup == ""
        seen = said(out, state / "logs" / "f-v1.log")
        assert seen["nvidia3"] == "ENXIO" and opened(seen, CARD_NODES - {"nvidia3"}) == {
            c: "EPERM" for c in CARD_NODES - {"nvidia3"}
        }
        escapee = seen["pid"]
        # the escapee says which cgroups it was in when it probed: its command may have
        # ended since, and the supervisor with it ended the escapee and removed the cgroup
        assert seen["sid"] != record.pid and any(
            "devices" in controllers.split(",") and path.endswith("/" + devices.name)
            for _, controllers, path in (line.split(":", 2) for line in seen["cgroups"])
        ), seen["cgroups"]
        # its command has ended: the supervisor ends the escapee it finds in the devices cgroup, then removes it
        until(lambda: process_stat(escapee) is None or process_stat(escapee).ended, "the escapee to be ended", BOUND_S)
        until(lambda: not devices.exists(), "the devices cgroup to be removed", BOUND_S)
        deadline = time.monotonic() + BOUND_S
        while StateFile(state).read()["f-v1"].exit_code is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert StateFile(state).read()["f-v1"].exit_code == 0
    finally:
        kill_process_jobs(state)
