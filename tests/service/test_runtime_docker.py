"""The Docker runtime against a real dockerd: labels are the whole truth."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers.waiting import until_async
from tpnode_tui.config.sections import DOCKER_GPU_MODES
from tpnode_tui.model.errors import BadRequest, ConfigError, Conflict, JobNotFound, RuntimeUnavailable, TpnodeError
from tpnode_tui.model.jobs import DeviceFence, JobSpec, JobState, RunAs
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.runtimes.docker import DockerRuntime
from tpnode_tui.runtimes.dockerfence import ENDED, NO_CARD
from tpnode_tui.runtimes.labels import EXPIRES, GPUS, KIND, LEASE_TOKEN, OLD_LEASE_TOKEN, OWNER, RUN_ID, UID


@pytest.fixture
async def runtime(dockerd):
    rt = DockerRuntime(gpu_mode="none", hold_image=dockerd.image, stop_timeout_s=1)
    yield rt
    await rt.close()


def job(dockerd, run_id: str, *command: str, cards: int = 1) -> JobSpec:
    return JobSpec(run_id=run_id, cards=cards, command=command, image=dockerd.image, owner="ann")


async def by_name(rt: DockerRuntime) -> dict:
    return {s.name: s for s in await rt.ps()}


async def wait_for_status(rt: DockerRuntime, name: str, status: str, timeout: float = 20):
    """The container's state, once its status is ``status``."""
    last: list = [None]

    async def reached():
        last[0] = (await by_name(rt)).get(name)
        return last[0] if last[0] is not None and last[0].status == status else None

    return await until_async(
        reached, f"{name} to reach {status!r}", timeout, every=0.1, show=lambda: f"last: {last[0]}"
    )


def inspect(dockerd, name: str, template: str):
    return json.loads(dockerd.cli("inspect", "-f", "{{json " + template + "}}", name).stdout)


# --------------------------------------------------------------- no engine needed


@pytest.mark.parametrize(
    "spec, words",
    [
        (JobSpec("a", 1, ("true",)), "names no image"),
        (JobSpec("bad id", 1, ("true",), image="x"), "run id"),
        (JobSpec("a", 1, image="x", kind="lease"), "kind"),
        (JobSpec("r", 1, ("true",), kind="reservation", expires_at=time.time() + 60), "runs none"),
        (JobSpec("r", 1, kind="reservation"), "needs an expiry"),
        (JobSpec("r", 1, kind="reservation", expires_at=time.time() - 5), "in the past"),
    ],
)
async def test_malformed_requests_are_refused_before_the_engine_is_asked(spec, words):
    rt = DockerRuntime(gpu_mode="none", docker_host="unix:///nonexistent/docker.sock")
    with pytest.raises(BadRequest, match=words):
        await rt.create(spec, [0])
    await rt.close()


async def test_a_job_needs_distinct_cards():
    rt = DockerRuntime(gpu_mode="none", docker_host="unix:///nonexistent/docker.sock")
    for gpus in ([], [1, 1], [-1]):
        with pytest.raises(BadRequest):
            await rt.create(JobSpec("a", 1, ("true",), image="x"), gpus)
    await rt.close()


async def test_a_containers_output_is_refused_plainly_naming_where_the_engine_keeps_it():
    """The engine keeps a container's output and cannot give it a page at a time:
    the node does not read it for anyone, and says who can, and how."""
    rt = DockerRuntime(gpu_mode="none", docker_host="unix:///nonexistent/docker.sock")
    with pytest.raises(Conflict) as refused:
        await rt.output(JobState("tpn-train", "train", (0,), "running"), None, 65536)
    assert str(refused.value) == (
        "tpn-train runs in a container, whose output the Docker engine keeps; this node does not read it "
        "for you: an account that may use the engine reads it with docker logs tpn-train"
    )
    await rt.close()


def test_an_unknown_gpu_mode_is_refused():
    with pytest.raises(BadRequest, match="nvidia, env, none"):
        DockerRuntime(gpu_mode="cuda")


async def test_an_engine_that_is_not_there_is_unavailable_not_empty(tmp_path, monkeypatch):
    address = f"unix://{tmp_path}/nope.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    rt = DockerRuntime()
    assert rt.describe() == f"docker at {address}"
    with pytest.raises(RuntimeUnavailable) as caught:
        await rt.ps()
    assert f"DOCKER_HOST={address}" in str(caught.value)
    assert "no engine socket" in str(caught.value)
    await rt.close()


