"""Bad input and security, at the CLI as users meet it.

Bad input gets one clear line and an exit code and loses nothing: malformed
labels on real containers, broken state files, hostile run ids, owners and
commands. Security: only platform containers are touched, files are private,
a Redis password is never shown, and an engine socket the user may not open is
a plain error. (Usage mistakes on every command are in tests/service/test_cli.py; the
dashboard's dialogs, stop confirmation and --readonly in tests/tui/test_tui_actions.py;
the label and nvidia-smi parsers are fuzzed in tests/unit/test_labels.py and
tests/unit/test_probe_smi.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from helpers.load import (
    BOUND_S,
    DOCKER_JOB,
    PYTHON,
    cli,
    node_env,
    one_line,
    spawn,
    status,
)
from helpers.services import free_port, redis_or_unavailable, write_scene
from tpnode_tui.locks import LEASE_TOKEN_FILE, LOCK_FILE
from tpnode_tui.runtimes.statefile import LOCK_FILE as STATE_LOCK_FILE
from tpnode_tui.runtimes.statefile import STATE_FILE

LONG = 10_000


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def env(request, scene_node):
    """A CLI environment for each runtime; launches add ``image`` before the command."""
    if request.param == "docker":
        dockerd = request.getfixturevalue("dockerd")
        e = node_env(*scene_node, runtime="docker", docker_host=dockerd.host, TUNEPLANE_HOLD_IMAGE=dockerd.image)
        e["image"] = dockerd.image
        return e
    return node_env(*scene_node)


def _launch(env: dict, run_id: str, *command: str) -> list[str]:
    args = ["launch", "--cards", "1", f"--run-id={run_id}", "--json"]  # "=": "-lead" is a value
    if "image" in env:
        args += ["--image", env["image"]]
    return args + ["--", *command]


# ── malformed labels on real containers ──────────────────────────────────────


@pytest.mark.docker
def test_malformed_labels_on_real_containers_count_what_they_can_and_say_the_rest(dockerd, scene_node):
    env = node_env(*scene_node, runtime="docker", docker_host=dockerd.host)
    labels = {
        "hand-mixed": "0,x,99,-1",
        "hand-empty": "",
        "hand-huge": "4," + "x" * (LONG - 2),
    }
    for name, value in labels.items():
        dockerd.cli("run", "-d", "--name", name, "--label", f"tuneplane.gpus={value}", dockerd.image, "sleep", "120")
    human = cli(env, "status")
    assert human.returncode == 0 and human.stderr == "", human.stderr
    data = status(env)
    jobs = {j["name"]: j for j in data["jobs"]}
    assert set(jobs) == set(labels)
    assert data["by_job"] == {"0": "hand-mixed", "4": "hand-huge"}
    assert 0 not in data["free"] and 4 not in data["free"]
    mixed = " ".join(jobs["hand-mixed"]["problems"])
    assert "'x' is not a card index" in mixed and "'-1' is not a card index" in mixed
    assert "card 99, which this node does not have" in mixed
    assert "is empty" in " ".join(jobs["hand-empty"]["problems"])
    huge = jobs["hand-huge"]["problems"]
    assert huge and all(len(p) < 300 for p in huge)  # answered briefly, not echoed back

    placed = cli(env, "launch", "--cards", "6", "--json", "--image", dockerd.image, "--", *DOCKER_JOB)
    assert placed.returncode == 0, placed.stderr
    assert json.loads(placed.stdout)["gpus"] == [1, 2, 3, 5, 6, 7]
    refused = cli(env, "launch", "--cards", "1", "--image", dockerd.image, "--", *DOCKER_JOB)
    assert refused.returncode == 75 and one_line(refused.stderr)


# ── a broken state file ──────────────────────────────────────────────────────


BROKEN = {
    "corrupt": lambda good: b"{\x00\xff not json",
    "truncated": lambda good: good[: len(good) // 2],
    "newer": lambda good: json.dumps({"version": 99, "jobs": {}}).encode(),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_state_file_stops_every_command_and_is_kept_byte_for_byte(scene_node, kind):
    env = node_env(*scene_node)
    state_dir = scene_node[1]
    assert cli(env, "launch", "--cards", "2", "--run-id", "real", "--", "sleep", "120").returncode == 0
    path = state_dir / STATE_FILE
    good = path.read_bytes()
    broken = BROKEN[kind](good)
    path.write_bytes(broken)
    try:
        files_before = sorted(p.name for p in state_dir.iterdir())
        for args in (
            ["status"],
            ["status", "--json"],
            ["launch", "--cards", "1", "--", "sleep", "120"],
            ["reserve", "--cards", "1", "--for", "1h"],
            ["reclaim"],
            ["stop", "real"],
        ):
            done = cli(env, *args)
            assert done.returncode == 1, (args, done.stderr)
            assert one_line(done.stderr) and str(path) in done.stderr, done.stderr
            assert done.stdout == ""
        if kind == "newer":
            assert "upgrade tpnode-tui" in done.stderr
        assert path.read_bytes() == broken
        assert sorted(p.name for p in state_dir.iterdir()) == files_before
    finally:
        path.write_bytes(good)  # so the fixture can stop the job it lists


# ── hostile run ids, owners and commands ─────────────────────────────────────


HOSTILE_RUN_IDS = [
    "a b",
    "x;rm -rf /",
    "$(id)",
    "`id`",
    "a'b",
    'a"b',
    "a\nb",
    "ünï",
    "-lead",
    "../x",
    "a" * 64,
    "a" * LONG,
]


def _main(monkeypatch, capsys, env: dict, *args: str) -> tuple[int, str, str]:
    """The CLI's main() in this process, with ``env``'s settings: the same code as
    the command, without an interpreter start per call (there are many calls)."""
    from tpnode_tui.cli import main

    for name in list(os.environ):
        if name.startswith("TUNEPLANE_") or name == "DOCKER_HOST":
            monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("TUNEPLANE_") or name == "DOCKER_HOST":
            monkeypatch.setenv(name, value)
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_hostile_run_ids_are_refused_before_anything_is_created(env, monkeypatch, capsys):
    for run_id in HOSTILE_RUN_IDS:
        for args in (
            _launch(env, run_id, "sleep", "120"),
            ["reserve", "--cards", "1", "--for", "1h", f"--run-id={run_id}"],
        ):
            code, _out, err = _main(monkeypatch, capsys, env, *args)
            assert code == 2, (run_id[:20], err)
            assert one_line(err) and "is not valid" in err and len(err) < 400, err
    as_typed = cli(env, *_launch(env, "$(touch pwned)", "sleep", "120"))  # and as a real command
    assert as_typed.returncode == 2 and one_line(as_typed.stderr) and "is not valid" in as_typed.stderr
    assert status(env)["jobs"] == []


HOSTILE_TEXT = [
    "$(echo pwned > /tmp/pwned)",
    'it\'s "quoted"',
    "a b\tc",
    "line\nbreak",
    "ünïcödé ✓",
    "; rm -rf / #",
    "x" * LONG,
]


def test_hostile_owners_are_stored_and_shown_literally(env, monkeypatch, capsys):
    for i, owner in enumerate(HOSTILE_TEXT):
        code, _out, err = _main(
            monkeypatch, capsys, env, "reserve", "--cards", "1", "--for", "1h", "--owner", owner, "--run-id", f"o{i}"
        )
        assert code == 0, err
    owners = {j["run_id"]: j["owner"] for j in status(env)["jobs"]}
    assert owners == {f"o{i}": owner for i, owner in enumerate(HOSTILE_TEXT)}
    assert cli(env, "status").returncode == 0


def test_hostile_commands_are_stored_and_passed_literally_never_through_a_shell(env, tmp_path):
    marker = tmp_path / "pwned"
    args = [
        "sh",
        "-c",
        "sleep 120",
        "x",
        f"$(echo pwned > {marker})",
        f"`echo pwned > {marker}`",
        "a b",
        "it's",
        "line\nbreak",
        "ünïcödé",
        "y" * LONG,
    ]
    done = cli(env, *_launch(env, "hostile", *args))
    assert done.returncode == 0, done.stderr
    [job] = status(env)["jobs"]
    assert job["command"] == args
    assert not marker.exists()
    if "image" in env:  # and not inside the container either
        listing = subprocess.run(
            ["docker", "-H", env["DOCKER_HOST"], "exec", "tpn-hostile", "ls", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
        assert "pwned" not in listing.stdout


# ── security ─────────────────────────────────────────────────────────────────


@pytest.mark.docker
def test_stop_and_reclaim_touch_only_platform_containers_and_never_a_running_job(dockerd, scene_node):
    env = node_env(*scene_node, runtime="docker", docker_host=dockerd.host)
    dockerd.cli("run", "-d", "--name", "tpn-intruder", dockerd.image, "sleep", "120")
    dockerd.cli("run", "--name", "tpn-ended", dockerd.image, "true")
    assert cli(env, *_launch({**env, "image": dockerd.image}, "mine", *DOCKER_JOB)).returncode == 0

    for args in (["stop", "intruder"], ["reclaim", "intruder"], ["reclaim", "ended"]):
        done = cli(env, *args)
        assert done.returncode == 1 and one_line(done.stderr) and "no " in done.stderr, (args, done.stderr)
    refused = cli(env, "reclaim", "mine")
    assert refused.returncode == 1 and "stop it first" in refused.stderr
    swept = cli(env, "reclaim")
    assert swept.returncode == 0 and "nothing to reclaim" in swept.stdout

    def state(name: str) -> str:
        return dockerd.cli("inspect", "-f", "{{.State.Status}}", name).stdout.decode().strip()

    assert (state("tpn-intruder"), state("tpn-ended"), state("tpn-mine")) == ("running", "exited", "running")
    assert [j["run_id"] for j in status(env)["jobs"]] == ["mine"]


def test_the_state_and_lock_files_are_private(scene_node):
    env = node_env(*scene_node)
    state_dir = scene_node[1]
    assert cli(env, "launch", "--cards", "1", "--run-id", "j", "--", "sleep", "120").returncode == 0

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(state_dir) == 0o700 and mode(state_dir / "logs") == 0o700
    for name in (STATE_FILE, STATE_LOCK_FILE, LOCK_FILE, LEASE_TOKEN_FILE, "logs/j.log"):
        assert mode(state_dir / name) == 0o600, name


@pytest.mark.redis
def test_a_redis_password_is_used_and_never_shown(scene_node, tmp_path):
    password, wrong = "pw-Secret-731", "pw-Wrong-194"
    server = redis_or_unavailable(tmp_path, password)
    seen: list[str] = []
    try:
        env = node_env(*scene_node, redis_url=server.url)
        placed = cli(env, "-v", "launch", "--cards", "1", "--run-id", "pw", "--json", "--", "sleep", "120")
        assert placed.returncode == 0, placed.stderr
        shown = cli(env, "status")
        assert "redis lease at redis://:***@127.0.0.1" in shown.stdout
        seen += [placed.stdout, placed.stderr, shown.stdout, shown.stderr, cli(env, "status", "--json").stdout]

        refused = cli(
            {**env, "TUNEPLANE_REDIS_URL": server.url.replace(password, wrong)},
            "launch",
            "--cards",
            "1",
            "--",
            "sleep",
            "120",
        )
        assert refused.returncode == 2 and "refused the password" in refused.stderr
        seen += [refused.stdout, refused.stderr]

        server.stop()  # down: what is said while launches wait
        down = cli(env, "status")
        assert "cannot be reached" in down.stdout
        waiting = spawn(env, "-v", "launch", "--cards", "1", "--", "sleep", "120")
        said = []
        try:
            # Read what it says until it says it waits for Redis (it would wait for ever).
            deadline = time.monotonic() + BOUND_S
            while time.monotonic() < deadline and not any("cannot be reached" in line for line in said):
                line = waiting.stderr.readline()
                if not line:
                    break
                said.append(line)
        finally:
            waiting.kill()
            out, rest = waiting.communicate()
        err = "".join(said) + rest
        assert "cannot be reached" in err  # the -v log said it waits
        seen += [down.stdout, down.stderr, out, err]

        tls = cli({**env, "TUNEPLANE_REDIS_URL": f"rediss://:{password}@127.0.0.1:{free_port()}/0"}, "status")
        assert tls.returncode == 0 and "rediss://:***@127.0.0.1" in tls.stdout
        seen += [tls.stdout, tls.stderr]
    finally:
        server.stop()
    for text in seen:
        assert password not in text and wrong not in text


_AS_NOBODY = """
import contextlib, io, os, sys
from tpnode_tui.cli import main
# The interpreter may live where only root can read, so the whole CLI path is
# walked once as root (loading every lazy import) before becoming nobody.
os.environ["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
with contextlib.redirect_stderr(io.StringIO()):
    main(["status"])
os.setgid(65534)
os.setuid(65534)
os.environ["DOCKER_HOST"] = sys.argv[1]
sys.exit(main(["status"]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_an_engine_socket_the_user_may_not_open_is_one_clear_line(tmp_path):
    directory = Path(tempfile.mkdtemp(prefix="tpn-sock-", dir="/tmp"))
    try:
        directory.chmod(0o755)
        scene = write_scene(directory / "node.json", 8)
        path = directory / "docker.sock"
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
            server.listen()
            path.chmod(0o000)
            env = node_env(scene, directory / "state", runtime="docker")
            done = subprocess.run(
                [PYTHON, "-c", _AS_NOBODY, f"unix://{path}"], capture_output=True, text=True, env=env, timeout=BOUND_S
            )
        assert done.returncode == 1, done.stderr
        assert one_line(done.stderr) and "permission denied" in done.stderr
        assert "docker group" in done.stderr
    finally:
        shutil.rmtree(directory, ignore_errors=True)
