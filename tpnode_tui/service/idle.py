"""Idle cards given back: a reservation nobody uses is warned, then released (opt-in).

A reservation forgotten for days while others wait is the complaint shared
nodes hear most. With ``TUNEPLANE_RECLAIM_IDLE_AFTER`` set, an unused
reservation is warned, kept if used or extended within
``TUNEPLANE_RECLAIM_GRACE``, else released as ``stop`` would. Nothing is
released on a guess, and only the agent gives cards back. See
docs/architecture.md, section 'The usage ledger and idle cards'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any, Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.idle import KEEP, RELEASE, WARN, IdleWarning, reclaim_step
from tpnode_tui.host.identity import Caller
from tpnode_tui.locks import Holder
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.journal import Journal
from tpnode_tui.text.render import clock_time, format_duration
from tpnode_tui.triage.compare import Triage

log = logging.getLogger(__name__)

#: the action the node's log and audit record a warning, a keep and a release under
ACTION = "reclaim-idle"
#: who acts, in the log: the node itself, not an account
NODE_ACTOR = "node"
#: how long a release under way may take to end when the service stops
CLOSE_WAIT_S = 5.0


def node_caller() -> Caller:
    """The node as the actor of what it does unasked: the agent's own account,
    named "node" in the log so nobody takes it for a person's action."""
    return Caller(uid=os.geteuid(), gid=os.getegid(), user=NODE_ACTOR, pid=os.getpid(), operator=True)


def _owner(job: JobState) -> str:
    return job.owner or "its owner"


class IdleReservations:
    def __init__(
        self,
        allocator: GpuAllocator,
        triage: Triage,
        *,
        journal: Journal,
        changes: Changes,
        clock: Callable[[], float],
        after_s: Optional[float],
        grace_s: float,
    ) -> None:
        """``after_s``: TUNEPLANE_RECLAIM_IDLE_AFTER (None: off); ``grace_s``: TUNEPLANE_RECLAIM_GRACE."""
        self.allocator = allocator
        self.triage = triage
        self.journal = journal
        self.changes = changes
        self.clock = clock
        self.after_s = after_s
        self.grace_s = grace_s
        self.caller = node_caller()
        #: live reservation run id -> its warning
        self.warnings: dict[str, IdleWarning] = {}
        self._releasing: dict[str, asyncio.Task[None]] = {}

    def releases(self) -> dict[str, float]:
        """Each warned reservation's run id -> when it is released unless used or extended."""
        return {key: w.releases_at for key, w in self.warnings.items()}

    def check(self, snap: NodeSnapshot) -> bool:
        """After a poll: warn, keep or release each live reservation; whether a
        warning came or went, which readers should see at once."""
        if self.after_s is None:
            return False
        now = self.clock()
        live = {j.key: j for j in snap.jobs if j.live and j.kind == "reservation"}
        # stopped, expired or released: nothing left to warn about
        gone = [k for k in self.warnings if k not in live and k not in self._releasing]
        for key in gone:
            del self.warnings[key]
        changed = bool(gone)
        for key, job in live.items():
            since = self.triage.unused_since.get(key)
            if since is None or key in self._releasing:
                continue
            step = reclaim_step(since, self.warnings.get(key), now, self.after_s, self.grace_s)
            if step == WARN:
                self._warn(job, since, now)
            elif step == KEEP:
                self._keep(job, self.warnings.pop(key))
            elif step == RELEASE:
                self._releasing[key] = asyncio.get_running_loop().create_task(self._release(job, self.warnings[key]))
            changed = changed or step in (WARN, KEEP)
        return changed

    def _record(self, job: JobState, result: str, message: str, state: str, **fields: Any) -> None:
        """One entry in the node's log and audit: the node acted, on the owner's reservation."""
        self.journal.record(
            self.caller,
            ACTION,
            job.key,
            result,
            message,
            cards=job.cards,
            state=state,
            owner=job.owner,
            owner_uid=job.uid,
            **fields,
        )

    def _warn(self, job: JobState, since: float, now: float) -> None:
        warning = IdleWarning(at=now, releases_at=now + self.grace_s, unused_since=since, expires_at=job.expires_at)
        self.warnings[job.key] = warning
        owner = _owner(job)
        self._record(
            job,
            "ok",
            f"{owner}'s reservation {job.key} has had no process of {owner}'s on {job.holding} for "
            f"{format_duration(now - since)}: the node releases it at {clock_time(warning.releases_at, now)} "
            f"unless it is used or extended (tpnode-tui extend {job.key} --for DURATION)",
            "warned",
            releases_at=warning.releases_at,
            unused_since=since,
        )

    def _keep(self, job: JobState, warning: IdleWarning) -> None:
        extended = (job.expires_at or 0.0) > (warning.expires_at or 0.0)
        self._record(
            job,
            "ok",
            f"{_owner(job)}'s reservation {job.key} was {'extended' if extended else 'used'} after the "
            "warning: the node keeps it",
            "kept",
        )

    async def _release(self, job: JobState, warning: IdleWarning) -> None:
        """Release it as ``stop`` would, through the allocator, unless it was extended
        or a shell was opened on it meanwhile: that is checked under the allocation
        lock, which an extension and a shell take too, so neither can cross it."""
        key, owner = job.key, _owner(job)
        try:
            async with self.allocator.lock.hold(Holder("the node", None, f"release of idle reservation {key}")):
                now_job = next((j for j in await self.allocator.runtime.ps() if j.key == key and j.live), None)
                if now_job is None or now_job.expires_at != warning.expires_at or now_job.shell_processes:
                    return  # ended, extended or in a shell's use since it was read: the next poll keeps it
                stopped = await self.allocator.stop(key)
        except Exception as e:
            log.warning("could not release the idle reservation %s", key, exc_info=True)
            # warned again at the next poll, and tried again when that grace is out
            self.warnings.pop(key, None)
            self._record(job, "failed", f"the node could not release {owner}'s reservation {key}: {e}", "failed")
            return
        finally:
            self._releasing.pop(key, None)
        self.warnings.pop(key, None)
        now = self.clock()
        self._record(
            stopped,
            "ok",
            f"the node released {owner}'s reservation {key} ({stopped.holding}): no process of {owner}'s on "
            f"its cards since {clock_time(warning.unused_since, now)}, warned at {clock_time(warning.at, now)}",
            "released",
            unused_since=warning.unused_since,
        )
        self.changes.acted()

    async def close(self) -> None:
        """A release under way is let finish (a stop half-asked would be worse); one
        still waiting for the lock when the wait is out is dropped, and the
        reservation is warned again by the next agent."""
        tasks = list(self._releasing.values())
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        for task in pending:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