async def test_a_socket_nobody_listens_on_is_unavailable(tmp_path):
    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # bound, never listening: connections are refused
    rt = DockerRuntime(docker_host=f"unix://{path}")
    with pytest.raises(RuntimeUnavailable, match="connection refused"):
        await rt.ps()
    await rt.close()


_AS_NOBODY = """
import asyncio, os, sys
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.runtimes.docker import DockerRuntime

async def ps(host):
    rt = DockerRuntime(docker_host=host)
    try:
        await rt.ps()
    except RuntimeUnavailable as e:
        return str(e)
    finally:
        await rt.close()

async def main():
    # The interpreter lives where only root may read, so the child starts as
    # root, walks the whole code path once (loading every lazy import), and
    # only then becomes nobody.
    await ps("unix:///nonexistent/docker.sock")
    os.setgid(65534)
    os.setuid(65534)
    print(await ps(sys.argv[1]))

asyncio.run(main())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a check as another user")
def test_a_socket_the_user_may_not_open_says_permission_denied():
    directory = Path(tempfile.mkdtemp(prefix="tpn-perm-", dir="/tmp"))
    try:
        directory.chmod(0o755)
        path = directory / "docker.sock"
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
            server.listen()
            path.chmod(0o000)
            done = subprocess.run(
                [sys.executable, "-c", _AS_NOBODY, f"unix://{path}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert done.returncode == 0, done.stderr
        assert f"unix://{path}: permission denied" in done.stdout
        assert "docker group" in done.stdout
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    "host,words",
    [
        ("ssh://builder@10.0.0.7", "ssh:// needs the asyncssh package"),
        ("npipe:////./pipe/docker_engine", "npipe:// is a Windows named pipe"),
        ("ftp://10.0.0.7", "ftp:// is not a Docker engine address"),
        ("10.0.0.7:2375", "it has no scheme"),
    ],
)
def test_an_address_the_client_cannot_dial_is_a_configuration_error(monkeypatch, host, words):
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(ConfigError) as caught:
        DockerRuntime()
    assert f"DOCKER_HOST={host} cannot be used: {words}" in str(caught.value)
    assert "unix:///path/to/docker.sock or tcp://host:port" in str(caught.value)


@pytest.fixture
def black_hole():
    """A TCP address that never answers: a listener whose one-place backlog is
    full, so the kernel drops every further connection attempt unanswered, as
    a firewall that drops packets does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(2):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    yield f"tcp://127.0.0.1:{port}"
    for sock in (*fillers, server):
        sock.close()


async def test_an_address_where_nothing_answers_fails_within_the_connect_timeout(black_hole):
    rt = DockerRuntime(docker_host=black_hole)
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailable) as caught:
        await rt.ps()
    await rt.close()
    assert time.monotonic() - started < 20  # the connect timeout (5 s), not the 30 s call timeout
    assert f"cannot reach the Docker engine at {black_hole}: no connection within 5s" in str(caught.value)


@pytest.fixture
def not_an_engine():
    """An HTTP server that answers every request with a bare 404, as a proxy or
    another web server at the engine's address does."""

    class Bare404(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bare404)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_an_engine_error_with_no_message_still_says_why(not_an_engine):
    rt = DockerRuntime(docker_host=not_an_engine)
    with pytest.raises(RuntimeUnavailable) as caught:
        await rt.ps()
    await rt.close()
    assert "could not list containers: HTTP 404 with no explanation; " in str(caught.value)
    assert f"is {not_an_engine} a Docker engine?" in str(caught.value)


@pytest.mark.parametrize(
    "host,code,words",
    [
        ("ssh://builder@10.0.0.7", 2, "ssh:// needs the asyncssh package"),
        ("black hole", 1, "no connection within 5s"),
    ],
)
def test_the_cli_tells_a_docker_address_mistake_from_an_engine_out_of_reach(tmp_path, black_hole, host, code, words):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        DOCKER_HOST=black_hole if host == "black hole" else host,
        TUNEPLANE_RUNTIME="docker",
        TUNEPLANE_PROBE=f"simulated:{tmp_path / 'node.json'}",
        TUNEPLANE_STATE_DIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert words in done.stderr


# ------------------------------------------------------------------ real dockerd


