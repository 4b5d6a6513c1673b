"""``tpnode-tui shell``: a real account's shell on its reservation's cards, through the real root agent.

The agent runs as root on the stand-in driver of helpers/fence.py. An account
reserves a card, then ``shell``s into it: the CLI asks the agent, the agent
moves the CLI's own process (the kernel's peer on its socket) into the
reservation's shell cgroup, fenced to its card, and the CLI becomes the
command. The probe it runs opens every device node: its own card and
nvidiactl open (ENXIO, no driver behind them), every other card fails with
EPERM. Another account is refused, an operator may, the operator's processes
there are the reservation's own (holder, not intruder), and stopping the
reservation ends them and removes the cgroup. Without an agent, root's CLI
does the same itself; an ordinary account's cannot, and ``required`` refuses.

Needs root, real accounts and cgroup v2; elsewhere these tests skip, and under
CI=true they fail.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.accounts import cli_as, runnable
from helpers.agents import SharedNode
from helpers.fence import CARD_NODES, COMMON, MINOR, job, opened, own_node, said, scene_cards
from helpers.load import BOUND_S, kill_process_jobs
from helpers.services import unavailable, write_scene
from helpers.terminal import Terminal
from helpers.waiting import until
from tpnode_tui.core.belonging import classify
from tpnode_tui.core.policy import Policy
from tpnode_tui.devices import v1
from tpnode_tui.devices.bpf import attached_programs
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.host.identity import Caller
from tpnode_tui.host.procinfo import describe
from tpnode_tui.model.errors import ConfigError, Conflict, NotAllowed
from tpnode_tui.model.facts import ProcessFacts
from tpnode_tui.model.jobs import DeviceGrant, JobSpec
from tpnode_tui.model.views import HOLDER
from tpnode_tui.runtimes import shells
from tpnode_tui.runtimes.jobprocs import cgroup_parent, process_stat
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.runtimes.statefile import StateFile


def reserve(node: SharedNode, who, run_id: str) -> int:
    done = node.cli(who, "reserve", "--cards", "1", "--for", "1h", "--run-id", run_id)
    assert done.returncode == 0, done.stderr
    (card,) = job(node.status(who), run_id)["gpus"]
    return card


def test_a_shell_opens_its_reservations_card_and_nothing_of_anothers(fenced_node, accounts, driver):
    alice = accounts.alice
    card = reserve(fenced_node, alice, "r-sh")
    own = f"nvidia{MINOR[card]}"  # its device minor, not its index
    out = alice.home / "shell.json"
    done = fenced_node.cli(alice, "shell", "r-sh", "--", *driver.command(out, "run"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # fenced: nothing to say
    seen = said(out, fenced_node.log)
    assert opened(seen, {own} | COMMON) == {label: "ENXIO" for label in {own} | COMMON}, seen
    assert opened(seen, CARD_NODES - {own}) == {label: "EPERM" for label in CARD_NODES - {own}}, seen
    assert seen["null-copy"] == "ok"

    # inside the fence CUDA numbers the one card 0; NVIDIA_VISIBLE_DEVICES keeps the node's index
    shown = fenced_node.cli(
        alice, "shell", "r-sh", "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES"'
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["0", str(card)]

    record = job(fenced_node.status(alice), "r-sh")
    assert (record["fenced"], record["fence_mechanism"]) == (True, "cgroup-v2"), record
    assert Path(record["cgroup"]).name.startswith("tpnode-tui.r-sh.")
    assert attached_programs(Path(record["cgroup"])), "the record says fenced, and the kernel must agree"


def test_another_account_is_refused_in_words_and_an_operator_may(fenced_node, accounts, driver):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    card = reserve(fenced_node, alice, "r-own")
    refused = fenced_node.cli(bob, "shell", "r-own", "--", "true")
    assert refused.returncode == 77, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert f"card {card} is held by r-own of {alice.name}" in refused.stderr
    assert f"only {alice.name} or an operator" in refused.stderr and "may open a shell on it" in refused.stderr
    assert job(fenced_node.status(alice), "r-own")["fence_problem"].startswith("a reservation runs nothing")

    out = carol.home / "operator.json"
    done = fenced_node.cli(carol, "shell", "r-own", "--", *driver.command(out, "run"))
    assert done.returncode == 0, done.stderr
    seen = said(out, fenced_node.log)
    own = f"nvidia{MINOR[card]}"
    assert seen[own] == "ENXIO" and opened(seen, CARD_NODES - {own}) == {c: "EPERM" for c in CARD_NODES - {own}}


def test_a_shells_processes_are_the_reservations_own_and_end_with_it(fenced_node, accounts):
    """An operator's process in alice's reservation's shell, on its card, is its
    holder (not an intruder, though it is not alice's); the reservation counts it
    as in use; stopping the reservation ends it and removes the shell's cgroup."""
    alice, carol = accounts.alice, accounts.carol
    card = reserve(fenced_node, alice, "r-use")
    sleeper = carol.spawn(runnable().argv("shell", "r-use", "--", "sleep", "300"), env=fenced_node.env(carol))
    try:
        until(
            lambda: job(fenced_node.status(alice), "r-use")["shell_processes"] == 1,
            "the operator's shell to run in the reservation",
            BOUND_S,
        )
        cards = scene_cards()
        cards[card] |= {"memory_used_mib": 2000, "processes": [{"pid": sleeper.pid, "used_memory_mib": 2000}]}
        write_scene(fenced_node.scene, cards)

        def holders() -> dict:
            status = fenced_node.status(alice)
            return {h["pid"]: h["belongs"] for h in status["cards"][card]["holders"]}

        until(lambda: sleeper.pid in holders(), "the next reading to list the shell's process", BOUND_S)
        assert holders() == {sleeper.pid: "holder"}
        status = fenced_node.status(alice)
        cgroup = Path(job(status, "r-use")["cgroup"])
        assert str(sleeper.pid) in (cgroup / "cgroup.procs").read_text().split()

        stopped = fenced_node.cli(alice, "stop", "r-use")
        assert stopped.returncode == 0, stopped.stderr
        assert sleeper.wait(BOUND_S) == -signal.SIGTERM
        until(lambda: not cgroup.exists(), "the shell's cgroup to be removed", BOUND_S)
        record = job(fenced_node.status(alice), "r-use")
        assert record["status"] == "exited" and record["shell_processes"] == 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_in_process_as_root_a_shell_is_fenced_the_same(driver, tmp_path):
    """Without an agent, the CLI run as root serves the node itself and moves
    itself into the reservation's fence, as the agent would."""
    scene = write_scene(tmp_path / "scene.json", scene_cards())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")} | {
        "TUNEPLANE_AGENT": "off",
        "TUNEPLANE_STATE_DIR": str(tmp_path / "state"),
        "TUNEPLANE_RUNTIME": "process",
        "TUNEPLANE_PROBE": f"simulated:{scene}",
        **driver.settings,
    }

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tpnode_tui", *args], env=env, capture_output=True, text=True)

    try:
        assert cli("reserve", "--cards", "1", "--for", "1h", "--run-id", "r-here").returncode == 0
        (card,) = job(json.loads(cli("status", "--json").stdout), "r-here")["gpus"]
        own, out = f"nvidia{MINOR[card]}", tmp_path / "here.json"
        done = cli("shell", "r-here", "--", *driver.command(out, "run"))
        assert done.returncode == 0 and done.stderr == "", done.stderr
        seen = said(out, tmp_path / "state")
        assert seen[own] == "ENXIO" and opened(seen, CARD_NODES - {own}) == {c: "EPERM" for c in CARD_NODES - {own}}
        assert job(json.loads(cli("status", "--json").stdout), "r-here")["fence_mechanism"] == "cgroup-v2"
    finally:
        kill_process_jobs(tmp_path / "state")


