"""No account can hold the allocation lock for everyone: real accounts against a real root agent.

Before a process job is created, the agent asks a process of the caller's
whether the command can start. That process is the caller's to stop, and it
was asked twice, once under the allocation lock: an account that stopped its
own checks kept the lock (and the agent's threads) from everyone. Here bob
does exactly that, as a real process of his own, while alice reserves with a
one-second bound on her wait and carol, an operator, drains a card.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from pathlib import Path

import pytest

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.services import write_scene
from helpers.waiting import until

#: how long bob keeps stopping his checks
ATTACK_S = 12.0
#: the launches bob keeps going at once
BOBS_LAUNCHES = 8

#: bob's stopper: every process of his that is the agent's check of a command
#: ("set -f" opens the check's script) is stopped as soon as it is seen, until
#: the time is out; then everything it stopped goes on (and ends)
STOPPER = """
import os, signal, sys, time
until = time.monotonic() + float(sys.argv[1])
seen, stopped = {str(os.getpid())}, []
while time.monotonic() < until:
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in seen:
            continue
        seen.add(name)
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"set -f" not in f.read():
                    continue
            os.kill(int(name), signal.SIGSTOP)
            stopped.append(int(name))
        except OSError:
            pass
for pid in stopped:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
print(len(stopped))
"""


def _long_path(product_bin: str) -> str:
    """A PATH the check walks for a while (the attack's "long PATH"), within the node's 32 KiB for an environment."""
    return ":".join([product_bin, *(f"/nonexistent/tpn-{i:04d}" for i in range(1000)), "/usr/bin", "/bin"])


def _bobs_launches(node: SharedNode, ends_at: float) -> list[subprocess.Popen]:
    """Bob's shell loops, each launching 1-card jobs of /bin/true's name one after another."""
    bob = node.accounts.bob
    env = node.env(bob) | {"PATH": _long_path(str(runnable().bin))}
    argv = " ".join(runnable().argv())
    loop = (
        f'i=0; while [ "$(date +%s)" -lt {int(ends_at)} ]; do i=$((i+1)); '
        f"{argv} launch --cards 1 --run-id b-$N-$i --wait 30 -- true >/dev/null 2>&1; done"
    )
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    return [bob.spawn(["/bin/sh", "-c", loop], env=env | {"N": str(n)}, **quiet) for n in range(BOBS_LAUNCHES)]


def _taken_at(node: SharedNode, who) -> float:
    shown = node.cli(who, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["taken_at"]


def test_an_account_stopping_its_own_checks_cannot_keep_the_lock_from_others(shared_node, accounts):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    stopper = bob.spawn(
        [runnable().python, "-I", "-c", STOPPER, str(ATTACK_S)], env=bob.env(), stdout=subprocess.PIPE, text=True
    )
    launches = _bobs_launches(shared_node, time.time() + ATTACK_S)
    try:
        time.sleep(2)  # bob's launches are under way, and his checks being stopped
        for i in range(4):
            began = time.time()
            # at most one second for the lock: more, and the CLI gives up (exit 75)
            held = shared_node.cli(alice, "reserve", "--cards", "1", "--for", "10m", "--wait", "1", "--run-id", f"a{i}")
            assert held.returncode == 0, held.stderr
            assert shared_node.cli(alice, "stop", f"a{i}").returncode == 0
            drained = shared_node.cli(carol, "drain", "7", "--reason", "lock test")
            assert drained.returncode == 0, drained.stderr
            assert shared_node.cli(carol, "undrain", "7").returncode == 0
            # the agent keeps reading the node meanwhile: a reading taken since this round began
            until(lambda: _taken_at(shared_node, alice) > began, "a reading")  # noqa: B023 (waited for here)
    finally:
        stopped = stopper.communicate(timeout=ATTACK_S + 30)[0]
        for launch in launches:
            launch.wait(timeout=60)
    assert int(stopped) > 0, "bob's stopper never caught a check: the attack did not happen"


def test_whoever_waits_for_the_lock_is_told_whose_allocation_holds_it(shared_node, accounts):
    """A slow driver keeps bob's launch inside the lock (as the reading under it takes
    that long): alice's reserve gives up after its second and says who held it."""
    alice, bob = accounts.alice, accounts.bob
    write_scene(shared_node.scene, 8, hang_s=6)
    slow = bob.spawn(
        runnable().argv("launch", "--cards", "1", "--run-id", "b-slow", "--", "sleep", "1"),
        env=shared_node.env(bob),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)  # bob's launch has the lock, reading the node for 6 s
        gave_up = shared_node.cli(alice, "reserve", "--cards", "1", "--for", "10m", "--wait", "1", "--run-id", "a-w")
        assert gave_up.returncode == 75, gave_up.stderr
        *waiting, last = gave_up.stderr.splitlines()
        holder = f"waiting for the allocation lock, held by {bob.name}'s launch of b-slow since "
        assert all(line.startswith(f"tpnode-tui: {holder}") for line in waiting), waiting  # said while it waited
        assert last.startswith(f"tpnode-tui: a-w was not placed within 1 s: the agent was still {holder}"), last
        assert last.endswith("; it was cancelled, and nothing was placed"), last
    finally:
        slow.communicate(timeout=60)