@pytest.mark.docker
async def test_a_created_job_already_holds_its_cards_then_runs(dockerd, runtime):
    created = await runtime.create(job(dockerd, "train-1", "sleep", "30", cards=2), [0, 1])
    assert (created.name, created.status, created.gpus) == ("tpn-train-1", "created", (0, 1))
    assert created.started_at is None and created.pid is None

    listed = (await by_name(runtime))["tpn-train-1"]
    assert listed.status == "created" and listed.gpus == (0, 1) and listed.live
    assert inspect(dockerd, "tpn-train-1", ".Config.Labels") == {
        GPUS: "0,1",
        RUN_ID: "train-1",
        KIND: "job",
        OWNER: "ann",
    }

    started = await runtime.start("tpn-train-1")
    assert started.status == "running" and started.gpus == (0, 1)
    assert started.pid and started.started_at is not None
    # Read as UTC: a time-zone slip would put it hours away from now.
    assert abs(started.started_at - time.time()) < 600
    assert started.command == ("sleep", "30") and started.image == dockerd.image
    assert started.owner == "ann" and started.run_id == "train-1"

    # Starting it again is harmless: it is running already.
    assert (await runtime.start("tpn-train-1")).status == "running"


@pytest.mark.docker
async def test_hand_labelled_containers_count_and_a_new_instance_sees_the_same(dockerd, runtime):
    await runtime.run(job(dockerd, "mine", "sleep", "30"), [0])
    dockerd.cli("run", "-d", "--name", "squatter", "--label", f"{GPUS}=3", dockerd.image, "sleep", "30")
    dockerd.cli("run", "-d", "--name", "typo", "--label", f"{GPUS}=x", dockerd.image, "sleep", "30")
    dockerd.cli("run", "-d", "--name", "plain", dockerd.image, "sleep", "30")

    jobs = await by_name(runtime)
    assert set(jobs) == {"tpn-mine", "squatter", "typo"}, "unlabelled containers are not jobs"
    squatter = jobs["squatter"]
    assert (squatter.run_id, squatter.gpus, squatter.status, squatter.kind) == (
        "squatter",
        (3,),
        "running",
        "job",
    )
    assert squatter.command == ("sleep", "30") and squatter.problems == ()
    # A label nobody can read is listed with the reason, not dropped.
    assert jobs["typo"].gpus == () and "'x'" in jobs["typo"].problems[0]

    restarted = DockerRuntime(gpu_mode="none")
    try:
        assert await by_name(restarted) == jobs
    finally:
        await restarted.close()


@pytest.mark.docker
async def test_a_container_an_earlier_version_labelled_with_fence_keeps_its_lease_token(dockerd, runtime):
    """Before the lease token was called so its label was tuneplane.fence: such a
    container is read with its number, and the container that takes over when it
    is extended carries the new label only."""
    expires = int(time.time()) + 60
    labels = {GPUS: "2", RUN_ID: "old-hold", KIND: "reservation", OWNER: "ann", UID: "1001", EXPIRES: str(expires)}
    flags = [f"--label={k}={v}" for k, v in {**labels, OLD_LEASE_TOKEN: "1732950000123456"}.items()]
    dockerd.cli("run", "-d", "--name", "tpn-old-hold", *flags, dockerd.image, "sleep", "60")

    old = (await by_name(runtime))["tpn-old-hold"]
    assert (old.lease_token, old.problems, old.gpus) == (1732950000123456, (), (2,))

    extended = await runtime.extend("tpn-old-hold", expires + 60)
    assert extended.lease_token == 1732950000123456
    written = inspect(dockerd, extended.name, ".Config.Labels")
    assert written[LEASE_TOKEN] == "1732950000123456" and OLD_LEASE_TOKEN not in written


@pytest.mark.docker
async def test_a_job_that_cannot_start_is_removed_and_holds_nothing(dockerd, runtime):
    with pytest.raises(TpnodeError) as caught:
        await runtime.run(job(dockerd, "broken", "/nonexistent"), [2])
    message = str(caught.value)
    assert "could not start" in message and "/nonexistent" in message
    assert "holds no cards" in message
    assert await runtime.ps() == []
    assert dockerd.cli("ps", "-aq").stdout.strip() == b""


@pytest.mark.docker
async def test_an_exited_job_keeps_its_exit_code_until_removed(dockerd, runtime):
    await runtime.run(job(dockerd, "fails", "sh", "-c", "exit 3"), [1])
    exited = await wait_for_status(runtime, "tpn-fails", "exited")
    assert exited.exit_code == 3 and not exited.live
    assert exited.gpus == (1,) and exited.command == ("sh", "-c", "exit 3")

    with pytest.raises(Conflict, match="already run"):
        await runtime.start("tpn-fails")

    await runtime.remove("tpn-fails")
    assert await runtime.ps() == []


