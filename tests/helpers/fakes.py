"""Stand-ins for the allocator's rule tests: a runtime kept in memory and a probe
that returns a prepared reading. The real runtimes and probes have their own
tests against dockerd, real processes and fake NVML; these exist so that each
allocator rule can be shown on its own, with nothing else moving."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tpnode_tui.model.errors import JobNotFound
from tpnode_tui.model.facts import CardFacts, ProbeReading


def idle_cards(n: int, **kw) -> tuple[CardFacts, ...]:
    return tuple(
        CardFacts(index=i, name="NVIDIA H200", memory_total_mib=143771, memory_used_mib=1, **kw) for i in range(n)
    )


class StaticProbe:
    source = "static"

    def __init__(self, reading: ProbeReading | None = None, cards: int = 8):
        self.reading = reading or ProbeReading("static", idle_cards(cards), count=cards)
        self.reads = 0

    def set_card(self, index: int, **changes) -> None:
        cards = list(self.reading.cards)
        cards[index] = replace(cards[index], **changes)
        self.reading = replace(self.reading, cards=tuple(cards))

    async def read(self) -> ProbeReading:
        self.reads += 1
        return self.reading

    async def close(self) -> None:
        pass


class MemoryRuntime:
    """Jobs in a dict; ``create_delay`` widens the window a missing lock would expose."""

    name = "memory"

    def __init__(self, create_delay: float = 0.0):
        self.jobs: dict = {}
        self.create_delay = create_delay
        self.removed: list[str] = []
        self.started: list[str] = []

    def describe(self) -> str:
        return "memory"

    def output_of(self, job) -> str:
        return f"nowhere: {job.name} ran in memory"

    def node_fence(self):
        from tpnode_tui.model.jobs import DeviceFence

        return DeviceFence.missing("jobs kept in memory run nothing")

    async def check(self, spec) -> None:
        pass

    async def ps(self):
        return list(self.jobs.values())

    async def create(self, spec, gpus):
        from tpnode_tui.model.jobs import JobState

        await asyncio.sleep(self.create_delay)
        job = JobState(
            name=f"tpn-{spec.run_id}",
            run_id=spec.run_id,
            gpus=tuple(gpus),
            status="created",
            kind=spec.kind,
            owner=spec.owner,
            command=spec.command,
            expires_at=spec.expires_at,
            lease_token=spec.lease_token,
            uid=spec.uid,
        )
        self.jobs[job.name] = job
        return job

    async def start(self, name):
        self.jobs[name] = replace(self.jobs[name], status="running")
        self.started.append(name)
        return self.jobs[name]

    async def run(self, spec, gpus):
        return await self.start((await self.create(spec, gpus)).name)

    async def stop(self, name):
        if name not in self.jobs:
            raise JobNotFound(name)
        self.jobs[name] = replace(self.jobs[name], status="exited", exit_code=143)

    async def remove(self, name):
        if name not in self.jobs:
            raise JobNotFound(name)
        del self.jobs[name]
        self.removed.append(name)

    async def remove_exited(self, jobs):
        gone = [j.name for j in jobs if self.jobs.get(j.name) == j and not j.live]
        for name in gone:
            await self.remove(name)
        return gone

    async def extend(self, name, expires_at):
        self.jobs[name] = replace(self.jobs[name], expires_at=expires_at)
        return self.jobs[name]

    def add(self, job) -> None:
        self.jobs[job.name] = job

    async def close(self) -> None:
        pass