def test_required_refuses_a_shell_where_no_cgroup_can_be_made_and_auto_says_so(accounts, driver):
    """An ordinary account without the agent cannot make a cgroup: under required
    its shell does not start (exit 2, the reason); under auto it runs, outside the
    reservation (unfenced, untracked, not ended with it), and one line on stderr
    says all of that."""
    alice = accounts.alice
    root, env = own_node(alice, driver, "own-shell-node", TUNEPLANE_FENCE="required")
    try:
        done = cli_as(alice, env, "reserve", "--cards", "1", "--for", "1h", "--run-id", "own")
        assert done.returncode == 0, done.stderr  # a reservation itself runs nothing to fence
        refused = cli_as(alice, env, "shell", "own", "--", "echo", "ran")
        assert refused.returncode == 2, refused.stderr
        assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
        assert "a shell on reservation 'own' cannot be fenced to its cards" in refused.stderr
        assert "TUNEPLANE_FENCE=required starts no shell that is not" in refused.stderr
        assert "cgroup v1: cannot make a cgroup in" in refused.stderr

        auto = env | {"TUNEPLANE_FENCE": "auto"}
        ran = cli_as(alice, auto, "shell", "own", "--", "sh", "-c", 'echo "ran $CUDA_VISIBLE_DEVICES"')
        assert ran.returncode == 0, ran.stderr
        (card,) = job(json.loads(cli_as(alice, env, "status", "--json").stdout), "own")["gpus"]
        assert ran.stdout.split() == ["ran", str(card)]  # no fence: the node's index
        [line] = ran.stderr.strip().splitlines()
        # no cgroup to move it into: it is no part of the reservation, and the line says all of it
        assert line.startswith(
            "tpnode-tui: the shell on own runs outside the reservation: not fenced, not ended when the "
            "reservation ends, not counted as its use (no cgroup could be made: cgroup v2: "
        ), line
        record = job(json.loads(cli_as(alice, env, "status", "--json").stdout), "own")
        # and the reservation says of its fence what it said before: no shell of its own has run
        assert record["fenced"] is False and record["fence_problem"].startswith("a reservation runs nothing")
        assert record["cgroup"] is None and record["shell_processes"] == 0
    finally:
        kill_process_jobs(root / "state")