@pytest.mark.docker
async def test_two_reclaims_removing_one_exited_job_at_once_both_succeed(dockerd, runtime):
    for i in range(5):  # the engine's "removal already in progress" needs the two to overlap
        await runtime.run(job(dockerd, f"done-{i}", "true"), [i])
        await wait_for_status(runtime, f"tpn-done-{i}", "exited")
        other = DockerRuntime(gpu_mode="none", hold_image=dockerd.image)
        try:
            await asyncio.gather(runtime.remove(f"tpn-done-{i}"), other.remove(f"tpn-done-{i}"))
        except JobNotFound:
            pass  # one looked it up after the other had removed it: also the same outcome
        finally:
            await other.close()
    assert await runtime.ps() == []


@pytest.mark.docker
async def test_a_reservation_ends_by_itself(dockerd, runtime):
    expires = time.time() + 1.5
    spec = JobSpec("hold-1", 1, kind="reservation", owner="bob", expires_at=expires)
    held = await runtime.run(spec, [5])
    assert held.kind == "reservation" and held.status == "running"
    assert held.owner == "bob" and held.expires_at == pytest.approx(expires, abs=0.001)
    assert held.command[0] == "sleep" and held.image == dockerd.image
    assert inspect(dockerd, held.name, ".Config.Labels")[EXPIRES]

    ended = await wait_for_status(runtime, held.name, "exited")
    assert ended.exit_code == 0 and not ended.live and ended.kind == "reservation"


@pytest.mark.docker
async def test_stop_and_remove_touch_only_platform_jobs(dockerd, runtime):
    dockerd.cli("run", "-d", "--name", "plain", dockerd.image, "sleep", "30")
    for action in (runtime.stop, runtime.remove, runtime.start):
        with pytest.raises(JobNotFound, match="not a platform job"):
            await action("plain")
    assert inspect(dockerd, "plain", ".State.Status") == "running"

    with pytest.raises(JobNotFound, match="no container named"):
        await runtime.stop("tpn-nothing")
    with pytest.raises(JobNotFound):
        await runtime.remove("../images")


@pytest.mark.docker
async def test_a_running_job_is_stopped_before_it_is_removed(dockerd, runtime):
    await runtime.run(job(dockerd, "long", "sleep", "30"), [0])
    with pytest.raises(Conflict, match="stop it before removing"):
        await runtime.remove("tpn-long")
    await runtime.stop("tpn-long")
    stopped = (await by_name(runtime))["tpn-long"]
    assert stopped.status == "exited" and stopped.exit_code is not None
    await runtime.remove("tpn-long")
    assert await runtime.ps() == []


@pytest.mark.docker
async def test_a_missing_image_is_named_and_leaves_nothing_behind(dockerd, runtime):
    spec = JobSpec("x", 1, ("true",), image="not-here:1")
    with pytest.raises(Conflict, match=r"'not-here:1' is not on this node; pull it first"):
        await runtime.run(spec, [0])
    assert await runtime.ps() == []
    assert dockerd.cli("ps", "-aq").stdout.strip() == b""


@pytest.mark.docker
async def test_a_run_id_in_use_is_refused(dockerd, runtime):
    await runtime.create(job(dockerd, "twice", "true"), [0])
    with pytest.raises(Conflict, match="already exists"):
        await runtime.create(job(dockerd, "twice", "true"), [1])
    assert [s.gpus for s in await runtime.ps()] == [(0,)]


@pytest.mark.docker
async def test_env_mode_hands_the_cards_to_the_job(dockerd):
    rt = DockerRuntime(gpu_mode="env")
    try:
        await rt.run(job(dockerd, "envy", "env", cards=2), [2, 3])
        await wait_for_status(rt, "tpn-envy", "exited")
    finally:
        await rt.close()
    out = dockerd.cli("logs", "tpn-envy").stdout.decode().splitlines()
    assert "NVIDIA_VISIBLE_DEVICES=2,3" in out
    # Inside the container the nvidia runtime numbers its two cards 0 and 1.
    assert "CUDA_VISIBLE_DEVICES=0,1" in out


@pytest.mark.docker
async def test_nvidia_mode_asks_the_engine_for_exactly_those_devices(dockerd):
    rt = DockerRuntime(gpu_mode="nvidia")
    try:
        created = await rt.create(job(dockerd, "gpu", "true", cards=2), [4, 6])
        requests = inspect(dockerd, created.name, ".HostConfig.DeviceRequests")
        assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in requests] == [
            ("nvidia", ["4", "6"], [["gpu"]])
        ]
        await rt.remove(created.name)
    finally:
        await rt.close()


