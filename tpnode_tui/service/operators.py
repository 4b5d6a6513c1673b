"""What only an operator may do to a card: drain it, undrain it, evict its squatters.

Each goes through the same checks and the same log as every other action. A
drain is a decision, not a reading, so it is kept in the drain file and read
by the allocator under the allocation lock; a card is put back only when the
driver no longer reports a problem with it, and a card drained until the
node reboots (XID 79: fallen off the bus) only once the node has rebooted and
a check of the card has passed since, unless the operator says ``--force``.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.checkup import stays_drained
from tpnode_tui.core.policy import Policy
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.errors import Conflict, JobNotFound
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.port.types.operators import DrainRequest, EvictRequest, UndrainRequest
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.readings import Readings
from tpnode_tui.state.checks import CheckStore
from tpnode_tui.text.refusals import drained_already, not_drained
from tpnode_tui.triage import evict as evicting


class OperatorActions:
    def __init__(
        self,
        allocator: GpuAllocator,
        policy: Policy,
        *,
        clock: Callable[[], float],
        evict_grace_s: float,
        readings: Readings,
        journal: Journal,
        boot: Callable[[], Optional[str]],
        checks: CheckStore,
    ) -> None:
        """``boot``: this boot's id (None when it cannot be read), kept on each drain;
        ``checks``: the cards' last checks, read afresh when a drain until a reboot is to be lifted."""
        self.allocator = allocator
        self.policy = policy
        self.clock = clock
        self.evict_grace_s = evict_grace_s
        self.readings = readings
        self.journal = journal
        self.boot = boot
        self.checks = checks

    async def drain(self, caller: Caller, request: DrainRequest) -> Drain:
        """Take ``card`` out of service (operators): it is never handed out again
        until undrained; a job already on it keeps running. The reason was read
        (said, and not too long) with the request."""
        card, reason = request.card, request.reason

        async def work() -> Drain:
            self.policy.check_operator(caller, f"drain card {card}")
            if self.readings.raw is None:
                await self.readings.read_now()  # to know which cards the node has
            self.readings.check_card(card)
            drain = Drain(
                card=card, reason=reason.strip(), by=caller.user, at=self.clock(), source="operator", boot=self.boot()
            )
            kept, new = await asyncio.to_thread(self.allocator.drains.drain, drain)
            if not new:
                raise Conflict(drained_already(card, kept.by, kept.reason))
            self.journal.event(
                "drain",
                f"card {card} drained by {caller.user}: {kept.reason}",
                cards=[card],
                user=caller.user,
                source="operator",
                by=caller.user,
            )
            return kept

        def done(d: Drain) -> str:
            job = self.readings.job_on(card)
            under = f"; {job.key} keeps running on it" if job is not None else ""
            return f"{caller.user} drained card {card}: {d.reason}{under}"

        return await self.journal.audited(
            caller, "drain", f"card {card}", work(), done, lambda d: [d.card], [card], shown_as=lambda _d: "drain"
        )

    async def undrain(self, caller: Caller, request: UndrainRequest) -> Drain:
        """Put ``card`` back in service (operators); refused while the driver
        still reports a problem with it, which is named, and (unless forced) a
        drain until the node reboots before a reboot and a check passed since."""
        card, force = request.card, request.force

        async def work() -> Drain:
            self.policy.check_operator(caller, f"undrain card {card}")
            self.readings.check_card(card)
            drains = await asyncio.to_thread(self.allocator.drains.read)
            if card not in drains:
                raise JobNotFound(not_drained(card))
            snap = await self.readings.read_now()
            view = snap.cards[card] if card < len(snap.cards) else None
            facts = view.facts if view is not None else None
            if facts is None:
                raise Conflict(
                    f"card {card} stays drained: the driver does not report it "
                    f"({snap.probe.problem or 'it is missing from the reading'}); "
                    f"{drains[card].reason}"
                )
            if facts.health:
                raise Conflict(
                    f"card {card} stays drained: it still reports {'; '.join(facts.health)}. "
                    f"Drained for: {drains[card].reason}"
                )
            held = await self._until_reboot(drains[card])
            if held is not None and not force:
                raise Conflict(held)
            removed = await asyncio.to_thread(self.allocator.drains.undrain, card)
            if removed is None:
                raise JobNotFound(not_drained(card))
            forced = " with --force" if held is not None else ""
            self.journal.event(
                "undrain",
                f"card {card} is back in service, undrained by {caller.user}{forced} "
                f"(drained by {removed.by}: {removed.reason})",
                cards=[card],
                user=caller.user,
                by=caller.user,
                source=removed.source,
                xid=removed.xid,
                forced=bool(forced),
            )
            return removed

        return await self.journal.audited(
            caller,
            "undrain",
            f"card {card}",
            work(),
            lambda d: f"{caller.user} put card {card} back in service (drained by {d.by}: {d.reason})",
            lambda d: [d.card],
            [card],
            shown_as=lambda _d: "undrain",
        )

    async def _until_reboot(self, drain: Drain) -> Optional[str]:
        """Why a drain until the node reboots stays (no reboot yet, or no check
        passed since: core/checkup.py words it); None when it may be lifted."""
        if not drain.reboot:
            return None
        last = (await asyncio.to_thread(self.checks.read)).get(drain.card)
        return stays_drained(drain, self.boot(), last, self.clock())

    async def evict(self, caller: Caller, request: EvictRequest) -> EvictReport:
        """SIGTERM the card's external or intruding processes, or the one named
        (operators); SIGKILL what is left after the grace period when ``kill``.
        ``dry_run`` only lists what would be signalled; ``started_at`` names the
        very process (as a dry run listed it) that ``pid`` must still be."""
        card, pid, kill, dry_run, started_at = (
            request.card,
            request.pid,
            request.kill,
            request.dry_run,
            request.started_at,
        )

        async def work() -> EvictReport:
            self.policy.check_operator(caller, f"evict processes from card {card}")
            snap = await self.readings.read_now()
            self.readings.check_card(card)
            view = snap.cards[card]
            chosen = evicting.targets(view, pid, started_at)
            if dry_run:
                done = evicting.listed(view, chosen, kill)
            else:
                done = await asyncio.to_thread(evicting.evict, view, chosen, grace_s=self.evict_grace_s, kill=kill)
                for e in done:
                    who = e.user or (f"uid {e.uid}" if e.uid is not None else "someone")
                    self.journal.event(
                        "evict",
                        f"card {card}: {who}'s pid {e.pid} ({e.command or 'command unknown'}), "
                        f"evicted by {caller.user}: {e.fate}",
                        cards=[card],
                        user=e.user,
                        pid=e.pid,
                        outcome=e.outcome,
                        by=caller.user,
                    )
            return EvictReport(card=card, dry_run=dry_run, kill=kill, grace_s=self.evict_grace_s, processes=tuple(done))

        def said(r: EvictReport) -> str:
            what = "would evict" if r.dry_run else "evicted"
            return f"{caller.user} {what} from card {card}: " + "; ".join(
                f"pid {e.pid} of {e.user or e.uid}: {e.fate}" for e in r.processes
            )

        target = f"card {card}" + (f" pid {pid}" if pid is not None else "")
        return await self.journal.audited(
            caller,
            "evict",
            target,
            work(),
            said,
            lambda r: [r.card],
            [card],
            shown_as=lambda r: None if r.dry_run or not r.processes else "evict",
        )