def test_a_shell_over_host_is_refused_before_anything_is_asked(fenced_node, accounts):
    """Through --host the agent's caller is the SSH bridge, not the person's
    shell: a shell is refused in words, and nothing is moved."""
    alice = accounts.alice
    reserve(fenced_node, alice, "r-far")
    env = fenced_node.env(alice) | {"TUNEPLANE_HOST": "nobody@127.0.0.1"}
    refused = cli_as(alice, env, "shell", "r-far", "--", "true")
    assert refused.returncode != 0
    assert "run tpnode-tui shell there" in refused.stderr and "Traceback" not in refused.stderr
    assert job(fenced_node.status(alice), "r-far")["shell_processes"] == 0


def test_without_a_cgroup_v2_a_shell_is_fenced_by_v1_and_ended_when_the_reservation_expires(driver, tmp_path):
    """The process runtime without cgroups v2 of its own: the shell's process is
    moved into a v1 devices cgroup, fenced there, and when the reservation expires
    its supervisor records the end, ends the shell's process and removes the
    cgroup; until then the cards stay held."""
    try:
        v1.hierarchy_dir()
    except CannotFence as e:
        unavailable(f"no cgroup v1 devices controller: {e}")
    state = tmp_path / "state"
    out = tmp_path / "v1-shell.json"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, cgroups=False, fence_files=driver.files)
    spec = JobSpec("r-v1", 1, kind="reservation", expires_at=time.time() + 4, granted=DeviceGrant(cards=(3,)))
    # the shell's stand-in: it waits to be moved, then becomes the probe (as the CLI becomes the shell)
    waiting = subprocess.Popen(
        ["sh", "-c", 'read go; exec "$@"', "sh", *driver.command(out, "stay")], stdin=subprocess.PIPE
    )
    try:
        asyncio.run(runtime.run(spec, [2]))
        entry = asyncio.run(runtime.shell("r-v1", waiting.pid, os.getuid(), started(waiting.pid), OPERATOR))
        assert entry.device_fence.mechanism == "cgroup-v1" and dict(entry.env)["CUDA_VISIBLE_DEVICES"] == "0"
        devices = Path(StateFile(state).read()["r-v1"].devices_cgroup)
        assert str(waiting.pid) in (devices / "cgroup.procs").read_text().split()
        waiting.stdin.write(b"go\n")
        waiting.stdin.flush()
        seen = said(out, state / "logs" / "r-v1.log")
        assert seen["nvidia3"] == "ENXIO" and opened(seen, CARD_NODES - {"nvidia3"}) == {
            c: "EPERM" for c in CARD_NODES - {"nvidia3"}
        }
        [held] = asyncio.run(runtime.ps())
        assert held.live and held.shell_processes == 1 and held.device_fence.mechanism == "cgroup-v1"
        # found by its v1 cgroup, a process there is the reservation's own, whoever's it is
        assert held.cgroup == str(devices) and classify(describe(ProcessFacts(waiting.pid)), held).belongs == HOLDER

        assert waiting.wait(BOUND_S) == -signal.SIGTERM  # ended when the reservation expired
        until(lambda: not devices.exists(), "the shell's devices cgroup to be removed", BOUND_S)
        [ended] = asyncio.run(runtime.ps())
        assert ended.status == "exited" and ended.exit_code == 0 and ended.shell_processes == 0
        with pytest.raises(Conflict, match="has ended"):
            asyncio.run(runtime.shell("r-v1", os.getpid(), os.getuid(), started(os.getpid()), OPERATOR))
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
        kill_process_jobs(state)