# ------------------------------------------------- what a container is given


def everything(dockerd_image: str, run_id: str = "boxed", **kw) -> JobSpec:
    """A spec carrying every field a caller's request can fill, some of them hostile."""
    fields = dict(
        run_id=run_id,
        cards=2,
        command=("sleep", "30"),
        image=dockerd_image,
        owner="alice",
        uid=1001,
        env=(("LD_PRELOAD", "/host/evil.so"), ("HF_TOKEN", "secret")),
        cwd="/root",
        run_as=RunAs(0, 0, (0, 27), "root", "/root"),
    )
    fields.update(kw)
    return JobSpec(**fields)


@pytest.mark.parametrize("mode", DOCKER_GPU_MODES)
def test_the_config_holds_the_image_command_labels_and_cards_and_nothing_else(mode):
    rt = DockerRuntime(gpu_mode=mode, docker_host="unix:///nonexistent/docker.sock")
    specs = [everything("img"), everything("img", kind="reservation", command=(), expires_at=time.time() + 60)]
    for spec in specs:
        config = rt._config(spec, [1, 3])
        assert set(config) <= {"Image", "Cmd", "Labels", "Env", "HostConfig"}
        assert config["HostConfig"].pop("CgroupnsMode") == config["HostConfig"].pop("IpcMode") == "private"
        assert set(config["HostConfig"]) <= {"DeviceRequests"}
        assert all(
            e.split("=", 1)[0] in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") for e in config.get("Env", [])
        )


@pytest.mark.docker
@pytest.mark.parametrize("mode", DOCKER_GPU_MODES)
async def test_a_created_container_gets_its_cards_and_nothing_of_the_host(dockerd, mode):
    rt = DockerRuntime(gpu_mode=mode, hold_image=dockerd.image)
    try:
        created = await rt.create(everything(dockerd.image), [1, 3])
        host = inspect(dockerd, created.name, ".HostConfig")
        config = inspect(dockerd, created.name, ".Config")
        assert inspect(dockerd, created.name, ".Mounts") == []
        assert not host["Binds"] and not host.get("Mounts") and not host["VolumesFrom"]
        assert host["Privileged"] is False and not host["CapAdd"] and not host["SecurityOpt"]
        assert not host["Devices"] and not host["DeviceCgroupRules"]
        requests = host["DeviceRequests"] or []
        assert [r["DeviceIDs"] for r in requests] == ([["1", "3"]] if mode == "nvidia" else [])
        assert [r["Count"] for r in requests] == ([0] if mode == "nvidia" else [])  # never -1: every card
        assert (host["PidMode"], host["UTSMode"], host["UsernsMode"]) == ("", "", "")
        assert (host["IpcMode"], host["CgroupnsMode"]) == ("private", "private")
        assert host["NetworkMode"] != "host"
        assert config["User"] == ""  # the image's own user, never the caller's (or root by request)
        assert config["WorkingDir"] == ""
        assert not [e for e in config["Env"] or [] if e.startswith(("LD_PRELOAD=", "HF_TOKEN="))]
        assert config["Labels"][UID] == "1001" and created.uid == 1001
    finally:
        await rt.close()


# ------------------------------------------------------------ the fence


@pytest.mark.docker
@pytest.mark.parametrize("slice_job", [False, True])
async def test_a_container_is_fenced_by_dockers_device_cgroup_to_exactly_what_it_holds(dockerd, slice_job):
    """The engine makes the device cgroup from the request: exactly its cards (or MIG
    device) by name, never a count or "all", not privileged, no /dev/nvidia* of its
    own. The job says it is fenced by Docker, as read back from the container."""
    rt = DockerRuntime(gpu_mode="nvidia")
    try:
        if slice_job:
            created = await rt.create(on_slice(dockerd, "fenced-mig", "true"), [])
            wanted = [MIG]
        else:
            created = await rt.create(everything(dockerd.image, run_id="fenced"), [1, 3])
            wanted = ["1", "3"]
        host = inspect(dockerd, created.name, ".HostConfig")
        assert [(r["Driver"], r["Count"], r["DeviceIDs"]) for r in host["DeviceRequests"]] == [("nvidia", 0, wanted)]
        assert host["Privileged"] is False and not host["Devices"] and not host["DeviceCgroupRules"]
        assert created.device_fence == DeviceFence.by("docker")
        assert [j.device_fence for j in await rt.ps()] == [DeviceFence.by("docker")]
        assert rt.node_fence() == DeviceFence.by("docker")
        await rt.remove(created.name)
    finally:
        await rt.close()


