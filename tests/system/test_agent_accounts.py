"""A shared node as its accounts use it: a real agent as root, real accounts at the CLI.

The agent runs as its own process (``python -m tpnode_tui agent``), as it does
under systemd, on a simulated node with the process runtime; two ordinary
accounts and an operator (made with useradd for this module, removed after)
use the CLI as real processes of their own. What each may do is decided from
what the kernel says about them, so nothing here tells the agent who anyone is.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.accounts import cli_as, runnable
from helpers.agents import SharedNode
from helpers.load import BOUND_S, shared_cards
from helpers.waiting import until

INTERVAL = "0.2"


def job(status: dict, run_id: str) -> dict:
    return next(j for j in status["jobs"] if j["run_id"] == run_id)


def test_every_account_sees_the_same_node_and_is_named_by_the_kernel(shared_node, accounts):
    seen = {who.name: shared_node.status(who) for who in (accounts.alice, accounts.bob, accounts.carol)}
    for name, status in seen.items():
        assert status["via"] == "agent" and status["you"]["user"] == name
        assert status["total"] == 8 and len(status["free"]) == 8
    assert seen[accounts.carol.name]["you"]["operator"] is True
    assert seen[accounts.alice.name]["you"]["operator"] is False
    mode = shared_node.socket.stat().st_mode & 0o777
    assert mode == 0o666


def test_a_job_runs_as_its_caller_with_their_groups_and_their_log(shared_node, accounts):
    alice = accounts.alice
    work = alice.home / "work"
    alice.run(["mkdir", "-p", str(work)], env=alice.env())
    done = shared_node.cli(alice, "launch", "--cards", "1", "--run-id", "a-train", "--", "sleep", "120", cwd=work)
    assert done.returncode == 0, done.stderr
    record = job(shared_node.status(alice), "a-train")
    assert record["owner"] == alice.name and record["uid"] == alice.uid
    sleeper = until(lambda: _child_running(record["pid"], "sleep"), "the job's command to run")
    status = Path(f"/proc/{sleeper}/status").read_text()
    uids = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
    groups = {int(g) for g in re.search(r"^Groups:\s*(.*)$", status, re.M).group(1).split()}
    assert uids == [str(alice.uid)] * 4
    assert groups == set(alice.groups) and 0 not in groups
    assert os.readlink(f"/proc/{sleeper}/cwd") == str(work)
    environ = Path(f"/proc/{sleeper}/environ").read_bytes().split(b"\0")
    assert f"USER={alice.name}".encode() in environ and f"HOME={alice.home}".encode() in environ
    log = shared_node.state / "logs" / "a-train.log"
    assert log.stat().st_uid == alice.uid
    assert alice.run(["cat", str(log)], env=alice.env()).returncode == 0
    assert accounts.bob.run(["cat", str(log)], env=accounts.bob.env()).returncode != 0


def test_an_operator_may_name_another_owner_but_does_not_become_them(shared_node, accounts):
    """Operators are a group, not root: naming alice (or root) as owner must not run code as her (or root)."""
    alice, carol = accounts.alice, accounts.carol
    for owner, run_id in ((alice.name, "for-alice"), ("root", "for-root")):
        # the CLI names other owners for reservations only; the API takes one for any launch
        client = (
            f"import asyncio, sys; from pathlib import Path; from tpnode_tui.node.remote import AgentNode; "
            f"from tpnode_tui.port.types.jobs import LaunchRequest\n"
            f"async def main():\n"
            f"    node = AgentNode(Path({str(shared_node.socket)!r}))\n"
            f"    try:\n"
            f"        await node.launch(LaunchRequest(cards=1, command=('sleep', '120'), run_id={run_id!r}, "
            f"owner={owner!r}))\n"
            f"    finally:\n"
            f"        await node.close()\n"
            f"asyncio.run(main())\n"
        )
        done = carol.run([runnable().python, "-c", client], env=shared_node.env(carol))
        assert done.returncode == 0, done.stderr
        record = job(shared_node.status(carol), run_id)
        assert record["owner"] == owner
        supervisor = record["pid"]
        sleeper = until(lambda: _child_running(supervisor, "sleep"), "the job's command to run")  # noqa: B023
        uids = re.search(r"^Uid:\s+(.*)$", Path(f"/proc/{sleeper}/status").read_text(), re.M).group(1).split()
        assert uids == [str(carol.uid)] * 4, (owner, uids)
    assert job(shared_node.status(alice), "for-alice")["uid"] == alice.uid
    assert shared_node.cli(alice, "stop", "for-alice").returncode == 0, "hers to stop"


def _child_running(supervisor: int, name: str) -> int | None:
    import psutil

    try:
        for child in psutil.Process(supervisor).children(recursive=True):
            if child.name() == name:
                return child.pid
    except psutil.NoSuchProcess:
        return None
    return None


def test_another_account_may_not_stop_extend_or_reclaim_and_changes_nothing(shared_node, accounts):
    alice, bob = accounts.alice, accounts.bob
    assert shared_node.cli(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "a-rsv").returncode == 0
    before = job(shared_node.status(alice), "a-rsv")
    for args in (["stop", "a-rsv"], ["extend", "a-rsv", "--for", "1h"], ["reclaim", "a-rsv"]):
        refused = shared_node.cli(bob, *args)
        assert refused.returncode == 77, (args, refused.stderr)
        assert len(refused.stderr.splitlines()) == 1
        assert f"only {alice.name} or an operator may " in refused.stderr
        assert f"; the operators here: root, group {accounts.operators_group}" in refused.stderr
    assert "card 0 is held by a-rsv of" in shared_node.cli(bob, "stop", "a-rsv").stderr
    after = job(shared_node.status(alice), "a-rsv")
    assert after["status"] == "running" and after["expires_at"] == before["expires_at"]

    named = shared_node.cli(bob, "reserve", "--cards", "1", "--for", "1h", "--owner", alice.name)
    assert named.returncode == 77 and "only an operator" in named.stderr
    assert [j["run_id"] for j in shared_node.status(bob)["jobs"]] == ["a-rsv"]


def test_the_owner_and_an_operator_may_and_the_audit_log_has_every_attempt(shared_node, accounts):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    assert shared_node.cli(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "r1").returncode == 0
    extended = shared_node.cli(alice, "extend", "r1", "--for", "30m", "--json")
    assert extended.returncode == 0, extended.stderr
    assert shared_node.cli(bob, "stop", "r1").returncode == 77
    assert shared_node.cli(carol, "stop", "r1").returncode == 0
    assert shared_node.cli(carol, "reclaim", "r1").returncode == 0

    everything = json.loads(shared_node.cli(carol, "audit", "--json").stdout)
    assert everything["all"] is True
    tried = [(e["user"], e["action"], e["result"]) for e in everything["entries"]]
    assert tried == [
        (alice.name, "reserve", "ok"),
        (alice.name, "extend", "ok"),
        (bob.name, "stop", "refused"),
        (carol.name, "stop", "ok"),
        (carol.name, "reclaim", "ok"),
    ]
    mine = json.loads(shared_node.cli(bob, "audit", "--json").stdout)
    assert mine["all"] is False and [e["user"] for e in mine["entries"]] == [bob.name]


def test_a_card_limit_per_account_is_kept_and_says_what_you_hold(accounts):
    with SharedNode.started(accounts, "tpn-quota-", TUNEPLANE_MAX_CARDS_FOR=f"{accounts.bob.name}=1") as n:
        assert n.cli(accounts.bob, "reserve", "--cards", "1", "--for", "1h", "--run-id", "b1").returncode == 0
        over = n.cli(accounts.bob, "reserve", "--cards", "1", "--for", "1h", "--run-id", "b2")
        assert over.returncode == 77
        assert f"you hold 1 card (b1) and ask for 1 card; the limit for {accounts.bob.name} is 1 card" in over.stderr
        you = n.status(accounts.bob)["you"]
        assert (you["cards_held"], you["card_limit"]) == (1, 1)
        assert n.cli(accounts.alice, "reserve", "--cards", "2", "--for", "1h").returncode == 0


def test_fifty_clients_from_three_accounts_at_once_never_share_a_card(shared_node, accounts):
    everyone = (accounts.alice, accounts.bob, accounts.carol)
    procs = []
    for n in range(50):
        who = everyone[n % 3]
        args = (
            ["status", "--json"]
            if n % 2
            else ["reserve", "--cards", "1", "--for", "10m", "--run-id", f"many-{n}", "--json"]
        )
        procs.append(
            who.spawn(
                runnable().argv(*args),
                env=shared_node.env(who),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [(p.communicate(timeout=2 * BOUND_S), p.returncode) for p in procs]
    codes = sorted({code for _, code in results})
    assert set(codes) <= {0, 75}, [err for (_, err), code in results if code not in (0, 75)]
    status = shared_node.status(accounts.carol)
    live = [(j["run_id"], j["gpus"]) for j in status["jobs"] if j["status"] == "running"]
    assert len(live) == 8 and shared_cards(live) == {}
    owners = {j["owner"] for j in status["jobs"]}
    assert owners <= {p.name for p in everyone}


def test_a_queued_launch_survives_the_agent_killed_outright_and_starts_once_there_is_room(shared_node, accounts):
    alice, bob = accounts.alice, accounts.bob
    assert shared_node.cli(alice, "reserve", "--cards", "8", "--for", "1h", "--run-id", "all").returncode == 0
    queued = shared_node.cli(bob, "launch", "--cards", "2", "--run-id", "later", "--queue", "--", "sleep", "120")
    assert queued.returncode == 0 and "queued later" in queued.stdout, queued.stderr

    shared_node.kill(signal.SIGKILL)
    assert (
        job(
            json.loads(
                subprocess.run(
                    [sys.executable, "-m", "tpnode_tui", "--agent", "off", "status", "--json"],
                    capture_output=True,
                    text=True,
                    env=os.environ | shared_node.settings,
                    timeout=BOUND_S,
                ).stdout
            ),
            "all",
        )["status"]
        == "running"
    )
    assert shared_node.socket.exists()  # left behind by the killed agent
    shared_node.start()  # and taken over by the next

    listed = json.loads(shared_node.cli(bob, "queue", "--json").stdout)["queue"]
    assert [(q["run_id"], q["owner"]) for q in listed] == [("later", bob.name)]
    assert shared_node.cli(alice, "stop", "all").returncode == 0
    started = until(
        lambda: next(
            (j for j in shared_node.status(bob)["jobs"] if j["run_id"] == "later" and j["status"] == "running"), None
        ),
        "the queued launch to start after the restart",
    )
    assert started["owner"] == bob.name and len(started["gpus"]) == 2


def test_no_agent_and_a_state_dir_this_account_cannot_use_is_one_clear_line(shared_node, accounts):
    shared_node.kill()
    node_file = shared_node.root / "agent.env"  # the node's own socket, as every account reads it
    node_file.write_text(f"TUNEPLANE_AGENT_SOCKET={shared_node.socket}\n")
    node_file.chmod(0o644)
    env = accounts.bob.env(
        TUNEPLANE_STATE_DIR=str(shared_node.state),
        TUNEPLANE_NODE_ENV_FILE=str(node_file),
        TUNEPLANE_RUNTIME="process",
        TUNEPLANE_PROBE=f"simulated:{shared_node.scene}",
    )
    done = cli_as(accounts.bob, env, "status")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr == (
        f"tpnode-tui: no agent answers at {shared_node.socket}, and this account, {accounts.bob.name}, cannot "
        f"serve the node itself: it may not write in the node's state dir {shared_node.state}; on a shared node "
        "every account goes through the agent: ask the node's operator to start it (systemctl start "
        "tpnode-tui-agent)\n"
    )
    parent = shared_node.root / "roots-own"  # bob may look in, not write
    parent.mkdir(mode=0o755)
    missing = parent / "not-made"
    done = cli_as(accounts.bob, {**env, "TUNEPLANE_STATE_DIR": str(missing)}, "status")
    assert done.returncode == 1
    assert (
        f"this account, {accounts.bob.name}, cannot serve the node itself: the node's state dir {missing} "
        f"is not there, and {accounts.bob.name} may not create it;"
    ) in done.stderr
    assert not missing.exists()


def test_env_prints_exports_for_the_owners_shell(shared_node, accounts):
    alice = accounts.alice
    assert shared_node.cli(alice, "reserve", "--cards", "2", "--for", "1h", "--run-id", "nb").returncode == 0
    printed = shared_node.cli(alice, "env", "nb")
    assert printed.returncode == 0, printed.stderr
    shell = alice.run(["sh", "-c", 'eval "$1"; echo "$CUDA_VISIBLE_DEVICES"', "sh", printed.stdout], env=alice.env())
    assert shell.stdout.strip() == "0,1"
    assert shared_node.cli(accounts.bob, "env", "nb").returncode == 0  # reading is anyone's


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_socket_this_account_may_not_open_is_refused_in_one_line_not_served_here(shared_node, accounts, mode):
    # The agent is there, behind a directory bob may not enter: falling back to
    # serving the node in his own process would be a second record of its cards.
    shared_node.socket.parent.chmod(0o700)
    bob = accounts.bob
    env = bob.env(
        TUNEPLANE_AGENT=mode,
        TUNEPLANE_AGENT_SOCKET=str(shared_node.socket),
        TUNEPLANE_STATE_DIR=str(bob.home / "state"),
        TUNEPLANE_RUNTIME="process",
        TUNEPLANE_PROBE=f"simulated:{shared_node.scene}",
    )
    for command in (["status"], ["launch", "--cards", "1", "--", "sleep", "1"]):
        done = cli_as(bob, env, *command)
        assert done.returncode == 77, done.stderr
        [line] = done.stderr.splitlines()
        assert line == (
            f"tpnode-tui: this account ({bob.name}) may not open the node's agent socket "
            f"{shared_node.socket} (permission denied on it or on a directory above it): the node's "
            "operator decides which accounts may reach the agent"
        )
    assert not (bob.home / "state").exists()


def test_serving_the_node_here_without_leave_to_write_its_state_dir_is_the_same_line_for_every_command(
    shared_node, accounts
):
    """``--agent off`` as an account that may not look into the state dir, or
    may look but not write: one line and exit 2 naming what the state dir
    cannot do for it, whether the command would read (status) or allocate."""
    env = accounts.bob.env(
        TUNEPLANE_STATE_DIR=str(shared_node.state),
        TUNEPLANE_AGENT="off",
        TUNEPLANE_RUNTIME="process",
        TUNEPLANE_PROBE=f"simulated:{shared_node.scene}",
    )
    status, launch = ("status",), ("launch", "--cards", "1", "--", "true")
    mode = shared_node.state.stat().st_mode & 0o777
    try:
        for looks_in, args, to in (
            (False, status, "be looked into"),
            (False, launch, "be looked into"),
            (True, launch, "hold the allocation lock"),
        ):
            shared_node.state.chmod(0o755 if looks_in else 0o700)
            done = cli_as(accounts.bob, env, *args)
            assert (done.returncode, done.stdout) == (2, ""), done.stderr
            assert done.stderr == (
                f"tpnode-tui: the state dir {shared_node.state} cannot {to} (Permission denied); run as a user "
                "who may write there (every allocator on this node shares it)\n"
            )
    finally:
        shared_node.state.chmod(mode)
