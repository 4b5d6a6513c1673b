"""Any node's agent over SSH, as its accounts reach it from elsewhere.

A real sshd on loopback (keys made here, one per account), a real agent as
root, and real accounts: each runs ``tpnode-tui --host NODE ...`` as itself,
ssh logs it in, sshd runs ``tpnode-tui dial-stdio`` as that account, and the
agent names whoever that is from the kernel. Nothing tells anyone's name.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from helpers.accounts import cli_as, runnable
from helpers.agents import SharedNode
from helpers.ssh import Sshd
from helpers.waiting import until

NODE = "tpn-node"


@pytest.fixture(scope="module")
def reach(accounts):
    """The shared node, an sshd in front of it, and alice and bob able to log in as themselves."""
    with SharedNode.started(accounts, "tpn-ssh-") as node:
        sshd = Sshd(node.root, node.socket)
        sshd.start()
        try:
            for who in (accounts.alice, accounts.bob):
                sshd.let_in(who, NODE)
            sshd.let_in(accounts.bob, "as-alice", as_user=accounts.alice.name, authorise=False)
            yield node, sshd
        finally:
            sshd.end_logins(accounts.alice, accounts.bob)
            sshd.stop()


def over_ssh(who, *args, host: str = NODE):
    """``tpnode-tui --host host ARGS`` as ``who``, from a shell with no agent of its own."""
    env = who.env(TUNEPLANE_AGENT_SOCKET="/nonexistent/agent.sock")
    return cli_as(who, env, "--host", host, *args)


def test_bob_through_ssh_is_bob_and_sees_the_node(reach, accounts):
    bob = accounts.bob
    done = over_ssh(bob, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["via"] == "agent" and status["you"]["user"] == bob.name and status["you"]["uid"] == bob.uid
    assert status["total"] == 8
    text = over_ssh(bob, "status")
    assert (
        f"you: {bob.name} (uid {bob.uid}), holding 0 cards; through the node's agent on {NODE} over ssh" in text.stdout
    ), text.stdout


def test_a_job_launched_over_ssh_runs_as_its_caller_in_their_home(reach, accounts):
    node, _sshd = reach
    alice = accounts.alice
    done = over_ssh(alice, "launch", "--cards", "1", "--run-id", "a-ssh", "--json", "--", "sleep", "120")
    assert done.returncode == 0, done.stderr
    job = next(j for j in node.status(alice)["jobs"] if j["run_id"] == "a-ssh")
    assert job["owner"] == alice.name and job["uid"] == alice.uid
    supervisor = job["pid"]
    sleeper = until(lambda: _child(supervisor, "sleep"), "the job's command to run")
    uids = re.search(r"^Uid:\s+(.*)$", Path(f"/proc/{sleeper}/status").read_text(), re.M).group(1).split()
    assert set(map(int, uids)) == {alice.uid}
    assert Path(f"/proc/{sleeper}/cwd").resolve() == alice.home.resolve()  # a login's, not this machine's


def test_bob_over_ssh_may_not_stop_alice_s_job(reach, accounts):
    node, _sshd = reach
    alice, bob = accounts.alice, accounts.bob
    assert over_ssh(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "a-keep").returncode == 0
    refused = over_ssh(bob, "stop", "a-keep")
    assert refused.returncode == 77, refused.stderr
    [line] = refused.stderr.splitlines()
    assert f"only {alice.name} or an operator" in line, line
    job = next(j for j in node.status(alice)["jobs"] if j["run_id"] == "a-keep")
    assert job["status"] == "running"
    assert over_ssh(alice, "stop", "a-keep").returncode == 0


def test_what_ssh_refuses_is_one_line_and_nothing_is_served_here(reach, accounts):
    bob = accounts.bob
    done = over_ssh(bob, "status", host="as-alice")  # bob's key is not alice's
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tpnode-tui: cannot reach as-alice over ssh: ") and "Permission denied" in line, line


def test_a_host_that_could_be_an_option_is_refused_before_ssh_runs(reach, accounts):
    done = over_ssh(accounts.bob, "status", host="-oProxyCommand=touch /tmp/pwned")
    assert done.returncode == 2 and "is not [ssh://][user@]host[:port]" in done.stderr, done.stderr


#: bob's dashboard over SSH; prints what its header said and the refusal of a stop
DASHBOARD = textwrap.dedent("""
    import asyncio, json, sys, time
    from tpnode_tui.config.ssh import SshTarget
    from tpnode_tui.node.ssh import ssh_node
    from tpnode_tui.tui.app import NodeDashboard

    class Dashboard(NodeDashboard):
        said = []
        def notify(self, message, **kwargs):
            self.said.append(message)
            super().notify(message, **kwargs)

    async def main():
        node = ssh_node(SshTarget.parse(sys.argv[1]))
        assert await node.answers()
        app = Dashboard(node)
        shown = {}
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while not (app.follower.snapshot and app.follower.snapshot.jobs):
                assert time.monotonic() < deadline, "nothing read"
                await pilot.pause(0.05)
            shown["header"] = str(app.query_one("#header").render())
        await node.close()
        print(json.dumps(shown))

    asyncio.run(main())