@pytest.mark.docker
async def test_env_mode_is_fenced_through_nvidia_visible_devices_and_none_mode_cannot_be_vouched_for(dockerd):
    for mode, fenced in (("env", True), ("none", False)):
        rt = DockerRuntime(gpu_mode=mode, hold_image=dockerd.image)
        try:
            created = await rt.create(job(dockerd, f"by-{mode}", "true", cards=2), [2, 3])
            assert created.device_fence.fenced is fenced and rt.node_fence().fenced is fenced
            if not fenced:
                assert created.device_fence.problem == NO_CARD
            await rt.remove(created.name)
        finally:
            await rt.close()


@pytest.mark.docker
@pytest.mark.parametrize(
    "flags, says",
    [
        (["--privileged"], "it is privileged"),
        (["--gpus", "all"], "asks the engine for every card"),
        (["--gpus", "2"], "asks the engine for 2 cards, not its own by name"),
        (["--gpus", '"device=1,2"'], "names 1, 2, not only its own (1)"),  # quoted, as docker's --gpus takes a list
        (["--gpus", "device=1", "--device-cgroup-rule", "c 195:* rmw"], "lets it open NVIDIA's devices"),
    ],
)
async def test_a_container_made_by_hand_with_more_than_its_cards_is_not_fenced(dockerd, runtime, flags, says):
    """The fence is read from the container, not from what the runtime would have
    asked: a labelled container made by hand says what lets it out."""
    dockerd.cli(
        "create", "--name", "by-hand", "--label", f"{GPUS}=1", "--label", f"{RUN_ID}=hand", *flags, dockerd.image,
        "sleep", "30",
    )  # fmt: skip
    try:
        [listed] = await runtime.ps()
        assert listed.status == "created" and not listed.device_fence.fenced
        assert says in listed.device_fence.problem
    finally:
        dockerd.cli("rm", "-f", "by-hand")


@pytest.mark.docker
async def test_an_ended_container_is_not_inspected_so_it_does_not_say(dockerd, runtime):
    await runtime.run(job(dockerd, "quick", "true"), [0])
    ended = await wait_for_status(runtime, "tpn-quick", "exited")
    assert ended.device_fence == DeviceFence.missing(ENDED)


async def test_nothing_a_client_sends_can_ask_for_every_card_or_privileges(make_allocator):
    """A launch names cards by count, an image and a command, and nothing else that
    reaches a container: no device, capability, privilege or "all"; a count that is
    not a whole positive number is refused before anything is asked of the engine."""
    assert {f.name for f in dataclasses.fields(LaunchRequest)} == {
        "cards", "command", "image", "run_id", "owner", "env", "cwd", "queue", "placement", "slice",
    }  # fmt: skip
    rt = DockerRuntime(gpu_mode="nvidia", docker_host="unix:///nonexistent/docker.sock")
    config = rt._config(everything("img"), [1, 3])
    assert config["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}
    ]
    assert "Privileged" not in config["HostConfig"] and "Devices" not in config["HostConfig"]
    allocator = make_allocator(runtime=rt)
    for cards in (0, -1):
        with pytest.raises(BadRequest, match="at least 1 card"):
            await allocator.launch(JobSpec("x", cards, ("true",), image="img"))


async def test_required_refuses_a_job_no_card_is_named_for():
    rt = DockerRuntime(gpu_mode="none", docker_host="unix:///nonexistent/docker.sock", fence_policy="required")
    with pytest.raises(ConfigError, match="cannot be fenced to its cards .*TUNEPLANE_FENCE=required"):
        await rt.check(JobSpec("loose", 1, ("true",), image="img"))
    fenced = DockerRuntime(gpu_mode="nvidia", docker_host="unix:///nonexistent/docker.sock", fence_policy="required")
    await fenced.check(JobSpec("tight", 1, ("true",), image="img"))


# ------------------------------------------------------ extending a reservation