#: bob's tracer: the first check of his (a child of the agent's, argv[1], whose command
#: line holds "set -f", which opens the check's script; one not yet exec'd is looked at
#: again) is attached with ptrace, as any account may its own processes (while it is
#: still root's trampoline that is refused, and asked again at once), and never waited
#: for: once the check is killed it stays a zombie only its tracer may collect. It says
#: the pid, and lets go when its standard input closes
TRACER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AGENT = sys.argv[1].encode()
def checks(done):
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in done:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[1] != AGENT:
                    done.add(name)
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"set -f" in f.read():
                    yield name
        except OSError:
            done.add(name)
done = set()
while True:
    for pid in checks(done):
        done.add(pid)
        while libc.ptrace(16, int(pid), None, None) != 0:  # PTRACE_ATTACH
            if ctypes.get_errno() != 1:  # not EPERM: it is gone
                break
        else:
            print(pid, flush=True)
            sys.stdin.read()
            sys.exit(0)
"""


def _state(pid: str) -> str:
    """A process's state letter ("Z": ended, not yet collected), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def test_a_check_its_account_traces_and_never_lets_go_of_does_not_stop_the_agent(shared_node, accounts):
    """A process that ended while traced can be collected by its parent only once
    its tracer lets go: the agent must not wait for that in its event loop."""
    alice, bob = accounts.alice, accounts.bob
    tracer = bob.spawn(
        [runnable().python, "-I", "-c", TRACER, str(shared_node.agent.pid)],
        env=bob.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    launches = _bobs_launches(shared_node, time.time() + 60)
    try:
        assert select.select([tracer.stdout], [], [], 60)[0], "bob's tracer never caught a check"
        held = tracer.stdout.readline().strip()
        for launch in launches:
            launch.kill()
        # the agent gives up on the check after its time and kills it: ended, held by bob's tracer
        until(lambda: _state(held) == "Z", "the traced check to be killed")
        try:
            shown = shared_node.cli(alice, "reserve", "--cards", "1", "--for", "10m", "--wait", "1", "--run-id", "a-t")
        except subprocess.TimeoutExpired:
            pytest.fail("the agent stopped answering while bob's tracer held his ended check")
        assert shown.returncode == 0, shown.stderr
        began = time.time()
        until(lambda: _taken_at(shared_node, alice) > began, "a reading")
    finally:
        for launch in launches:
            launch.kill()
            launch.wait(timeout=60)
        tracer.stdin.close()  # bob lets go: the agent collects its check
        tracer.wait(timeout=60)
    until(lambda: _state(held) == "", "the agent to collect the check once bob let go")


#: bob's killer: every process of his but itself is killed, again and again (a check
#: of his the moment it is his), until its standard input closes
KILLER = """
import os, select, signal, sys
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def _running(node: SharedNode, who, run_id: str):
    return next((j for j in node.status(who)["jobs"] if j["run_id"] == run_id and j["status"] == "running"), None)


def test_an_account_killing_its_own_checks_drops_its_queued_launch_and_not_everyones(shared_node, accounts):
    """A check its account kills is that launch's failure, not the node's: the
    queue goes on past it, where a failure of the node's would end every round."""
    alice, bob = accounts.alice, accounts.bob
    assert shared_node.cli(alice, "reserve", "--cards", "8", "--for", "1h", "--run-id", "all").returncode == 0
    env = shared_node.env(bob) | {"PATH": _long_path(str(runnable().bin))}
    queued = bob.run(runnable().argv("launch", "--cards", "1", "--queue", "--run-id", "b-q", "--", "true"), env=env)
    assert "queued b-q" in queued.stdout, queued.stderr
    killer = bob.spawn(
        [runnable().python, "-I", "-c", KILLER],
        env=bob.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killer.stdout.readline() == "ready\n"
    try:
        queued = shared_node.cli(alice, "launch", "--cards", "1", "--queue", "--run-id", "a-q", "--", "sleep", "60")
        assert "queued a-q" in queued.stdout, queued.stderr
        assert shared_node.cli(alice, "stop", "all").returncode == 0
        until(lambda: _running(shared_node, alice, "a-q"), "alice's queued launch to start behind bob's")
    finally:
        killer.communicate("", timeout=60)
    said = [json.loads(line)["message"] for line in shared_node.cli(bob, "events", "--json").stdout.splitlines()]
    # its first check killed, bob's launch left the queue; taken for the node's failure, it
    # stayed at the head, and every round stopped at it until one check outran the killer
    dropped = [m for m in said if m.startswith("queued launch b-q left the queue: ")]
    assert dropped and "was killed (SIGKILL)" in dropped[0], said
    assert not any("b-q of" in m and "got card" in m for m in said), said