""")


def test_bob_s_dashboard_over_ssh_names_him_and_where_it_reads(reach, accounts):
    node, _sshd = reach
    alice, bob = accounts.alice, accounts.bob
    assert over_ssh(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "a-seen").returncode == 0
    script = node.root / "ssh_dashboard.py"
    script.write_text(DASHBOARD)
    script.chmod(0o644)
    done = bob.run([runnable().python, str(script), NODE], env=bob.env(), timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    header = json.loads(done.stdout.strip().splitlines()[-1])["header"]
    assert f"{bob.name} │ agent on {NODE} over ssh" in header, header


def test_dial_stdio_joins_its_input_and_output_to_the_agent_the_node_s_file_names(reach, accounts):
    node, _sshd = reach
    bob = accounts.bob
    # the login's environment names another socket, and holds a value that is no setting at all:
    # the node's file is what counts, and nothing else of the login's is read
    env = bob.env(
        TUNEPLANE_NODE_ENV_FILE=str(node.root / "agent.env"),
        TUNEPLANE_AGENT_SOCKET="/nonexistent/a.sock",
        TUNEPLANE_LOCK_RETRY_MS="soon",
    )
    request = b"GET /v1/whoami HTTP/1.1\r\nHost: tpnode-agent\r\nConnection: close\r\n\r\n"
    bridge = subprocess.Popen(
        runnable().argv("dial-stdio"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        user=bob.uid,
        group=bob.gid,
    )
    bridge.stdin.write(request)
    bridge.stdin.flush()
    answer = bridge.stdout.read()  # to its end: the agent closes after an answer asked to
    assert bridge.wait(30) == 0, bridge.stderr.read()
    bridge.stdin.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["user"] == bob.name  # the kernel named the bridge's account
    elsewhere = node.root / "elsewhere.env"
    elsewhere.write_text("TUNEPLANE_AGENT_SOCKET='/nonexistent/agent.sock'\n")
    elsewhere.chmod(0o644)
    gone = subprocess.run(
        runnable().argv("dial-stdio"),
        input="",
        capture_output=True,
        text=True,
        env=bob.env(TUNEPLANE_NODE_ENV_FILE=str(elsewhere), TUNEPLANE_AGENT_SOCKET=str(node.socket)),
        timeout=30,
    )
    assert gone.returncode == 1
    [line] = gone.stderr.splitlines()
    assert line.startswith("tpnode-tui: no agent answers at /nonexistent/agent.sock"), line


def _child(supervisor: int, name: str):
    import psutil

    try:
        for child in psutil.Process(supervisor).children(recursive=True):
            if child.name() == name:
                return child.pid
    except psutil.Error:
        return None
    return None


def test_a_launch_given_up_over_ssh_is_cancelled_at_the_agent_and_nothing_is_placed(reach, accounts):
    node, _sshd = reach
    bob = accounts.bob
    holder = subprocess.Popen(["flock", str(node.state / "alloc.lock"), "sleep", "4"])
    try:
        until(lambda: node.status(bob)["lock_state"], "the allocation lock to be held")
        done = over_ssh(bob, "launch", "--cards", "1", "--run-id", "waitssh", "--wait", "1", "--", "sleep", "300")
        assert done.returncode == 75, done.stderr
        assert "was not placed within 1 s" in done.stderr and "nothing was placed" in done.stderr
    finally:
        holder.wait(30)
    until(lambda: not node.status(bob)["lock_state"], "the lock to be free again")
    after = node.status(bob)
    assert "waitssh" not in {j["run_id"] for j in after["jobs"]} and not after["queue"], after["queue"]


def test_an_agent_this_account_may_not_reach_over_ssh_is_not_allowed_not_missing(reach, accounts):
    node, _sshd = reach
    node.socket.parent.chmod(0o700)
    try:
        done = over_ssh(accounts.bob, "status")
    finally:
        node.socket.parent.chmod(0o755)
    assert done.returncode == 77, done.stderr
    [line] = done.stderr.splitlines()
    assert line == (
        f"tpnode-tui: on {NODE}: this account may not open the node's agent socket {node.socket} (permission denied)"
    ), line


def test_an_empty_host_flag_is_a_mistake_not_this_machine(reach, accounts):
    done = over_ssh(accounts.bob, "status", host="")
    assert done.returncode == 2 and "--host is empty" in done.stderr, done.stderr