@pytest.mark.docker
async def test_an_extended_reservation_changes_container_but_never_lets_go_of_its_cards(dockerd, runtime, tmp_path):
    from helpers.allocators import build_allocator
    from helpers.services import write_scene
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.probes import make_probe

    scene = write_scene(tmp_path / "node.json", 8)
    settings = load_settings(
        {},
        runtime_kind="docker",
        runtime_docker_gpu_mode="none",
        runtime_hold_image=dockerd.image,
        probe_kind=f"simulated:{scene}",
        state_dir=str(tmp_path / "state"),
    )
    allocator = build_allocator(settings, runtime, make_probe(settings))
    samples: list[dict[int, str]] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append(dict((await allocator.occupancy()).by_job))
            await asyncio.sleep(0.01)

    spec = JobSpec("hold-x", 2, kind="reservation", owner="bob", uid=1002, expires_at=time.time() + 30)
    held = await allocator.launch(spec, hold_for_s=30)
    first = held.job
    sampler = asyncio.create_task(sample())
    await asyncio.sleep(0.2)
    extended = await allocator.extend("hold-x", 3600)
    await asyncio.sleep(0.2)
    done.set()
    await sampler

    wanted = {card: "hold-x" for card in held.gpus}
    assert len(samples) > 2 and all(s == wanted for s in samples), [s for s in samples if s != wanted][:3]
    assert extended.name != first.name and extended.name.startswith("tpnx-hold-x-")
    assert extended.expires_at == pytest.approx(first.expires_at + 3600, abs=0.001)
    assert (extended.run_id, extended.gpus, extended.status) == ("hold-x", held.gpus, "running")
    assert (extended.owner, extended.uid, extended.lease_token) == ("bob", 1002, first.lease_token)
    [now] = await runtime.ps()  # the old container is gone, not merely stopped
    assert now.name == extended.name
    labels = inspect(dockerd, now.name, ".Config.Labels")
    assert float(labels[EXPIRES]) == pytest.approx(extended.expires_at, abs=0.001)
    assert labels[LEASE_TOKEN] == str(first.lease_token) and OLD_LEASE_TOKEN not in labels

    await allocator.extend("hold-x", 60)  # and again: each successor has a name of its own
    [again] = await runtime.ps()
    assert again.name not in (first.name, extended.name)
    assert again.expires_at == pytest.approx(extended.expires_at + 60, abs=0.001)

    stopped = await allocator.stop("hold-x")  # by run id, as before any extension
    assert stopped.name == again.name
    assert [j.status for j in await runtime.ps()] == ["exited"]
    assert [j.name for j in await allocator.reclaim("hold-x")] == [again.name]
    assert await runtime.ps() == []


@pytest.mark.docker
async def test_only_a_live_reservation_with_readable_labels_is_extended(dockerd, runtime):
    await runtime.run(job(dockerd, "work", "sleep", "30"), [0])
    with pytest.raises(Conflict, match="is a job, not a reservation"):
        await runtime.extend("tpn-work", time.time() + 60)
    with pytest.raises(JobNotFound):
        await runtime.extend("tpn-nobody", time.time() + 60)

    held = await runtime.run(JobSpec("short", 1, kind="reservation", expires_at=time.time() + 1), [1])
    await wait_for_status(runtime, held.name, "exited")
    with pytest.raises(Conflict, match="has ended"):
        await runtime.extend(held.name, time.time() + 60)

    dockerd.cli(
        "run",
        "-d",
        "--name",
        "by-hand",
        "--label",
        f"{GPUS}=2,x",
        "--label",
        f"{KIND}=reservation",
        "--label",
        f"{EXPIRES}={int(time.time()) + 60}",
        dockerd.image,
        "sleep",
        "30",
    )
    with pytest.raises(Conflict, match="cannot all be read"):
        await runtime.extend("by-hand", time.time() + 120)

    live = await runtime.run(JobSpec("live", 1, kind="reservation", expires_at=time.time() + 60), [3])
    with pytest.raises(BadRequest, match="in the past"):
        await runtime.extend(live.name, time.time() - 5)
    assert {j.name for j in await runtime.ps() if j.live} == {"tpn-work", "by-hand", live.name}


# ------------------------------------------------------------------ MIG slices

MIG = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"


def on_slice(dockerd, run_id: str, *command: str, **kw) -> JobSpec:
    from tpnode_tui.model.jobs import SliceRef

    return JobSpec(
        run_id=run_id,
        cards=1,
        command=command,
        image=dockerd.image,
        owner="ann",
        slice="1g.18gb",
        slices=(SliceRef(1, MIG, "1g.18gb"),),
        **kw,
    )


