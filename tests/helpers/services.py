"""Real services for the tests: a redis-server and a dockerd of their own, and promtool.

Each runs on a private address (a free loopback port, a socket in a temporary
directory) with its own data, so the tests never touch a service the machine
already runs. Images cannot be pulled here, so the Docker fixture imports a
one-file busybox root filesystem from the ``busybox-static`` package.

With ``CI=true`` a service that cannot be started fails the test instead of
skipping it: a green CI run must mean these tests ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.waiting import until

BUSYBOX_IMAGE = "tpnode-busybox:latest"
BUSYBOX_APPLETS = ("sh", "sleep", "true", "false", "echo", "cat", "env", "ls")


def unavailable(why: str) -> None:
    """Fail under CI, skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and a required service is unavailable: {why}", pytrace=False)
    pytest.skip(why)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Prometheus' own checker, from Debian's ``prometheus`` package (tests/run.sh
    installs it); without it the test fails under CI and is skipped elsewhere."""
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool is not installed (Debian: apt-get install --no-install-recommends prometheus)")
    return subprocess.run([str(found), *args], input=stdin, capture_output=True, text=True, timeout=120)


def redis_or_unavailable(workdir: Path, password: str | None = None) -> RedisServer:
    """A started redis-server of the tests' own; fails under CI, skips elsewhere, if it cannot start."""
    server = RedisServer(port=free_port(), workdir=workdir, password=password)
    try:
        server.start()
    except (OSError, TimeoutError) as e:
        unavailable(f"cannot start redis-server: {e}")
    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    port: int
    workdir: Path
    proc: subprocess.Popen | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if not binary:
            raise FileNotFoundError("redis-server is not installed")
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until(self._answers, "redis-server to answer", 10, error=TimeoutError)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                if self.password:
                    s.sendall(f"AUTH {self.password}\r\n".encode())
                    s.recv(64)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@dataclass
class Dockerd:
    root: Path
    proc: subprocess.Popen | None = None
    image: str = BUSYBOX_IMAGE
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "dockerd.log"

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        binary = shutil.which("dockerd")
        if not binary:
            raise FileNotFoundError("dockerd is not installed")
        if os.geteuid() != 0:
            raise PermissionError("dockerd needs root")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--host",
                    self.host,
                    "--data-root",
                    str(self.root / "data"),
                    "--exec-root",
                    str(self.root / "exec"),
                    "--pidfile",
                    str(self.root / "docker.pid"),
                    "--bridge=none",
                    "--iptables=false",
                    "--ip6tables=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            until(self._answers, "dockerd to answer", 60, error=TimeoutError)
        except TimeoutError:
            self.stop()
            raise TimeoutError("dockerd did not come up: " + self.log.read_text()[-2000:]) from None

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError("dockerd exited: " + self.log.read_text()[-2000:])
        return self.cli("version", check=False).returncode == 0

    def cli(self, *args: str, check: bool = True, input: bytes | None = None):
        docker = shutil.which("docker")
        if not docker:
            raise FileNotFoundError("the docker client is not installed")
        return subprocess.run(
            [docker, "-H", self.host, *args],
            input=input,
            capture_output=True,
            check=check,
            timeout=120,
        )

    def import_busybox(self) -> None:
        busybox = shutil.which("busybox")
        if not busybox:
            raise FileNotFoundError("busybox (busybox-static) is not installed")
        rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=self.root))
        (rootfs / "bin").mkdir()
        shutil.copy2(busybox, rootfs / "bin" / "busybox")
        for applet in BUSYBOX_APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True)
        self.cli("import", "-", self.image, input=tar.stdout)

    def remove_all_containers(self) -> None:
        ids = self.cli("ps", "-aq").stdout.decode().split()
        if ids:
            self.cli("rm", "-f", *ids, check=False)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None


def write_scene(path: Path, cards: list[dict] | int = 8, *, blind: bool = False, **extra) -> Path:
    """Write a simulated node description (the simulated probe's JSON format)."""
    if isinstance(cards, int):
        cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(cards)]
    path.write_text(json.dumps({"blind": blind, "cards": cards, **extra}))
    return path