def test_only_the_process_that_asked_is_moved(accounts):
    """The agent moves the kernel's peer only if it is the process that asked: of
    the caller's uid (another's is refused), started when the asker says it did
    (else a forwarder, or a pid handed on, is connected: refused in words), and
    a pid the kernel cannot name (0: another PID namespace) is refused in words,
    not with an error of the kernel's."""
    alice, bob = accounts.alice, accounts.bob
    his = bob.spawn(["sleep", "300"], env=bob.env())
    hers = alice.spawn(["sleep", "300"], env=alice.env())
    try:
        until(lambda: _cmdline(his.pid).startswith(b"sleep"), "bob's sleep to run", BOUND_S)
        until(lambda: _cmdline(hers.pid).startswith(b"sleep"), "alice's sleep to run", BOUND_S)
        with pytest.raises(NotAllowed, match=f"process {his.pid} is not the asking account's own"):
            shells.move(his.pid, alice.uid, started(his.pid), None, None)
        with pytest.raises(Conflict, match="the process asking is not the one connected to the agent"):
            shells.move(hers.pid, alice.uid, started(hers.pid) - 1, None, None)
        with pytest.raises(NotAllowed, match="cannot tell which process asks"):
            shells.move(0, alice.uid, 0, None, None)
    finally:
        for proc in (his, hers):
            proc.kill()
            proc.wait()


#: a forwarder between a socket of alice's and the agent's, as ``socat`` or ``ssh -L`` would be
FORWARDER = """
import socket, sys, threading
listening = socket.socket(socket.AF_UNIX)
listening.bind(sys.argv[1])
listening.listen(1)
print("ready", flush=True)
near, _ = listening.accept()
far = socket.socket(socket.AF_UNIX)
far.connect(sys.argv[2])
def pump(a, b):
    while data := a.recv(65536):
        b.sendall(data)
    b.shutdown(socket.SHUT_WR)
threading.Thread(target=pump, args=(far, near), daemon=True).start()
pump(near, far)
"""


