"""Changing and ending jobs that run: stop, extend, reclaim, each by its owner or an operator.

The job is found where the truth lives (the runtime's ``ps()``), and who owns
it is decided from what it recorded: by uid where it recorded one, else by name.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.policy import Policy
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NotAllowed, no_running_job
from tpnode_tui.model.jobs import JobState, ShellEntry
from tpnode_tui.port.types import ExtendRequest, ReclaimRequest, ShellRequest, StopRequest
from tpnode_tui.runtimes.shells import CANNOT_TELL, FORWARDED
from tpnode_tui.service.journal import Journal
from tpnode_tui.text.refusals import no_shells, not_a_reservation
from tpnode_tui.text.render import format_duration


class JobActions:
    def __init__(
        self,
        allocator: GpuAllocator,
        policy: Policy,
        *,
        clock: Callable[[], float],
        journal: Journal,
        longest_s: Optional[float] = None,
    ) -> None:
        self.allocator = allocator
        self.policy = policy
        self.clock = clock
        self.journal = journal
        #: the longest a reservation may be held from now, extensions included (TUNEPLANE_MAX_DURATION_DAYS)
        self.longest_s = longest_s

    async def _live(self, run_id: str) -> JobState:
        for job in await self.allocator.runtime.ps():
            if job.key == run_id and job.live:
                return job
        raise no_running_job(run_id)

    async def stop(self, caller: Caller, request: StopRequest) -> JobState:
        run_id = request.run_id

        async def work() -> JobState:
            job = await self._live(run_id)
            self.policy.check_may(caller, job, "stop", cards=job.gpus)
            return await self.allocator.stop(run_id)

        return await self.journal.audited(
            caller, "stop", run_id, work(), lambda j: f"{caller.user} stopped {j.key} ({j.holding})", lambda j: j.cards
        )

    async def extend(self, caller: Caller, request: ExtendRequest) -> JobState:
        run_id, duration_s = request.run_id, request.duration_s

        async def work() -> JobState:
            if not duration_s >= 1:
                raise BadRequest(f"extend by at least 1 second, not {duration_s:g}")
            job = await self._live(run_id)
            self.policy.check_may(caller, job, "extend", cards=job.gpus)
            return await self.allocator.extend(run_id, duration_s, longest_s=self.longest_s)

        def done(job: JobState) -> str:
            left = format_duration((job.expires_at or 0) - self.clock())
            return f"{caller.user} extended {job.key} by {format_duration(duration_s)}; {left} left"

        return await self.journal.audited(caller, "extend", run_id, work(), done, lambda j: j.cards)

    async def shell(self, caller: Caller, request: ShellRequest) -> ShellEntry:
        """Move the caller's own process (the kernel's pid for it, never one it
        names) into a live reservation's shell cgroup, fenced to its cards; its
        owner or an operator. Only the process runtime runs shells: a docker
        node's reservation holds its cards in a container."""
        run_id = request.run_id

        async def work() -> ShellEntry:
            job = await self._live(run_id)
            if job.kind != "reservation":
                raise Conflict(not_a_reservation(job.key))

            def may(now: JobState) -> None:
                self.policy.check_may(caller, now, "open a shell on", cards=now.cards)

            may(job)
            if caller.pid is None or caller.pid <= 0:
                raise NotAllowed(CANNOT_TELL)
            if request.seen_pid != caller.pid:
                raise Conflict(FORWARDED)
            shell = getattr(self.allocator.runtime, "shell", None)
            if shell is None:
                raise Conflict(no_shells(self.allocator.runtime.name))
            # under the allocation lock, which the idle release takes too: either the
            # release sees the shell (and keeps the reservation), or the shell comes
            # after the end is recorded (and is refused); the two cannot cross
            async with self.allocator.lock.hold():
                # asked again of the record under the state file's lock: the run id may have changed hands
                entry: ShellEntry = await shell(job.name, caller.pid, caller.uid, request.seen_start_ticks, may)
            return entry

        def done(entry: ShellEntry) -> str:
            how = f"fenced by {entry.device_fence.how}" if entry.device_fence.fenced else "not fenced"
            return f"{caller.user} opened a shell (pid {caller.pid}) on {entry.run_id}, {how}"

        return await self.journal.audited(caller, "shell", run_id, work(), done)

    async def reclaim(self, caller: Caller, request: ReclaimRequest) -> list[JobState]:
        """Remove exited jobs' records: one run id (its owner or an operator), or
        all the caller may remove (an operator: every exited job)."""
        run_id = request.run_id

        async def work() -> list[JobState]:
            if run_id is not None:
                jobs = [j for j in await self.allocator.runtime.ps() if j.key == run_id]
                for job in jobs:
                    self.policy.check_may(caller, job, "reclaim")
                return await self.allocator.reclaim(run_id)
            removed: list[JobState] = []
            for job in await self.allocator.runtime.ps():
                if not job.live and self.policy.may(caller, job):
                    with contextlib.suppress(JobNotFound):
                        removed += await self.allocator.release(job.key)
            return removed

        def done(jobs: list[JobState]) -> str:
            return f"{caller.user} reclaimed " + (", ".join(j.key for j in jobs) or "nothing")

        return await self.journal.audited(
            caller, "reclaim", run_id or "*", work(), done, lambda jobs: [i for j in jobs for i in j.cards]
        )
