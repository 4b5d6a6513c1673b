"""Section 3: how long a launch holds the allocation lock, and launches per second.

Lock hold, docker: our ``launch`` creates the container under the lock and
starts it after; the seed held the lock over create *and* start. The seed's
way is reproduced beside our allocator: under its lock, read the occupancy,
pick the cards, create and start (``runtime.run``), so both sides share the
runtime, the probe (NVML over the fake, which costs nothing) and the lock,
and differ only in what runs inside it. The time is measured around the whole ``hold()``: from
asking for the lock (uncontended) to having given it back, lease token write
included.

Launches per second: 8 ``tpnode-tui launch`` processes started at once on the
process runtime and a simulated 8-card node, each asking for 1 card; from the
first start to the last exit. Once with flock, once with a Redis lease on a
private redis-server, with the default lock retry interval. Every job is
stopped after its round.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import AsyncIterator, Optional

import aiodocker

from common import Ratio, Row, Section, run_async
from helpers.nvml import FakeCard, FakeNvml
from helpers.services import Dockerd, RedisServer, write_scene
from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.settings import load_settings
from tpnode_tui.core.placement import pick_gpus
from tpnode_tui.locks import AllocationLock, LockHold, make_lock
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.runtimes.docker import DockerRuntime
from tpnode_tui.runtimes.process import ProcessRuntime

TITLE = "3. Lock hold per launch (docker) and launches per second (8 CLI processes)"
CONCURRENT = 8


class TimedLock:
    """The allocation lock, recording how long each ``hold()`` lasted."""

    def __init__(self, inner: AllocationLock) -> None:
        self._inner = inner
        self.held: list[float] = []

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[LockHold]:
        start = time.perf_counter()
        try:
            async with self._inner.hold() as hold:
                yield hold
        finally:
            self.held.append(time.perf_counter() - start)


async def _lock_hold(daemon: Dockerd, rounds: int, state_dir: Path) -> dict[str, list[float]]:
    settings = load_settings({}, state_dir=str(state_dir))
    runtime = DockerRuntime(gpu_mode="none", hold_image=daemon.image, docker_host=daemon.host)
    lock = TimedLock(make_lock(settings))
    allocator = GpuAllocator(runtime, NvmlProbe(nvml=FakeNvml([FakeCard() for _ in range(8)])), settings, lock)
    docker = aiodocker.Docker(url=daemon.host)
    out: dict[str, list[float]] = {"create": [], "create_start": [], "launch_create": [], "launch_create_start": []}
    n = 0

    def spec() -> JobSpec:
        nonlocal n
        n += 1
        return JobSpec(run_id=f"lock-{n}", cards=1, command=("sleep", "3600"), image=daemon.image, owner="bench")

    async def ours() -> str:
        return (await allocator.launch(spec())).job.name

    async def seeds_way() -> str:
        job = spec()

        async with lock.hold():
            occ = await allocator.occupancy()
            state = await runtime.run(job, pick_gpus(occ.free, job.cards))
        return state.name

    async def timed(key: str, launch) -> None:
        lock.held.clear()
        start = time.perf_counter()
        name = await launch()
        out["launch_" + key].append(time.perf_counter() - start)
        (held,) = lock.held
        out[key].append(held)
        await docker.containers.container(name).delete(force=True)

    try:
        for _ in range(2):  # warm up: first connection, first container of the image
            await timed("create", ours)
            await timed("create_start", seeds_way)
        for value in out.values():
            value.clear()
        for _ in range(rounds):
            await timed("create", ours)
            await timed("create_start", seeds_way)
    finally:
        await allocator.close()
        await docker.close()
    return out


def _stop_jobs(state_dir: Path) -> None:
    """Stop every job a round started (SIGTERM, then SIGKILL to its group)."""
    runtime = ProcessRuntime(state_dir, stop_timeout_s=2)

    async def stop_all() -> None:
        jobs = await runtime.ps()
        await asyncio.gather(*(runtime.stop(j.name) for j in jobs if j.live))

    run_async(stop_all())


def _launch_round(scene: Path, state_dir: Path, redis_url: Optional[str]) -> float:
    """8 CLI launches at once; the seconds from the first start to the last exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.pop("DOCKER_HOST", None)
    env.update(TUNEPLANE_PROBE=f"simulated:{scene}", TUNEPLANE_RUNTIME="process", TUNEPLANE_STATE_DIR=str(state_dir))
    if redis_url:
        env["TUNEPLANE_REDIS_URL"] = redis_url
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tpnode_tui", "launch", "--cards", "1", "--run-id", f"b{i}", "--", "sleep", "600"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(CONCURRENT)
    ]
    try:
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.perf_counter() - start
    failed = [f"{p.returncode}: {err.strip()}" for p, err in zip(procs, errors) if p.returncode != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} of {CONCURRENT} launches failed: {failed[0]}")
    return wall


def _launches_per_s(redis: Optional[RedisServer], rounds: int, warmup: int, tmp: Path) -> dict[str, list[float]]:
    scene = write_scene(tmp / "node.json", CONCURRENT)
    out: dict[str, list[float]] = {"flock": [], "redis": []}
    kinds = ["flock"] + (["redis"] if redis else [])
    for r in range(warmup + rounds):  # a warm-up round fills the page cache for the imports
        for kind in kinds:
            state_dir = tmp / f"state-{kind}-{r}"
            try:
                wall = _launch_round(scene, state_dir, redis.url if kind == "redis" else None)
            finally:
                _stop_jobs(state_dir)
                shutil.rmtree(state_dir, ignore_errors=True)
            if r >= warmup:
                out[kind].append(CONCURRENT / wall)
    return out


def run(daemon: Optional[Dockerd], redis: Optional[RedisServer], quick: bool, unavailable: list[str]) -> Section:
    section = Section(TITLE)
    with tempfile.TemporaryDirectory(prefix="tpb-launch-") as tmp_name:
        tmp = Path(tmp_name)
        if daemon is not None:
            held = run_async(_lock_hold(daemon, 5 if quick else 20, tmp / "lock-state"))
            create = Row("lock_hold_create", "lock held per docker launch: create only (ours, launch)", held["create"])
            both = Row(
                "lock_hold_create_start",
                "lock held per docker launch: create + start (seed's way, inside the lock)",
                held["create_start"],
            )
            section.rows += [
                create,
                both,
                Row("launch_create", "whole launch, docker: ours (start after the lock)", held["launch_create"]),
                Row(
                    "launch_create_start",
                    "whole launch, docker: seed's way (start inside the lock)",
                    held["launch_create_start"],
                ),
            ]
            section.ratios.append(
                Ratio("lock_hold_ratio", "lock held: create + start / create only", both, create, target=5)
            )
        rates = _launches_per_s(redis, 2 if quick else 5, 0 if quick else 1, tmp)
        for kind, samples in rates.items():
            if samples:
                section.rows.append(
                    Row(
                        f"launches_per_s_{kind}",
                        f"launches per second, {CONCURRENT} CLI processes at once, {kind}",
                        samples,
                        unit="/s",
                    )
                )
    if rates["flock"] and rates["redis"]:
        section.notes.append(
            f"launches per second is the median of {len(rates['flock'])} rounds; each round is "
            f"{CONCURRENT} Python processes starting at once on {os.cpu_count()} CPUs, so interpreter "
            "start-up dominates it"
        )
    for why in unavailable:
        section.notes.append(f"not measured: {why}")
    return section