@pytest.mark.docker
async def test_a_slice_jobs_container_names_its_slice_in_labels_and_holds_no_whole_card(dockerd, runtime):
    from tpnode_tui.model.jobs import SliceRef
    from tpnode_tui.runtimes.labels import SLICES

    created = await runtime.create(on_slice(dockerd, "nb", "true"), [])
    labels = inspect(dockerd, created.name, ".Config.Labels")
    assert (labels[GPUS], labels[SLICES]) == ("", f"1:{MIG}:1g.18gb")
    [listed] = await runtime.ps()
    assert (listed.gpus, listed.slices, listed.problems) == ((), (SliceRef(1, MIG, "1g.18gb"),), ())
    with pytest.raises(BadRequest, match="whole cards or MIG slices, not both"):
        await runtime.create(on_slice(dockerd, "both", "true"), [0])


@pytest.mark.docker
async def test_nvidia_mode_asks_the_engine_for_the_mig_device(dockerd):
    rt = DockerRuntime(gpu_mode="nvidia")
    try:
        created = await rt.create(on_slice(dockerd, "mig", "true"), [])
        requests = inspect(dockerd, created.name, ".HostConfig.DeviceRequests")
        assert [(r["Driver"], r["DeviceIDs"], r["Capabilities"]) for r in requests] == [("nvidia", [MIG], [["gpu"]])]
        await rt.remove(created.name)
    finally:
        await rt.close()


@pytest.mark.docker
async def test_env_mode_hands_the_mig_device_to_the_job_by_uuid(dockerd):
    rt = DockerRuntime(gpu_mode="env")
    try:
        await rt.run(on_slice(dockerd, "envy-mig", "env"), [])
        await wait_for_status(rt, "tpn-envy-mig", "exited")
    finally:
        await rt.close()
    out = dockerd.cli("logs", "tpn-envy-mig").stdout.decode().splitlines()
    assert f"NVIDIA_VISIBLE_DEVICES={MIG}" in out and f"CUDA_VISIBLE_DEVICES={MIG}" in out


@pytest.mark.docker
async def test_the_allocator_puts_a_docker_job_on_a_free_slice_and_an_extended_slice_reservation_keeps_it(
    dockerd, runtime, tmp_path
):
    from helpers.allocators import build_allocator
    from helpers.services import write_scene
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.model.errors import NoCapacity
    from tpnode_tui.probes import make_probe
    from tpnode_tui.runtimes.labels import SLICES

    slices = [
        {
            "profile": "1g.18gb",
            "uuid": f"MIG-0000000{n}-9c0d-5e1f-a2b3-c4d5e6f7a8b9",
            "gpu_instance_id": 9 + n,
            "compute_instance_id": 0,
            "memory_total_mib": 16384,
            "memory_used_mib": 13,
        }
        for n in range(2)
    ]
    scene = write_scene(tmp_path / "node.json", [{"mig": True, "slices": slices}, {}])
    settings = load_settings(
        {},
        runtime_kind="docker",
        runtime_docker_gpu_mode="none",
        runtime_hold_image=dockerd.image,
        probe_kind=f"simulated:{scene}",
        state_dir=str(tmp_path / "state"),
    )
    allocator = build_allocator(settings, runtime, make_probe(settings))
    try:
        got = await allocator.launch(JobSpec("nb", 1, ("sleep", "30"), image=dockerd.image, slice="1g.18gb"))
        assert got.gpus == () and got.slices[0].uuid == slices[0]["uuid"]
        labels = inspect(dockerd, got.job.name, ".Config.Labels")
        assert (labels[GPUS], labels[SLICES]) == ("", f"0:{slices[0]['uuid']}:1g.18gb")

        held = await allocator.reserve(1, 30, owner="bob", run_id="rsv-nb", slice="1g.18gb")
        assert held.slices[0].uuid == slices[1]["uuid"]
        with pytest.raises(NoCapacity, match="no 1g.18gb MIG slice is free"):
            await allocator.launch(JobSpec("late", 1, ("true",), image=dockerd.image, slice="1g.18gb"))
        extended = await allocator.extend("rsv-nb", 3600)
        assert extended.slices == held.slices and extended.gpus == ()
        assert inspect(dockerd, extended.name, ".Config.Labels")[SLICES] == f"0:{slices[1]['uuid']}:1g.18gb"
        snap = await allocator.snapshot()
        assert [(s.state, s.run_id) for s in snap.cards[0].slices] == [("job", "nb"), ("reservation", "rsv-nb")]
    finally:
        await allocator.stop("nb")
        await allocator.stop("rsv-nb")
