"""Changing and ending jobs that run: stop, extend, reclaim, each by its owner or an operator.

The job is found where the truth lives (the runtime's ``ps()``), and who owns
it is decided from what it recorded: by uid where it recorded one, else by name.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.policy import Policy
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import Holder
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NotAllowed, no_running_job
from tpnode_tui.model.jobs import JobOutput, JobState, ShellEntry
from tpnode_tui.port.types.jobs import LOG_PAGE_BYTES, LogsRequest, ReclaimRequest, StopRequest
from tpnode_tui.port.types.reservations import ExtendRequest, ShellRequest
from tpnode_tui.runtimes.shells import CANNOT_TELL, FORWARDED
from tpnode_tui.service.journal import Journal
from tpnode_tui.text.refusals import no_shells, not_a_reservation
from tpnode_tui.text.render import format_duration

#: how often a followed job's output is looked at again when nothing new was written
FOLLOW_EVERY_S = 0.25
#: after how many such looks with nothing new an empty page is sent all the same: a
#: follower that went away is then noticed (its line cannot be written), and its
#: stream ends, instead of looking at a quiet job's log for as long as the job runs
QUIET_LOOKS = 40


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
            by = Holder(caller.user, caller.uid, f"extension of {run_id}")
            return await self.allocator.extend(run_id, duration_s, longest_s=self.longest_s, by=by)

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
            async with self.allocator.lock.hold(Holder(caller.user, caller.uid, f"shell on {run_id}")):
                # asked again of the record under the state file's lock: the run id may have changed hands
                entry: ShellEntry = await shell(job.name, caller.pid, caller.uid, request.seen_start_ticks, may)
            return entry

        def done(entry: ShellEntry) -> str:
            how = f"fenced by {entry.device_fence.how}" if entry.device_fence.fenced else "not fenced"
            return f"{caller.user} opened a shell (pid {caller.pid}) on {entry.run_id}, {how}"

        return await self.journal.audited(caller, "shell", run_id, work(), done)

    async def logs(self, caller: Caller, request: LogsRequest) -> JobOutput:
        """A page of a job's output: its owner's or an operator's to read, never
        another account's; read by the node (the log file is the job's account's)."""
        job = await self._readable(caller, request.run_id)
        return await self.allocator.runtime.output(job, request.after, LOG_PAGE_BYTES)

    async def follow_logs(self, caller: Caller, request: LogsRequest) -> AsyncIterator[JobOutput]:
        """The job's output from ``after``, page after page, then each piece as it
        is written, until the job has ended and all of it was read (said by the
        last page's ``ended``). Who may read it is decided before the first page."""
        job = await self._readable(caller, request.run_id)
        return self._following(job, request.after)

    async def _following(self, job: JobState, after: Optional[str]) -> AsyncIterator[JobOutput]:
        """Pages of ``job``'s output; once the job is gone (reclaimed meanwhile, its
        run id perhaps another's since), one last empty page says it ended."""
        quiet = 0
        while True:
            try:
                page = await self.allocator.runtime.output(job, after, LOG_PAGE_BYTES)
            except JobNotFound:
                yield JobOutput(text="", after=after or "", ended=True, log=job.log)
                return
            done = page.ended and not page.more
            quiet = 0 if page.text or done or quiet >= QUIET_LOOKS else quiet + 1
            if quiet == 0:
                yield page
            if done:
                return
            after = page.after
            if not page.more:
                await asyncio.sleep(FOLLOW_EVERY_S)

    async def _readable(self, caller: Caller, run_id: str) -> JobState:
        """The job ``run_id`` names (the live one where an engine keeps two), if
        ``caller`` may read its output: its owner, or an operator."""
        jobs = [j for j in await self.allocator.runtime.ps() if j.key == run_id]
        if not jobs:
            raise JobNotFound(f"no job or reservation has run id {run_id} (a job reclaimed is no longer listed)")
        job = next((j for j in jobs if j.live), jobs[-1])
        self.policy.check_may(caller, job, "read the output of")
        return job

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
