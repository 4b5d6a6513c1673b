"""Shared pieces of the reliability tests (tests/system/test_reliability_*.py).

The promise under test is "two jobs never land on one card", so the pieces are
the real ones a user has: CLI processes started together, each with its own
allocator, meeting only at the lock; and a watcher that reads the node over
and over while they run, because a card handed out twice for a moment and
then given back would not show in a check made only at the end.

Run as a script, this file is the CLI with a fault injected at one chosen
moment, so that a test can ``kill -9`` it exactly there:

    python tests/helpers/load.py stall-at WHERE CLI-ARGS...

WHERE is ``state-write`` (the process runtime has written the state file's new
version to a temporary file and not yet put it in place) or ``start`` (the
job is created and the lock released, but the job is not started yet). The
process prints ``stalled`` and sleeps there until it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence

PYTHON = sys.executable
THIS_FILE = Path(__file__).resolve()

#: every wait in these tests is bounded by this (seconds); none asserts a speed
BOUND_S = 60.0

#: A docker job that ends at SIGTERM. Busybox's sleep as a container's pid 1
#: ignores SIGTERM, so a plain "sleep" would make every stop wait out the
#: engine's 10 s grace.
DOCKER_JOB = ("sh", "-c", "trap 'exit 0' TERM; sleep 120 & wait")
PROCESS_JOB = ("sleep", "120")


def node_env(
    scene: Path,
    state_dir: Path,
    *,
    runtime: str = "process",
    redis_url: Optional[str] = None,
    docker_host: Optional[str] = None,
    **extra: str,
) -> dict[str, str]:
    """The environment of a CLI process on the simulated node: nothing inherited
    from TUNEPLANE_* or DOCKER_HOST except what is given here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.pop("DOCKER_HOST", None)
    env.update(
        TUNEPLANE_PROBE=f"simulated:{scene}",
        TUNEPLANE_RUNTIME=runtime,
        TUNEPLANE_STATE_DIR=str(state_dir),
        TUNEPLANE_LOCK_RETRY_MS="10",
        TUNEPLANE_DOCKER_GPU_MODE="none",
    )
    if redis_url:
        env["TUNEPLANE_REDIS_URL"] = redis_url
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    env.update(extra)
    return env


def cli_argv(*args: str, stalled_at: Optional[str] = None) -> list[str]:
    if stalled_at:
        return [PYTHON, str(THIS_FILE), "stall-at", stalled_at, *args]
    return [PYTHON, "-m", "tpnode_tui", *args]


def cli(env: dict[str, str], *args: str, timeout: float = BOUND_S) -> subprocess.CompletedProcess:
    return subprocess.run(cli_argv(*args), capture_output=True, text=True, env=env, timeout=timeout)


