"""The headless CLI as a user runs it: a real process, real exit codes, real stderr.

The node is simulated (a scene file) and jobs are real local processes in a
temporary state dir, so every command goes through the real allocator and lock.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers.load import node_env
from helpers.paths import LOCK_WORKER
from helpers.services import free_port, write_scene
from tpnode_tui.model.errors import ConfigError, RuntimeUnavailable


class Cli:
    def __init__(self, scene, state_dir):
        self.env = node_env(scene, state_dir)

    def __call__(self, *args, env=None):
        return subprocess.run(
            [sys.executable, "-m", "tpnode_tui", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=60,
        )

    def status(self):
        proc = self("status", "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def cli(scene, state_dir):
    c = Cli(scene, state_dir)
    yield c
    for job in c.status()["jobs"]:
        if job["status"] == "running":
            c("stop", job["run_id"])


def assert_one_clean_line(stderr: str):
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_status_json_shows_every_card_state(cli, scene, tmp_path):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(8)]
        cards[4].update(memory_used_mib=20000, processes=[{"pid": holder.pid, "used_memory_mib": 19000}])
        cards[5].update(memory_used_mib=30000)
        cards[6]["health"] = {"row_remap_pending": True}
        write_scene(scene, cards)
        assert cli("launch", "--cards", "2", "--run-id", "train-a", "--", "sleep", "60").returncode == 0
        assert cli("reserve", "--cards", "1", "--for", "1h", "--owner", "alice", "--run-id", "rsv-a").returncode == 0

        data = cli.status()
        states = [c["state"] for c in data["cards"]]
        assert states == ["job", "job", "reservation", "free", "external", "external", "unhealthy", "free"]
        assert data["total"] == 8 and data["free"] == [3, 7]
        assert data["by_job"] == {"0": "train-a", "1": "train-a", "2": "rsv-a"}
        assert data["external"] == [4, 5] and data["external_probe_ok"] is True
        assert "row remapping pending" in data["unhealthy"]["6"]
        assert data["explain"].startswith("8 cards total, 2 free")
        holder_info = data["cards"][4]["holders"][0]
        assert holder_info["pid"] == holder.pid and holder_info["visible"] is True
        assert "sleep 60" in holder_info["command"]
        assert {j["run_id"]: (j["kind"], j["gpus"]) for j in data["jobs"]} == {
            "train-a": ("job", [0, 1]),
            "rsv-a": ("reservation", [2]),
        }
        for key in ("index", "state", "run_id", "holders", "reason", "memory_used_mib", "memory_total_mib"):
            assert key in data["cards"][0]

        write_scene(scene, cards, blind=True)
        blind = cli.status()
        assert blind["external_probe_ok"] is False
        assert [c["state"] for c in blind["cards"]][3] == "unverified"
        assert "free count may be too high" in blind["explain"]
    finally:
        holder.kill()
        holder.wait()


def test_text_status_names_each_intruder_under_its_card_and_counts_them_in_the_summary(cli, scene):
    """A process of someone other than the holder on a held card is named where the
    card is: its account, pid, command (made printable, cut short), memory and the
    card, as the alert on tpnode_intruders says status does; the summary counts it."""
    command = "\x1b[2Jtrain " + "--flag " * 20
    intruder = subprocess.Popen([command, "60"], executable="sleep")
    try:
        assert cli("reserve", "--cards", "1", "--for", "1h", "--owner", "alice", "--run-id", "rsv-a").returncode == 0
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(8)]
        cards[0].update(memory_used_mib=30720, processes=[{"pid": intruder.pid, "used_memory_mib": 30720}])
        write_scene(scene, cards)
        out = cli("status")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert "8 cards total, 7 free; 1 held by a reservation; 1 with an intruder (card 0)" in lines
        row = next(i for i, line in enumerate(lines) if line.startswith("0    reservation"))
        named = lines[row + 1]
        assert named.startswith(f"  ! root (pid {intruder.pid}, '\\x1b[2Jtrain --flag --flag ")
        assert "\x1b" not in out.stdout and "..., 30.0 GiB) is using card 0, reserved by alice until " in named
        assert len(named) < 140 and lines[row + 2].startswith("1    free")
    finally:
        intruder.kill()
        intruder.wait()


def test_human_status_is_readable(cli):
    out = cli("status")
    assert out.returncode == 0
    assert "8 cards total, 8 free" in out.stdout
    assert "CARD" in out.stdout and "free" in out.stdout


def test_launch_reports_cards_and_no_capacity_exits_75_with_the_explanation(cli):
    first = cli("launch", "--cards", "6", "--run-id", "big", "--json", "--", "sleep", "60")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["gpus"] == [0, 1, 2, 3, 4, 5]
    refused = cli("launch", "--cards", "3", "--", "sleep", "60")
    assert refused.returncode == 75
    assert_one_clean_line(refused.stderr)
    assert "need 3 cards, but 8 cards total, 2 free; 6 held by platform jobs" in refused.stderr
    assert "try again later" in refused.stderr


def test_a_request_that_can_never_fit_exits_1_and_says_so(cli):
    proc = cli("launch", "--cards", "9", "--", "sleep", "1")
    assert proc.returncode == 1
    assert_one_clean_line(proc.stderr)
    assert "this node has 8" in proc.stderr and "no amount of waiting" in proc.stderr


@pytest.mark.parametrize("count", ["9", "65537", "100000000000000000000"])
@pytest.mark.parametrize("command", [["launch"], ["reserve", "--for", "1h"]])
def test_more_cards_than_the_node_has_is_one_refusal_however_many(cli, count, command):
    """9 cards on an 8-card node and 10^20 are the same mistake: the same words,
    the node's count, exit 1; never a field's name, never queued."""
    args = [*command, "--cards", count, "--run-id", "big"]
    proc = cli(*args, *(["--", "sleep", "1"] if command[0] == "launch" else []))
    assert proc.returncode == 1, proc
    assert_one_clean_line(proc.stderr)
    assert proc.stderr == (
        f"tpnode-tui: big needs {count} cards and this node has 8: no amount of waiting will place it; "
        "ask for fewer cards\n"
    )
    assert cli.status()["jobs"] == [] and cli("queue", "--json").stdout.count("big") == 0


def test_a_reservation_says_when_it_ends_as_extend_does(cli):
    before = time.time()
    reserved = cli("reserve", "--cards", "1", "--for", "2h", "--run-id", "rsv-ends")
    assert reserved.returncode == 0, reserved.stderr
    ends = re.fullmatch(r"reserved rsv-ends on card 0 until (\d\d:\d\d:\d\d) \(left (1h59m|2h00m)\)\n", reserved.stdout)
    assert ends, reserved.stdout
    expires = cli.status()["jobs"][0]["expires_at"]
    assert ends.group(1) == time.strftime("%H:%M:%S", time.localtime(expires)) and expires >= before + 7200
    extended = cli("extend", "rsv-ends", "--for", "1h")
    assert re.fullmatch(r"extended rsv-ends: it holds card 0 until \d\d:\d\d:\d\d \(left 2h5\dm\)\n", extended.stdout)
    again = cli("reserve", "--cards", "1", "--for", "3h", "--run-id", "rsv-ends")
    said = r"rsv-ends already holds card 0 until [0-9:]+ \(left 2h5\dm\); nothing new started\n"
    assert re.fullmatch(said, again.stdout)


def test_a_socket_named_and_not_answering_is_refused_never_served_here(cli, tmp_path):
    """Naming a socket means that agent: the node is not served in this process
    instead, as root or not, with a flag or the variable; the node's own socket,
    the default or its file's, is the one auto may serve in-process without."""
    named = tmp_path / "no-agent.sock"
    for how in ({"args": ["--agent-socket", str(named)]}, {"env": {"TUNEPLANE_AGENT_SOCKET": str(named)}}):
        proc = cli(*how.get("args", []), "launch", "--cards", "1", "--", "sleep", "60", env=how.get("env"))
        assert proc.returncode == 1, proc
        assert_one_clean_line(proc.stderr)
        assert proc.stderr.startswith(f"tpnode-tui: no agent answers at {named}, the socket --agent-socket or ")
        assert "give --agent off to serve it here" in proc.stderr and proc.stdout == ""
    assert cli("--agent-socket", str(named), "--agent", "off", "status").returncode == 0
    node_file = tmp_path / "agent.env"
    node_file.write_text(f"TUNEPLANE_AGENT_SOCKET={named}\n")
    served = cli("status", env={"TUNEPLANE_NODE_ENV_FILE": str(node_file)})
    assert served.returncode == 0 and "served by this process" in served.stdout
    assert cli.status()["jobs"] == []