def test_a_shell_through_a_forwarder_is_refused_and_a_command_naming_the_bridge_is_not(fenced_node, accounts):
    """Through a forwarder the kernel's peer is the forwarder, not the CLI: the
    agent compares it with the pid and start the CLI sees of itself, refuses in
    words, and moves nothing (the forwarder least of all). A command that merely
    mentions the SSH bridge's word is the person's own, and runs."""
    alice = accounts.alice
    reserve(fenced_node, alice, "r-fwd")
    near = alice.home / "forwarded.sock"
    forwarder = alice.spawn(
        [runnable().python, "-c", FORWARDER, str(near), str(fenced_node.socket)],
        env=alice.env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert forwarder.stdout.readline() == "ready\n"
        before = fences_of(forwarder.pid)
        env = fenced_node.env(alice) | {"TUNEPLANE_AGENT_SOCKET": str(near)}
        refused = cli_as(alice, env, "shell", "r-fwd", "--", "echo", "ran")
        assert refused.returncode != 0 and refused.stdout == "", refused
        assert "the process asking is not the one connected to the agent (a forwarder such as ssh -L or socat)" in (
            refused.stderr
        )
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert fences_of(forwarder.pid) == before
        assert job(fenced_node.status(alice), "r-fwd")["shell_processes"] == 0
    finally:
        forwarder.kill()
        forwarder.wait()

    named = fenced_node.cli(alice, "shell", "r-fwd", "--", "echo", "dial-stdio")
    assert named.returncode == 0 and named.stdout == "dial-stdio\n", named.stderr


def test_a_shell_whose_devices_cgroup_cannot_be_joined_is_moved_back(accounts, driver, tmp_path):
    """Moved into the shell's cgroup v2 and then refused by the v1 devices cgroup:
    the process goes back to the cgroup it was in, not left half in the fence."""
    alice = accounts.alice
    state = tmp_path / "state"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, fence_files=driver.files)
    spec = JobSpec("r-half", 1, kind="reservation", expires_at=time.time() + 600, granted=DeviceGrant(cards=(3,)))
    hers = alice.spawn(["sleep", "300"], env=alice.env())
    try:
        asyncio.run(runtime.run(spec, [2]))
        until(lambda: _cmdline(hers.pid).startswith(b"sleep"), "alice's sleep to run", BOUND_S)
        first = alice.spawn(["sleep", "300"], env=alice.env())
        try:
            until(lambda: _cmdline(first.pid).startswith(b"sleep"), "the first shell to run", BOUND_S)
            asyncio.run(runtime.shell("r-half", first.pid, alice.uid, started(first.pid), OPERATOR))
            not_a_cgroup = tmp_path / "tpnode-tui.r-half.not-a-cgroup"
            not_a_cgroup.mkdir()
            with StateFile(state).transaction() as jobs:  # a devices cgroup the kernel will not take a pid into
                jobs["r-half"] = replace(jobs["r-half"], devices_cgroup=str(not_a_cgroup))
            before = fences_of(hers.pid)
            with pytest.raises(Exception, match="cannot move process"):
                asyncio.run(runtime.shell("r-half", hers.pid, alice.uid, started(hers.pid), OPERATOR))
            assert fences_of(hers.pid) == before
        finally:
            first.kill()
            first.wait()
    finally:
        hers.kill()
        hers.wait()
        kill_process_jobs(state)


def test_a_run_id_that_changed_hands_before_the_move_is_refused(accounts, driver, tmp_path):
    """Who may is asked again of the record inside the state file's lock: a run id
    alice was allowed on, ended and reserved again by bob before her move, is
    refused with the holder named, and nothing of hers is moved into bob's."""
    alice, bob = accounts.alice, accounts.bob
    state = tmp_path / "state"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, fence_files=driver.files)
    hers = alice.spawn(["sleep", "300"], env=alice.env())
    try:
        spec = JobSpec(
            "r-swap",
            1,
            kind="reservation",
            expires_at=time.time() + 600,
            granted=DeviceGrant(cards=(3,)),
            owner=bob.name,
            uid=bob.uid,
        )
        asyncio.run(runtime.run(spec, [2]))
        until(lambda: _cmdline(hers.pid).startswith(b"sleep"), "alice's sleep to run", BOUND_S)
        alices = Caller(uid=alice.uid, gid=alice.gid, user=alice.name, pid=hers.pid)

        def may(job) -> None:  # the rule the agent checks alice's shell by
            Policy().check_may(alices, job, "open a shell on", cards=job.cards)

        before = fences_of(hers.pid)
        with pytest.raises(NotAllowed, match=f"held by r-swap of {bob.name}; only {bob.name} or an operator"):
            asyncio.run(runtime.shell("r-swap", hers.pid, alice.uid, started(hers.pid), may))
        assert fences_of(hers.pid) == before
        [held] = asyncio.run(runtime.ps())
        assert held.shell_processes == 0 and held.cgroup is None
    finally:
        hers.kill()
        hers.wait()
        kill_process_jobs(state)


