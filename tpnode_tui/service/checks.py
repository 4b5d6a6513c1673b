"""Checking a card before it goes back into service, and what a check does to its drain (operators).

A drain says a card must not be handed out; nothing on the card says when it
may be again. So a check asks the driver in a process of its own (tier A),
then runs the operator's test (tier B); a card that fails in service is
drained, one the node drained itself may go back when it passes, and an
operator's drain is never lifted by the node. Nothing here holds the
allocation lock; a held card is not checked. See docs/architecture.md,
section 'Checks: drain, check, return'.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.core.checkup import command_finding, read_findings, reboot_finding, xid_finding
from tpnode_tui.core.policy import Policy
from tpnode_tui.host.identity import Caller
from tpnode_tui.model.checks import FAILED, NOT_MET, PASSED, UNTOLD, CardCheck, CommandRun, Finding, outcome_of
from tpnode_tui.model.errors import Conflict, TpnodeError
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, Drain
from tpnode_tui.port.types.checks import CheckRequest
from tpnode_tui.service.changes import Changes
from tpnode_tui.service.journal import MESSAGE_MOST, Journal, cut
from tpnode_tui.service.readings import Readings
from tpnode_tui.state.checks import CheckStore
from tpnode_tui.text.refusals import check_holder, held_for_check
from tpnode_tui.text.render import clock_time

if TYPE_CHECKING:
    from tpnode_tui.triage.checkup import Checkup

log = logging.getLogger(__name__)

#: what drains a card that failed its check (Drain.by)
BY_CHECK = "check"


class Checks:
    def __init__(
        self,
        allocator: GpuAllocator,
        policy: Policy,
        store: CheckStore,
        *,
        clock: Callable[[], float],
        readings: Readings,
        journal: Journal,
        changes: Changes,
        boot: Callable[[], Optional[str]],
        xids_seen: Callable[[int], Sequence[tuple[int, float]]],
        xids_unwatched: Callable[[], Optional[str]],
    ) -> None:
        """``boot``: this boot's id (None when it cannot be read); ``xids_seen``: each
        card's XIDs as watched, (XID, when); ``xids_unwatched``: why XIDs are not
        watched now, or None while they are."""
        self.allocator = allocator
        self.policy = policy
        self.clock = clock
        self.readings = readings
        self.journal = journal
        self.changes = changes
        self.boot = boot
        self.xids_seen = xids_seen
        self.xids_unwatched = xids_unwatched
        #: made by the first check (see :meth:`_runner`)
        self.runner: Optional[Checkup] = None
        self.return_after = allocator.settings.triage.return_after_check
        self.store = store
        #: each card's last check, as the store keeps it (read once, then kept here as checks end)
        self.last: dict[int, CardCheck] = {}
        self._loaded = False
        #: the cards being checked now: who asked, and since when
        self._running: dict[int, tuple[str, float]] = {}
        #: the drains whose ECC count was taken (or tried): each once
        self._counted: set[tuple[int, float]] = set()

    def _runner(self) -> Checkup:
        """What runs the checks' children, made by the first check: a node that
        never checks a card loads none of it (nor the probes it tells apart)."""
        if self.runner is None:
            from tpnode_tui.triage.checkup import Checkup

            triage = self.allocator.settings.triage
            self.runner = Checkup(triage.check_timeout_s, triage.check_command, triage.check_command_timeout_s)
        return self.runner

    async def ready(self) -> None:
        """The cards' last checks, read once (a file that cannot be read leaves none
        shown, and says why in the agent's log; undrain reads it afresh and refuses)."""
        if self._loaded:
            return
        self._loaded = True
        try:
            self.last = await asyncio.to_thread(self.store.read) | self.last
        except TpnodeError as e:
            log.warning("cannot read the cards' last checks: %s", e)

    def dress(self, snap: NodeSnapshot) -> NodeSnapshot:
        """``snap`` with each card's last check."""
        if not self.last:
            return snap
        return replace(snap, cards=tuple(replace(c, check=self.last.get(c.index, c.check)) for c in snap.cards))

    async def count_ecc(self, snap: NodeSnapshot) -> None:
        """Keep on each drain the card's ECC count as the node first read it
        drained: what a later check compares with. The reading shows the drain,
        so it was taken after whatever XID made it, and counts its errors."""
        for view in snap.cards:
            drain, facts = view.drain, view.facts
            if drain is None or drain.ecc is not None or facts is None or facts.ecc_uncorrected_total is None:
                continue
            if (drain.card, drain.at) in self._counted:
                continue
            self._counted.add((drain.card, drain.at))
            try:
                await asyncio.to_thread(self.allocator.drains.note_ecc, drain, facts.ecc_uncorrected_total)
            except TpnodeError as e:
                log.warning("cannot keep card %s's ECC count on its drain: %s", drain.card, e)

    # ── the check ────────────────────────────────────────────────────────────

    async def check(self, caller: Caller, request: CheckRequest) -> CardCheck:
        """Check ``card`` (operators): tier A, then the command; drain it if it
        failed while in service, return it if the node drained it and it passed
        (when the operator turned that on). Refused for a card a job holds, or
        one being checked now."""
        card = request.card

        async def work() -> CardCheck:
            self.policy.check_operator(caller, f"check card {card}")
            snap = await self.readings.read_now()
            self.readings.check_card(card)
            await self.ready()
            await self.count_ecc(snap)
            view = snap.cards[card]
            holder = check_holder(view)
            if holder is not None:
                raise Conflict(held_for_check(card, holder))
            running = self._running.get(card)
            if running is not None:
                raise Conflict(
                    f"card {card} is being checked already, by {running[0]} since "
                    f"{clock_time(running[1], self.clock())}; its result comes to the node's log"
                )
            self._running[card] = (caller.user, self.clock())
            try:
                return await self._check(caller, view)
            finally:
                self._running.pop(card, None)

        return await self.journal.audited(
            caller,
            "check",
            f"card {card}",
            work(),
            lambda c: f"{caller.user} checked card {card}, which {c.summary()}" + (f"; {c.effect}" if c.effect else ""),
            lambda c: [c.card],
            [card],
        )

    async def _check(self, caller: Caller, view: CardView) -> CardCheck:
        card, began = view.index, self.clock()
        drains = await asyncio.to_thread(self.allocator.drains.read)
        drain = drains.get(card)
        boot = self.boot()
        findings: list[Finding] = []
        said = reboot_finding(drain, boot)
        if said is not None:
            findings.append(said)
        uuid = view.facts.uuid if view.facts is not None else None
        findings += await self._tier_a(card, uuid, view, drain)
        run: Optional[CommandRun] = None
        runner = self._runner()
        if uuid is not None and runner.command and outcome_of(tuple(findings)) == PASSED:
            run = await runner.run_command(uuid, card)
            findings.append(command_finding(run))
        # XIDs last: one the card reported while it was checked counts
        findings.append(await self._xids(card, drain))
        outcome = outcome_of(tuple(findings))
        result = CardCheck(card, uuid, caller.user, began, self.clock(), boot, outcome, tuple(findings), run)
        effect = await self._act(result, drain, boot)
        return await self._keep(replace(result, effect=effect))

    async def _tier_a(self, card: int, uuid: Optional[str], view: CardView, drain: Optional[Drain]) -> list[Finding]:
        if uuid is None:
            # not reported while others are: lost; nothing reported at all: the probe is blind, and says why
            raw = self.readings.raw
            lost = view.facts is None and raw is not None and bool(raw.probe.cards)
            why = "the driver does not report it" if lost else (raw and raw.probe.problem) or "its uuid is not known"
            return [Finding("answers", NOT_MET if lost else UNTOLD, f"card {card} cannot be asked: {why}")]
        from tpnode_tui.triage.checkup import check_source

        source, why = check_source(self.allocator.probe)
        if source is None:
            return list(read_findings(None, why, drain))
        read, problem = await self._runner().facts(source, uuid)
        return list(read_findings(read, problem, drain))

    async def _xids(self, card: int, drain: Optional[Drain]) -> Finding:
        """No XID since the drain, or since the card's last check if that came later."""
        now = self.clock()
        last = self.last.get(card)
        since, words = 0.0, "the node began watching"
        if drain is not None:
            since, words = drain.at, f"the drain at {clock_time(drain.at, now)}"
        if last is not None and last.at > since:
            since, words = last.at, f"its last check at {clock_time(last.at, now)}"
        seen = list(self.xids_seen(card))
        drains = await asyncio.to_thread(self.allocator.drains.read)
        now_drain = drains.get(card)
        if now_drain is not None and now_drain.later_xid is not None and now_drain.later_xid_at is not None:
            seen.append((now_drain.later_xid, now_drain.later_xid_at))
        return xid_finding(seen, since, words, self.xids_unwatched(), now)

    async def _act(self, result: CardCheck, judged: Optional[Drain], boot: Optional[str]) -> str:
        """Drain the card if it failed while in service; return it if it passed and
        the node drained it itself (when the operator turned that on). What was done, in words."""
        card = result.card
        drain = (await asyncio.to_thread(self.allocator.drains.read)).get(card)
        if result.outcome == FAILED and drain is None:
            return await self._drain(result, boot)
        if drain is None:
            return ""
        if not result.passed:
            return "it stays drained"
        if not drain.by_node:
            return (
                f"it stays drained: {drain.by} drained it, and only an operator undrains it (tpnode-tui undrain {card})"
            )
        if not self.return_after:
            return (
                f"it stays drained: the node returns a card only with TUNEPLANE_RETURN_AFTER_CHECK on; "
                f"an operator undrains it (tpnode-tui undrain {card})"
            )
        lifted = None if judged is None else await asyncio.to_thread(self.allocator.drains.undrain_if, judged)
        if lifted is None:
            return "it stays drained: it was drained again while it was checked"
        self.journal.event(
            "undrain",
            f"card {card} is back in service: it passed its check (drained by {lifted.by}: {lifted.reason})",
            cards=[card],
            by=BY_CHECK,
            source=lifted.source,
            xid=lifted.xid,
            user=result.by,
        )
        self.changes.acted()
        return "returned to service"

    async def _drain(self, result: CardCheck, boot: Optional[str]) -> str:
        card = result.card
        reason = cut(f"failed its check: {'; '.join(f.words for f in result.findings if f.outcome == NOT_MET)}", 500)
        drain = Drain(card=card, reason=reason, by=BY_CHECK, at=self.clock(), source="check", boot=boot)
        kept, new = await asyncio.to_thread(self.allocator.drains.drain, drain)
        if not new:
            return ""
        self.journal.event(
            "drain",
            f"card {card} drained: {kept.reason}",
            cards=[card],
            source="check",
            by=BY_CHECK,
            user=result.by,
        )
        self.changes.acted()
        return "drained"

    async def _keep(self, result: CardCheck) -> CardCheck:
        """The check as its card's last, and in the node's log."""
        self.last[result.card] = result
        try:
            await asyncio.to_thread(self.store.keep, result)
        except TpnodeError as e:
            log.warning("cannot keep card %s's check: %s", result.card, e)
        self.journal.event(
            "check",
            cut(
                f"card {result.card} {result.summary()}" + (f"; {result.effect}" if result.effect else ""), MESSAGE_MOST
            ),
            cards=[result.card],
            outcome=result.outcome,
            by=result.by,
            user=result.by,
            findings=[f"{f.name}: {f.outcome}" for f in result.findings],
            effect=result.effect,
        )
        self.readings.republish()
        return result