@pytest.mark.parametrize(
    "args,words",
    [
        (["launch", "--cards", "0", "--", "true"], "at least 1"),
        (["launch", "--cards", "-1", "--", "true"], "at least 1"),
        (["launch", "--cards", "two", "--", "true"], "'two' is not a whole number"),
        (["launch", "--cards", "1"], "nothing to run"),
        (["launch", "--cards", "1", "--run-id", "bad id; rm -rf /", "--", "true"], "is not valid"),
        (["reserve", "--cards", "1", "--for", "forever"], "'forever' is not understood"),
        (["reserve", "--cards", "1", "--for", "0s"], "at least 1s"),
        (["frobnicate"], "'frobnicate' is not a tpnode-tui command (see tpnode-tui --help)"),
        (["stauts"], "'stauts' is not a tpnode-tui command: did you mean status? (see tpnode-tui --help)"),
        (["--interval", "2", "reclam"], "did you mean reclaim?"),
        (["reserve", "--cards", "1", "--for", "30"], "argument --for: 30 has no unit: 30m or 30s?"),
        (["reserve", "--cards", "1", "--for", "1.5"], "1.5 has no unit: 1.5m or 1.5s?"),
        (["reserve", "--cards", "1", "--for", "-5m"], "argument --for: -5m: a duration must be positive, e.g. 5m"),
        (["extend", "r", "--for", "30"], "argument --for: 30 has no unit: 30m or 30s?"),
        (["extend", "r", "--for", "-1h"], "a duration must be positive, e.g. 1h"),
        (["events", "--since", "-1h"], "argument --since: -1h: a duration must be positive"),
        (["audit", "--since", "3600"], "3600 has no unit"),
        (["events", "--card", "99"], "card 99 is not a card of this node (its cards: 0-7)"),
        (["events", "--card", "8", "--follow"], "card 8 is not a card of this node (its cards: 0-7)"),
        (["launch", "--", "true"], "--cards"),
        (["usage", "--since", "yesterday"], "'yesterday' is neither a date such as 2026-12-01"),
        (["usage", "--until", "2026-13-01"], "'2026-13-01' is neither a date"),
        (["usage", "--since", "1d", "--until", "2d"], "is not before --until"),
        (["usage", "--by", "account"], "argument --by: invalid choice: 'account'"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_line(cli, args, words):
    proc = cli(*args)
    assert proc.returncode == 2, proc
    assert_one_clean_line(proc.stderr)
    assert words in proc.stderr
    assert cli.status()["jobs"] == []  # nothing half-done


def test_usage_served_in_process_says_the_node_s_agent_records_it_and_exits_1(cli):
    """1, not 2: the command is right, and the same command answers where the
    node's agent runs; 2 would tell a script to fix its arguments."""
    assert cli("launch", "--cards", "1", "--run-id", "held", "--", "sleep", "60").returncode == 0
    for args in ([], ["--json"], ["--by", "job", "--since", "2026-12-01"]):
        proc = cli("usage", *args)
        assert proc.returncode == 1, proc
        assert_one_clean_line(proc.stderr)
        assert proc.stderr.startswith("tpnode-tui: usage is recorded by the node's agent: this node is served in")
        assert "tpnode-tui agent" in proc.stderr and proc.stdout == ""


def test_a_bad_setting_is_refused_at_start_naming_it(cli):
    proc = cli("status", env={"TUNEPLANE_MEM_BUSY_MIB": "lots"})
    assert proc.returncode == 2
    assert_one_clean_line(proc.stderr)
    assert "TUNEPLANE_MEM_BUSY_MIB" in proc.stderr


def test_flags_override_environment(cli, tmp_path):
    scene2 = write_scene(tmp_path / "four.json", 4)
    data = json.loads(cli("--probe", f"simulated:{scene2}", "status", "--json").stdout)
    assert data["total"] == 4


def test_stop_then_reclaim(cli):
    assert cli("launch", "--cards", "1", "--run-id", "j1", "--", "sleep", "60").returncode == 0
    proc = cli("reclaim", "j1")
    assert proc.returncode == 1 and "still running; stop it first" in proc.stderr
    stopped = cli("stop", "j1")
    assert stopped.returncode == 0 and "stopped j1 (card 0)" in stopped.stdout
    job = cli.status()["jobs"][0]
    assert job["status"] == "exited" and cli.status()["free"] == list(range(8))
    reclaimed = cli("reclaim")
    assert reclaimed.returncode == 0 and reclaimed.stdout == "removed j1 (job, stopped)\n"
    assert cli.status()["jobs"] == []
    missing = cli("stop", "j1")
    assert missing.returncode == 1 and "no running job or reservation has run id j1" in missing.stderr


def test_a_stopped_reservation_is_reclaimed_as_stopped_not_as_a_signal_code(cli):
    assert cli("reserve", "--cards", "1", "--for", "1h", "--run-id", "rsv-a").returncode == 0
    assert cli("stop", "rsv-a").returncode == 0
    reclaimed = cli("reclaim", "rsv-a")
    assert reclaimed.returncode == 0 and reclaimed.stdout == "removed rsv-a (reservation, stopped)\n"


def test_reclaim_keeps_the_exit_code_of_a_command_that_ended_on_its_own(cli):
    assert cli("launch", "--cards", "1", "--run-id", "j3", "--", "sh", "-c", "exit 3").returncode == 0
    deadline = time.monotonic() + 30
    while cli.status()["jobs"][0]["status"] != "exited":
        assert time.monotonic() < deadline, "j3 to end"
        time.sleep(0.1)
    reclaimed = cli("reclaim", "j3")
    assert reclaimed.returncode == 0 and reclaimed.stdout == "removed j3 (job, exit code 3)\n"


def test_hostile_command_is_stored_and_run_literally(cli, tmp_path):
    marker = tmp_path / "pwned"
    args = ["sh", "-c", "sleep 60", "x", f"$(touch {marker})", "a b", "it's", "line\nbreak", "ünïcode"]
    assert cli("launch", "--cards", "1", "--run-id", "hostile", "--", *args).returncode == 0
    job = cli.status()["jobs"][0]
    assert job["command"] == args
    assert not marker.exists()


def test_same_run_id_twice_is_idempotent(cli):
    assert cli("launch", "--cards", "2", "--run-id", "same", "--", "sleep", "60").returncode == 0
    again = cli("launch", "--cards", "2", "--run-id", "same", "--", "sleep", "60")
    assert again.returncode == 0 and "already holds cards 0,1" in again.stdout
    assert len(cli.status()["jobs"]) == 1


def test_a_command_that_does_not_exist_is_refused_even_on_a_full_node(cli):
    assert cli("launch", "--cards", "8", "--", "sleep", "60").returncode == 0
    missing = cli("launch", "--cards", "1", "--", "/nonexistent/train")
    assert missing.returncode == 1 and "not found" in missing.stderr  # not 75: waiting cannot help
    image = cli("launch", "--cards", "1", "--image", "pytorch/pytorch", "--", "python")
    assert image.returncode == 2 and "TUNEPLANE_RUNTIME=docker" in image.stderr


# ── waiting is never silent ──────────────────────────────────────────────────


@pytest.fixture
def lock_holder(cli):
    """Another process holding the allocation lock (flock) until the test ends."""
    proc = subprocess.Popen([sys.executable, str(LOCK_WORKER), "hold"], env=cli.env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("held"), f"the holder did not take the lock (exit {proc.poll()})"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(60)


def test_a_launch_that_waits_for_the_lock_says_once_who_holds_it_and_wait_bounds_it(cli, lock_holder):
    proc = cli("launch", "--cards", "1", "--run-id", "bounded", "--wait", "1", "--", "sleep", "60")
    assert proc.returncode == 75, proc
    waiting, gave_up = proc.stderr.strip().splitlines()  # exactly two lines, though it retried every 10 ms
    assert waiting.startswith(f"tpnode-tui: waiting for the allocation lock, held by pid {lock_holder.pid} (")
    assert "since " in waiting and "lock_worker.py hold" in waiting
    assert gave_up.startswith("tpnode-tui: gave up after 1s (waiting for the allocation lock, held by pid")
    assert "nothing was started, try again later" in gave_up
    assert cli.status()["jobs"] == []


def test_without_wait_a_launch_waits_for_the_lock_as_long_as_it_takes_saying_so_once(cli, lock_holder):
    launch = subprocess.Popen(
        [sys.executable, "-m", "tpnode_tui", "launch", "--cards", "1", "--run-id", "patient", "--", "sleep", "60"],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = launch.stderr.readline()
        assert first.startswith(f"tpnode-tui: waiting for the allocation lock, held by pid {lock_holder.pid}")
        time.sleep(0.5)  # fifty retries
        assert launch.poll() is None
        lock_holder.kill()
        out, rest = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 0 and "launched patient on card 0" in out
    assert rest == ""


def test_a_launch_waiting_for_an_unreachable_redis_says_so_once(cli):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    proc = cli("reserve", "--cards", "1", "--for", "1h", "--wait", "0.5", env={"TUNEPLANE_REDIS_URL": url})
    assert proc.returncode == 75, proc
    waiting, gave_up = proc.stderr.strip().splitlines()
    assert waiting.startswith(f"tpnode-tui: Redis at {url} unreachable (")
    assert waiting.endswith("waiting for it to answer")
    assert gave_up.startswith(f"tpnode-tui: gave up after 0.5s (Redis at {url} unreachable")


def test_a_blind_node_refuses_at_once_and_says_it_does_not_wait(cli, scene):
    write_scene(scene, 8, blind=True)
    proc = cli("launch", "--cards", "1", "--", "sleep", "60", env={"TUNEPLANE_LOCAL_GPU_COUNT": "8"})
    assert proc.returncode == 75
    assert_one_clean_line(proc.stderr)
    assert "cannot be probed" in proc.stderr and "not waiting for cards: try again later" in proc.stderr
    assert "waiting until" not in proc.stderr


# ── reusing a run id ─────────────────────────────────────────────────────────


def test_the_same_launch_again_is_idempotent_and_a_different_one_under_its_run_id_is_a_conflict(cli):
    assert cli("launch", "--cards", "1", "--run-id", "e1", "--", "sleep", "60").returncode == 0
    again = cli("launch", "--cards", "1", "--run-id", "e1", "--json", "--", "sleep", "60")
    answer = json.loads(again.stdout)
    assert again.returncode == 0 and answer["job"]["status"] == "running"
    assert {k: answer[k] for k in ("run_id", "gpus", "existing", "expires_at", "warning")} == {
        "run_id": "e1",
        "gpus": [0],
        "existing": True,
        "expires_at": None,
        "warning": None,
    }

    other = cli("launch", "--cards", "3", "--run-id", "e1", "--", "echo", "different")
    assert other.returncode == 1
    assert_one_clean_line(other.stderr)
    assert "run id e1 is taken by a running job asked for differently" in other.stderr
    assert "it holds 1 card, not 3" in other.stderr
    assert "its command is sleep 60, not echo different" in other.stderr
    assert "tpnode-tui stop e1" in other.stderr

    as_reservation = cli("reserve", "--cards", "1", "--for", "1h", "--run-id", "e1")
    assert as_reservation.returncode == 1 and "it is a job, not a reservation" in as_reservation.stderr
    assert [(j["run_id"], j["gpus"]) for j in cli.status()["jobs"]] == [("e1", [0])]


def test_the_same_reservation_again_is_idempotent_and_another_length_is_a_conflict(cli):
    first = cli("reserve", "--cards", "2", "--for", "2h", "--run-id", "r1", "--json")
    assert first.returncode == 0, first.stderr
    time.sleep(1.5)  # asked again a little later: the expiry asked for has moved on by that much
    again = cli("reserve", "--cards", "2", "--for", "2h", "--run-id", "r1", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["existing"] is True
    assert json.loads(again.stdout)["expires_at"] == json.loads(first.stdout)["expires_at"]

    shorter = cli("reserve", "--cards", "2", "--for", "1h", "--run-id", "r1")
    assert shorter.returncode == 1
    assert "it ends in 1h59m, not 1h00m" in shorter.stderr or "it ends in 1h58m, not 1h00m" in shorter.stderr
    more = cli("reserve", "--cards", "3", "--for", "2h", "--run-id", "r1")
    assert more.returncode == 1 and "it holds 2 cards, not 3" in more.stderr


# ── output ───────────────────────────────────────────────────────────────────


def test_a_closed_pipe_is_a_quiet_exit_141(cli):
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -1` that has already gone
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tpnode_tui", "status"],
            env=cli.env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == ""


def test_text_status_shows_a_reservation_s_time_left_and_long_run_ids_keep_their_column(cli):
    long_id = "x" * 63
    assert cli("launch", "--cards", "8", "--run-id", long_id, "--", "sleep", "60").returncode == 0
    cli("stop", long_id)
    assert cli("reserve", "--cards", "1", "--for", "2h", "--run-id", "rsv-time", "--owner", "alice").returncode == 0
    lines = cli("status").stdout.splitlines()
    header = next(line for line in lines if line.startswith("RUN ID"))
    below = lines[lines.index(header) + 1 :]
    rows = {line.split()[0]: line for line in below if not line.startswith("  ! ")}  # a note under its row
    assert re.search(r"\bleft (1h59m|2h00m)\b", rows["rsv-time"]), rows["rsv-time"]
    assert rows[long_id].startswith(long_id + "  ")
    for row in rows.values():  # every cell starts where its header does
        for column in ("KIND", "STATUS", "CARDS", "LEFT", "FENCED"):
            at = header.index(column)
            assert row[at - 1] == " " and row[at] != " ", (column, row)
    assert "0,1,2,3,4,5,6,7" in rows[long_id]


def test_status_says_whether_the_node_and_each_job_are_fenced_and_why_not(cli):
    """Root on this machine fences each job (cgroup v2 where writable, else v1); a
    reservation runs nothing to fence, and TUNEPLANE_FENCE=off fences nothing."""
    assert cli("launch", "--cards", "1", "--run-id", "fenced-a", "--", "sleep", "60").returncode == 0
    assert cli("reserve", "--cards", "1", "--for", "1h", "--run-id", "rsv-f").returncode == 0
    off = cli("launch", "--cards", "1", "--run-id", "loose-a", "--", "sleep", "60", env={"TUNEPLANE_FENCE": "off"})
    assert off.returncode == 0, off.stderr
    data = cli.status()
    jobs = {j["run_id"]: j for j in data["jobs"]}
    assert data["node_fence"]["fenced"] is True
    mechanism = data["node_fence"]["mechanism"]
    assert mechanism in ("cgroup-v2", "cgroup-v1")
    assert (jobs["fenced-a"]["fenced"], jobs["fenced-a"]["fence_mechanism"]) == (True, mechanism)
    assert "fence_problem" not in jobs["fenced-a"]
    assert jobs["rsv-f"]["fenced"] is False and "reservation runs nothing" in jobs["rsv-f"]["fence_problem"]
    assert jobs["loose-a"]["fenced"] is False and jobs["loose-a"]["fence_problem"].startswith("TUNEPLANE_FENCE=off")

    text = cli("status").stdout
    how = {"cgroup-v2": "a cgroup v2 device program", "cgroup-v1": "a cgroup v1 device list"}[mechanism]
    assert f"fence: jobs are fenced by {how}" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("RUN ID"))
    at = header.index("FENCED")
    rows = {line.split()[0]: (n, line) for n, line in enumerate(lines) if line.split() and line.split()[0] in jobs}
    assert rows["fenced-a"][1][at:].startswith("yes") and rows["loose-a"][1][at:].startswith("no")
    n, _ = rows["loose-a"]
    assert lines[n + 1] == "  ! not fenced: TUNEPLANE_FENCE=off: this node does not fence jobs"


# ── bad input ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "args,words",
    [
        (["launch", "--cards", "٣", "--", "true"], "is not a whole number of cards"),
        (["launch", "--cards", "1_0", "--", "true"], "'1_0' is not a whole number of cards"),
        (["launch", "--cards", "1", "--run-id", "", "--", "true"], "--run-id is empty"),
        (["reserve", "--cards", "1", "--for", "1h", "--run-id", ""], "--run-id is empty"),
        (["reserve", "--cards", "1", "--for", "0.0001s"], "must be at least 1s"),
        (["reserve", "--cards", "1", "--for", "٣h"], "is not understood"),
        (["launch", "--cards", "1", "--wait", "soon", "--", "true"], "'soon' is not a number of seconds"),
        (["launch", "--cards", "1", "--wait", "inf", "--", "true"], "'inf' is not a number of seconds"),
        (["--interval", "nan"], "'nan' is not a number of seconds"),
    ],
)
def test_numbers_are_ascii_digits_and_an_empty_run_id_is_refused(cli, args, words):
    proc = cli(*args)
    assert proc.returncode == 2, proc
    assert_one_clean_line(proc.stderr)
    assert words in proc.stderr
    assert cli.status()["jobs"] == []


@pytest.mark.parametrize("value", ["inf", "nan", "601", "1e3"])
def test_an_unbounded_probe_timeout_is_refused(cli, value):
    proc = cli("status", env={"TUNEPLANE_PROBE_TIMEOUT_S": value})
    assert proc.returncode == 2
    assert_one_clean_line(proc.stderr)
    assert "TUNEPLANE_PROBE_TIMEOUT_S" in proc.stderr


# ── the state dir ────────────────────────────────────────────────────────────


def test_a_state_dir_that_is_a_file_is_named_as_such(cli, tmp_path):
    not_a_dir = tmp_path / "passwd"
    not_a_dir.write_text("root:x:0:0::/root:/bin/sh\n")
    for args in (["status"], ["launch", "--cards", "1", "--", "sleep", "1"], ["--readonly"]):
        proc = cli(*args, env={"TUNEPLANE_STATE_DIR": str(not_a_dir)})
        assert proc.returncode == 2, (args, proc)
        assert_one_clean_line(proc.stderr)
        assert f"the state dir {not_a_dir} is not a directory" in proc.stderr
        assert "run as the user" not in proc.stderr and "this user can write" not in proc.stderr
    assert not_a_dir.read_text() == "root:x:0:0::/root:/bin/sh\n"


def test_a_missing_state_dir_is_said_plainly_and_status_does_not_create_it(cli, tmp_path):
    mistyped = tmp_path / "stat-dir"
    env = {"TUNEPLANE_STATE_DIR": str(mistyped)}
    text = cli("status", env=env)
    assert text.returncode == 0
    assert f"no state dir at {mistyped}: no job has been recorded here" in text.stdout
    data = json.loads(cli("status", "--json", env=env).stdout)
    assert f"no state dir at {mistyped}" in data["state_dir_note"]
    assert not mistyped.exists()

    launched = cli("launch", "--cards", "1", "--run-id", "first", "--", "sleep", "60", env=env)
    assert launched.returncode == 0
    assert_one_clean_line(launched.stderr)
    assert f"created the state dir {mistyped}, which did not exist" in launched.stderr
    assert mistyped.is_dir()
    cli("stop", "first", env=env)
    assert json.loads(cli("status", "--json", env=env).stdout)["state_dir_note"] is None


# ── the dashboard needs a terminal ───────────────────────────────────────────


def test_the_dashboard_without_a_terminal_on_stdin_is_refused_in_one_line(cli):
    proc = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "--demo"],
        env=cli.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert_one_clean_line(proc.stderr)
    assert "needs a terminal" in proc.stderr and "tpnode-tui status" in proc.stderr


async def test_no_state_dir_error_advises_a_second_state_dir(tmp_path):
    """A private state dir would be a second truth about the node: every error
    says what is wrong with this one instead."""
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.locks import make_lock
    from tpnode_tui.runtimes.statefile import StateFile

    (tmp_path / "file").write_text("")
    inside_a_file = tmp_path / "file" / "state"
    lock = make_lock(load_settings({}, state_dir=str(inside_a_file)))
    with pytest.raises(ConfigError) as locked:
        async with lock.hold():
            pass
    with pytest.raises(RuntimeUnavailable) as recorded:
        StateFile(inside_a_file).ensure_dir()
    for error in (locked.value, recorded.value):
        assert str(inside_a_file) in str(error)
        assert "TUNEPLANE_STATE_DIR to a directory" not in str(error)
    assert f"the state dir {inside_a_file} is not a directory" in str(locked.value)


def test_env_prints_what_the_job_itself_was_given(cli, state_dir):
    """One answer for a job's variables: the job's own environment and `tpnode-tui env`
    name its cards alike (by the node's indices), whatever the driver calls them."""
    assert cli("reserve", "--cards", "3", "--for", "1h", "--run-id", "first").returncode == 0
    done = cli("launch", "--cards", "2", "--run-id", "on-3-4", "--", "sh", "-c", "env; echo READY; exec sleep 60")
    assert done.returncode == 0, done.stderr
    log = state_dir / "logs" / "on-3-4.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and "READY" in log.read_text()):
        assert time.monotonic() < deadline, "the job's output"
        time.sleep(0.05)
    inside = dict(line.split("=", 1) for line in log.read_text().splitlines() if "=" in line)
    printed = cli("env", "on-3-4")
    assert printed.returncode == 0, printed.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in printed.stdout.splitlines())
    assert exported["NVIDIA_VISIBLE_DEVICES"] == inside["NVIDIA_VISIBLE_DEVICES"] == "3,4"
    assert exported["CUDA_DEVICE_ORDER"] == inside["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # outside the job's fence (a shell beside it) CUDA counts the node's cards
    assert exported["CUDA_VISIBLE_DEVICES"] == "3,4"


def test_logs_shows_a_job_s_output_and_python_in_it_runs_unbuffered_unless_asked_otherwise(cli, state_dir):
    """launch says where the output goes; logs shows it (here served in this process,
    for this account's own job); PYTHONUNBUFFERED=1 is in the job's environment
    unless the caller's environment sets it, so what a stopped job printed is kept."""
    printing = "env; echo READY; exec sleep 60"
    cli.env.pop("PYTHONUNBUFFERED", None)  # as a login's environment is, whatever this test's has
    done = cli("launch", "--cards", "1", "--run-id", "envs", "--", "sh", "-c", printing)
    assert done.returncode == 0, done.stderr
    log = state_dir / "logs" / "envs.log"
    assert (
        done.stdout.splitlines()[1]
        == f"its output goes to its log {log}: tpnode-tui logs envs shows it (-f follows it)"
    )
    own = cli("launch", "--cards", "1", "--run-id", "own", "--", "sh", "-c", printing, env={"PYTHONUNBUFFERED": ""})
    assert own.returncode == 0, own.stderr
    for run_id in ("envs", "own"):
        deadline = time.monotonic() + 30
        while "READY" not in (shown := cli("logs", run_id)).stdout:
            assert shown.returncode == 0 and time.monotonic() < deadline, shown
            time.sleep(0.05)
        assert shown.stderr == "" and shown.stdout == (state_dir / "logs" / f"{run_id}.log").read_text()
        given = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
        assert given["PYTHONUNBUFFERED"] == ("1" if run_id == "envs" else "")
    missing = cli("logs", "no-such-job")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert (
        missing.stderr
        == "tpnode-tui: no job or reservation has run id no-such-job (a job reclaimed is no longer listed)\n"
    )


def test_a_command_s_warning_is_a_line_like_its_errors_and_v_keeps_the_log_line(cli, state_dir):
    """A warning while a command runs (here: the node log cannot be written) is
    said as the command says its errors; with -v it is a log line (time, level, module)."""
    (state_dir / "events.jsonl").mkdir()  # the node log, where a file cannot be written
    done = cli("reserve", "--cards", "1", "--for", "1m", "--run-id", "warned")
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr == f"tpnode-tui: warning: cannot write the node log {state_dir / 'events.jsonl'}: Is a directory\n"
    )
    done = cli("-v", "stop", "warned")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "cannot write the node log" in line]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING tpnode_tui\.state\.nodelog: ", line), line