def test_required_refuses_to_join_a_shell_cgroup_made_unfenced(accounts, driver, tmp_path):
    """A shell cgroup made with no fence (an earlier shell under off) is not joined
    under required: the shell is refused (exit 2's ConfigError), nothing moved."""
    alice = accounts.alice
    state = tmp_path / "state"
    spec = JobSpec("r-open", 1, kind="reservation", expires_at=time.time() + 600, granted=DeviceGrant(cards=(3,)))
    off = ProcessRuntime(state, stop_timeout_s=1.0, fence_policy="off", fence_files=driver.files)
    required = ProcessRuntime(state, stop_timeout_s=1.0, fence_policy="required", fence_files=driver.files)
    first = alice.spawn(["sleep", "300"], env=alice.env())
    hers = alice.spawn(["sleep", "300"], env=alice.env())
    try:
        asyncio.run(off.run(spec, [2]))
        for proc in (first, hers):
            until(lambda proc=proc: _cmdline(proc.pid).startswith(b"sleep"), "alice's sleep to run", BOUND_S)
        entry = asyncio.run(off.shell("r-open", first.pid, alice.uid, started(first.pid), OPERATOR))
        assert not entry.device_fence.fenced and entry.cgroup
        before = fences_of(hers.pid)
        with pytest.raises(ConfigError, match="would join its shell cgroup, which is not fenced"):
            asyncio.run(required.shell("r-open", hers.pid, alice.uid, started(hers.pid), OPERATOR))
        assert fences_of(hers.pid) == before
        [held] = asyncio.run(required.ps())
        assert held.shell_processes == 1
    finally:
        for proc in (first, hers):
            proc.kill()
            proc.wait()
        kill_process_jobs(state)


def test_a_hold_whose_end_cannot_be_recorded_still_ends_its_shell(accounts, driver, tmp_path):
    """Stopped while the state file cannot be locked for writing (another process
    holds it shared, past the supervisor's lock timeout), the reservation's
    supervisor cannot record the end, and ends the shell's processes all the
    same, from the record as it reads."""
    alice = accounts.alice
    state = tmp_path / "state"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, fence_files=driver.files)
    spec = JobSpec("r-stuck", 1, kind="reservation", expires_at=time.time() + 600, granted=DeviceGrant(cards=(3,)))
    hers = alice.spawn(["sleep", "300"], env=alice.env())
    try:
        asyncio.run(runtime.run(spec, [2]))
        until(lambda: _cmdline(hers.pid).startswith(b"sleep"), "alice's sleep to run", BOUND_S)
        asyncio.run(runtime.shell("r-stuck", hers.pid, alice.uid, started(hers.pid), OPERATOR))
        states = StateFile(state)
        supervisor = states.read()["r-stuck"].pid
        reader = os.open(states.lock_path, os.O_RDONLY)
        try:
            fcntl.flock(reader, fcntl.LOCK_SH)  # readers pass, the supervisor's write waits and gives up
            os.kill(supervisor, signal.SIGTERM)
            assert hers.wait(BOUND_S) == -signal.SIGTERM
        finally:
            os.close(reader)
    finally:
        if hers.poll() is None:
            hers.kill()
            hers.wait()
        kill_process_jobs(state)


