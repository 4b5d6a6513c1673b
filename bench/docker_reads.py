"""Section 2: one ``ps()`` through aiodocker against a real dockerd.

The containers carry the platform's labels and are *created, not started*
(quick to make). The runtime counts a created container as live, since it
already holds its cards, so each one is also inspected: with 200 of them
this is the worst case, 1 list call and 200 inspect calls per ``ps()``. On a
real node live containers are bounded by the card count, and what piles up
are exited ones, which are listed but not inspected: the full run also
times 200 of those (they must be started to exit, which takes a while).
"""

from __future__ import annotations

import asyncio

import aiodocker

from common import Row, Section, interleave, run_async
from helpers.services import Dockerd
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.runtimes.docker import DockerRuntime
from tpnode_tui.runtimes.labels import job_labels

TITLE = "2. Docker reads: ps() through aiodocker, real dockerd"
COUNTS = (0, 50, 200)


async def create_labelled(
    docker: aiodocker.Docker,
    image: str,
    first: int,
    last: int,
    command: tuple[str, ...] = ("sleep", "3600"),
    start: bool = False,
) -> None:
    """Containers number ``first`` to ``last - 1``, each labelled as holding one card;
    created, or also started."""
    limit = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        spec = JobSpec(run_id=f"bench-{i}", cards=1, owner="bench")
        config = {"Image": image, "Cmd": list(command), "Labels": job_labels(spec, [i % 8])}
        async with limit:
            container = await docker.containers.create(config, name=f"tpb-ps-{i}")
            if start:
                await container.start()

    await asyncio.gather(*(one(i) for i in range(first, last)))


async def _all_exited(runtime: DockerRuntime, count: int, timeout_s: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        jobs = await runtime.ps()
        if len(jobs) == count and all(j.status == "exited" for j in jobs):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{count} containers running `true` had not all exited after {timeout_s:g} s")
        await asyncio.sleep(0.5)


async def _measure(daemon: Dockerd, rounds: dict[int, int], exited: bool) -> dict[str, list[float]]:
    runtime = DockerRuntime(gpu_mode="none", hold_image=daemon.image, docker_host=daemon.host)
    docker = aiodocker.Docker(url=daemon.host)
    times: dict[str, list[float]] = {}
    made = 0
    try:
        for count in COUNTS:
            await create_labelled(docker, daemon.image, made, count)
            made = count
            seen = await runtime.ps()
            assert len(seen) == count, f"ps() saw {len(seen)} containers, expected {count}"
            times[str(count)] = (await interleave({"ps": (runtime.ps, 1)}, rounds[count]))["ps"]
        if exited:
            await asyncio.to_thread(daemon.remove_all_containers)
            await create_labelled(docker, daemon.image, 0, 200, command=("true",), start=True)
            await _all_exited(runtime, 200)
            times["200_exited"] = (await interleave({"ps": (runtime.ps, 1)}, rounds[200]))["ps"]
    finally:
        await runtime.close()
        await docker.close()
    return times


def run(daemon: Dockerd, quick: bool) -> Section:
    section = Section(TITLE)
    rounds = {0: 30, 50: 10, 200: 5} if quick else {0: 200, 50: 50, 200: 30}
    times = run_async(_measure(daemon, rounds, exited=not quick))
    for count in COUNTS:
        section.rows.append(
            Row(
                f"docker_ps_{count}", f"ps() with {count} labelled containers (created, not started)", times[str(count)]
            )
        )
    if "200_exited" in times:
        section.rows.append(
            Row("docker_ps_200_exited", "ps() with 200 labelled containers (exited)", times["200_exited"])
        )
    section.notes.append(
        "created containers count as live (they hold their cards), so ps() inspects each one: "
        "with 200 that is 1 list + 200 inspect calls, a worst case; exited ones are only listed"
        + ("" if not quick else " (timed in the full run only: making them takes a while)")
    )
    daemon.remove_all_containers()
    return section