def spawn(env: dict[str, str], *args: str, stalled_at: Optional[str] = None) -> subprocess.Popen:
    return subprocess.Popen(
        cli_argv(*args, stalled_at=stalled_at), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finish(procs: Sequence[subprocess.Popen], timeout: float = 2 * BOUND_S) -> list[subprocess.CompletedProcess]:
    """Wait for every process (killing any left at the bound) and collect its output."""
    deadline = time.monotonic() + timeout
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += f"\n[killed: still running after {timeout:g}s]"
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def run_all(env: dict[str, str], commands: Sequence[Sequence[str]]) -> list[subprocess.CompletedProcess]:
    """Start every command at once, then wait for all of them."""
    return finish([spawn(env, *c) for c in commands])


def status(env: dict[str, str]) -> dict:
    proc = cli(env, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def shared_cards(jobs: Iterable[tuple[str, Iterable[int]]]) -> dict[int, list[str]]:
    """Cards that more than one of the given (run id, cards) holds."""
    holders: dict[int, list[str]] = {}
    for run_id, cards in jobs:
        for card in cards:
            holders.setdefault(card, []).append(run_id)
    return {card: names for card, names in holders.items() if len(names) > 1}


def live_jobs(status_json: dict) -> list[dict]:
    from tpnode_tui.model.jobs import LIVE_STATUSES

    return [j for j in status_json["jobs"] if j["status"] in LIVE_STATUSES]


def one_line(stderr: str) -> bool:
    return "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1


def check_refusal(result: subprocess.CompletedProcess) -> None:
    """A refusal for lack of capacity: exit 75, one line, with what is held and what to do.

    A launch that had to wait for the lock first said so, once, on a line of its own.
    """
    assert result.returncode == 75, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    waited, refusal = lines[:-1], lines[-1] if lines else ""
    assert "Traceback" not in result.stderr and len(waited) <= 1, result.stderr
    assert all(" waiting for the allocation lock, held by " in line for line in waited), result.stderr
    assert "no capacity now" in refusal and "cards total" in refusal, result.stderr
    assert "try again" in refusal, result.stderr


# ── watching the node while it changes ───────────────────────────────────────


class _Watcher(threading.Thread):
    """A thread that samples the node until stopped; use as a context manager."""

    pause_s = 0.05

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self._stop_event = threading.Event()
        self.samples = 0
        #: (sample number, {card: [run ids]}) for every sample where a card had two live holders
        self.violations: list[tuple[int, dict[int, list[str]]]] = []
        self.errors: list[str] = []
        #: (monotonic time, names of the live jobs) per sample, when kept
        self.history: list[tuple[float, frozenset[str]]] = []
        self.max_live_cards = 0

    def __enter__(self) -> _Watcher:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(BOUND_S)
        assert not self.is_alive(), "the sampler did not stop"

    def _seen(self, live: list[tuple[str, str, tuple[int, ...]]]) -> None:
        """Record one sample of (name, run id, cards) of live jobs."""
        self.samples += 1
        shared = shared_cards((run_id, cards) for _name, run_id, cards in live)
        if shared:
            self.violations.append((self.samples, shared))
        self.max_live_cards = max(self.max_live_cards, sum(len(c) for _n, _r, c in live))
        self.history.append((time.monotonic(), frozenset(name for name, _r, _c in live)))


class RuntimeSampler(_Watcher):
    """Reads the runtime (the state file, or the engine's labels) directly, as
    fast as it answers: every sample is one consistent read of where the truth lives."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.env = env

    def _runtime(self):
        if self.env["TUNEPLANE_RUNTIME"] == "docker":
            from tpnode_tui.runtimes.docker import DockerRuntime

            return DockerRuntime(gpu_mode="none", docker_host=self.env["DOCKER_HOST"])
        from tpnode_tui.runtimes.process import ProcessRuntime

        return ProcessRuntime(Path(self.env["TUNEPLANE_STATE_DIR"]))

    def run(self) -> None:
        asyncio.run(self._sample())

    async def _sample(self) -> None:
        from tpnode_tui.model.errors import TpnodeError

        runtime = self._runtime()
        try:
            while not self._stop_event.is_set():
                try:
                    jobs = await runtime.ps()
                except TpnodeError as e:
                    self.errors.append(str(e))
                else:
                    self._seen([(j.name, j.run_id, j.gpus) for j in jobs if j.live])
                await asyncio.sleep(self.pause_s)
        finally:
            await runtime.close()


class StatusSampler(_Watcher):
    """Runs ``status --json`` in a loop: what a user or a script sees."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.env = env

    def run(self) -> None:
        while not self._stop_event.is_set():
            proc = cli(self.env, "status", "--json")
            if proc.returncode != 0:
                self.errors.append(proc.stderr.strip())
                continue
            data = json.loads(proc.stdout)
            live = live_jobs(data)
            self._seen([(j["name"], j["run_id"], tuple(j["gpus"])) for j in live])
            # The occupancy map must name, for every card a live job holds, that job.
            for job in live:
                for card in job["gpus"]:
                    if card < data["total"] and data["by_job"].get(str(card)) != job["run_id"]:
                        self.errors.append(
                            f"card {card}: by_job says {data['by_job'].get(str(card))}, but {job['run_id']} holds it"
                        )
                    if card in data["free"]:
                        self.errors.append(f"card {card} held by {job['run_id']} is listed free")


# ── figures for docs/reliability.md ──────────────────────────────────────────


def record_figures(test: str, **figures: object) -> None:
    """Append one line of figures to $TPN_RELIABILITY_FIGURES, when it is set."""
    path = os.environ.get("TPN_RELIABILITY_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, **figures}) + "\n")


# ── clean-up ─────────────────────────────────────────────────────────────────


def kill_process_jobs(state_dir: Path) -> None:
    """SIGKILL every process of every job the state file still counts as live
    (its supervisor's group, its session, its cgroups), and remove job cgroups."""
    from tpnode_tui.devices import v1
    from tpnode_tui.devices.errors import CannotFence
    from tpnode_tui.model.errors import TpnodeError
    from tpnode_tui.runtimes.jobprocs import JobProcesses, remove_cgroup
    from tpnode_tui.runtimes.liveness import boot_id, liveness
    from tpnode_tui.runtimes.statefile import StateFile

    try:
        records = StateFile(state_dir).read()
    except TpnodeError:
        return  # a test broke the file on purpose; its jobs were never started
    for record in records.values():
        cgroup = Path(record.cgroup) if record.cgroup else None
        devices = Path(record.devices_cgroup) if record.devices_cgroup else None
        if liveness(record, boot_id())[0] != "exited":
            try:
                os.killpg(record.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            JobProcesses(record.pid, cgroup, devices=devices).wait_gone(BOUND_S, kill=True)
        remove_cgroup(cgroup)
        if devices is not None:
            with contextlib.suppress(CannotFence):
                v1.remove(devices)


def end_processes(procs: Iterable[subprocess.Popen]) -> None:
    """SIGKILL each process a test started that still runs, and reap it."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# ── the CLI with a fault, for kill -9 at a chosen moment ─────────────────────


def _stall(where: str) -> None:
    print(f"stalled at {where}", flush=True)
    time.sleep(3600)


def _inject(where: str) -> None:
    if where == "state-write":
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if Path(target).name.startswith(".jobs.json."):
                _stall(where)
            real_fsync(fd)

        os.fsync = fsync
    elif where == "start":
        from tpnode_tui.runtimes.docker import DockerRuntime
        from tpnode_tui.runtimes.process import ProcessRuntime

        async def start(self, name: str):
            await asyncio.to_thread(_stall, where)

        DockerRuntime.start = start
        ProcessRuntime.start = start
    else:
        raise SystemExit(f"unknown stall point {where!r}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "stall-at":
        raise SystemExit("usage: load.py stall-at state-write|start CLI-ARGS...")
    _inject(sys.argv[2])
    from tpnode_tui.cli import main

    sys.exit(main(sys.argv[3:]))