def test_a_shell_refused_at_the_move_leaves_no_cgroup_and_the_record_as_it_was(accounts, driver, tmp_path):
    """A process that is not the caller's is not moved, and the shell cgroup made
    for it is removed again: the reservation says what it said before."""
    bob = accounts.bob
    state = tmp_path / "state"
    runtime = ProcessRuntime(state, stop_timeout_s=1.0, fence_files=driver.files)
    spec = JobSpec("r-back", 1, kind="reservation", expires_at=time.time() + 600, granted=DeviceGrant(cards=(3,)))
    his = bob.spawn(["sleep", "300"], env=bob.env())
    try:
        asyncio.run(runtime.run(spec, [2]))
        before = StateFile(state).read()["r-back"]
        until(lambda: _cmdline(his.pid).startswith(b"sleep"), "bob's sleep to run", BOUND_S)
        listed = set(state.glob("*"))
        parent = cgroup_parent()[0]
        assert parent is not None
        cgroups = set(parent.glob("tpnode-tui.r-back.*"))
        with pytest.raises(NotAllowed):
            asyncio.run(runtime.shell("r-back", his.pid, accounts.alice.uid, started(his.pid), OPERATOR))
        after = StateFile(state).read()["r-back"]
        assert after == before and after.cgroup == "" and set(state.glob("*")) == listed
        [held] = asyncio.run(runtime.ps())
        assert held.device_fence.problem.startswith("a reservation runs nothing") and held.cgroup is None
        assert set(parent.glob("tpnode-tui.r-back.*")) == cgroups
    finally:
        his.kill()
        his.wait()
        kill_process_jobs(state)


def OPERATOR(job) -> None:
    """The rule an operator's shell is checked by: any reservation."""


def started(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot, as the CLI says of itself."""
    stat = process_stat(pid)
    assert stat is not None
    return stat.ticks


def fences_of(pid: int) -> list[str]:
    """The cgroup v2 and v1 devices cgroup ``pid`` is in: what a shell's move changes."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return [line for line in lines if line.startswith("0::") or ":devices:" in line]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_dashboard_s_shell_key_opens_her_shell_in_the_reservation_s_fence_and_comes_back_however_it_ends(
    fenced_node, accounts
):
    """The key's whole path on a real terminal: alice's dashboard runs
    ``tpnode-tui shell`` with its own settings as a child on her terminal; the
    agent moves that child into the reservation's fence, where it becomes her
    login shell. Exiting it after a failed command is no failure of the shell's
    (no wait for enter), and a shell ended by the reservation's end, which
    gives the terminal back to nobody, still leaves the dashboard in charge
    of it: it draws and takes keys again."""
    alice = accounts.alice
    card = reserve(fenced_node, alice, "r-key")
    env = {**fenced_node.env(alice), "TERM": "xterm-256color", "PS1": "in-the-fence$ "}
    term = Terminal(alice, runnable().argv(), env)
    try:
        term.shows("r-key", what="the dashboard to show her reservation")
        term.press("\x1b[C" * card)  # the right arrow, to her reservation's card
        term.shows("Shell", what="the footer to offer the shell on her reservation's card")
        before = term.mark()
        term.press("S")
        term.shows(
            f"shell on r-key (card {card}: CUDA_VISIBLE_DEVICES=0); exit to return",
            before,
            "one line before the shell, saying where it runs",
        )
        term.shows("(r-key) in-the-fence$ ", before, "her login shell's prompt, marked with the reservation")
        term.press(
            "echo CUDA=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES ON=$TPNODE_SHELL; "
            "cat /proc/self/cgroup; false; exit\r"
        )
        term.shows("ON=r-key", before, "the reservation named in the shell's environment")
        term.shows(f"CUDA=0 NVIDIA={card}", before, "the reservation's cards in the shell's environment")
        term.shows("tpnode-tui.r-key.", before, "the shell in the reservation's cgroup")
        term.shows("Back from the shell on r-key.", before, "the dashboard drawn again, saying so")
        assert "press enter to go back" not in term.text(before)  # its last command failed, the shell did not

        again = term.mark()
        term.press("S")
        term.shows("in-the-fence$ ", again, "her login shell's prompt again")
        stopped = fenced_node.cli(alice, "stop", "r-key")  # from elsewhere: its shell is ended with it
        assert stopped.returncode == 0, stopped.stderr
        term.shows("Back from the shell on r-key.", again, "the dashboard drawn again after the shell was ended")
        term.press("q")
        assert term.proc.wait(30) == 0  # it read the key: the terminal is its own again
    finally:
        term.close()
