"""What each account may do on a shared node: pure rules, decided from kernel identities.

Anyone may read everything and launch or reserve as themselves; ending or
changing a job is for its owner or an operator, and a refusal names the rule
and whom to ask. Ownership is by uid where recorded, else by name; quotas
count live cards, a MIG slice as one. See docs/architecture.md, section 'A
shared node' ("Who may").
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from tpnode_tui.config.settings import Settings
from tpnode_tui.host.identity import Caller, Operators
from tpnode_tui.model.errors import NotAllowed
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.owners import is_owner
from tpnode_tui.text.printable import shown
from tpnode_tui.text.refusals import not_queued_by_them, not_theirs, operators_only
from tpnode_tui.text.render import cards_words


@dataclass(frozen=True)
class CardLimits:
    """Most cards an account may hold at once; ``None`` means no limit.

    ``per_account`` names accounts (``alice``) and groups (``@students``). An
    account's own entry wins over its groups'; among its groups the largest
    allowance counts (being in a group grants what the group may hold).
    """

    default: Optional[int] = None
    per_account: Mapping[str, int] = field(default_factory=dict)

    def limit_for(self, caller: Caller, group_names: Iterable[str] = ()) -> Optional[int]:
        if caller.operator:
            return None
        if caller.user in self.per_account:
            return self.per_account[caller.user]
        granted = [self.per_account[f"@{g}"] for g in group_names if f"@{g}" in self.per_account]
        if granted:
            return max(granted)
        return self.default


def owns(caller: Caller, job: JobState) -> bool:
    return is_owner(job.uid, job.owner, caller.uid, caller.user)


def held_by(caller: Caller, jobs: Iterable[JobState]) -> list[JobState]:
    """The caller's live jobs and reservations: what their quota counts."""
    return [j for j in jobs if j.live and owns(caller, j)]


def counted(job: JobState) -> int:
    """How much of a card limit ``job`` takes: its cards, and one for each MIG slice."""
    return len(job.gpus) + len(job.slices)


@dataclass(frozen=True)
class Policy:
    operators: Operators = Operators()
    limits: CardLimits = CardLimits()
    #: glob patterns of images a job may name; empty means any image
    images: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        return cls(
            operators=Operators(settings.policy.operators_group),
            limits=CardLimits(settings.policy.max_cards_per_user, dict(settings.policy.max_cards_for)),
            images=settings.policy.images,
        )

    def may(self, caller: Caller, job: JobState) -> bool:
        """Whether the caller may end or change ``job``: its owner, or an operator."""
        return caller.operator or owns(caller, job)

    def check_may(self, caller: Caller, job: JobState, action: str, *, cards: Sequence[int] = ()) -> None:
        """Refuse ``action`` (stop, reclaim, extend) on ``job`` unless the caller owns it or operates;
        ``cards``: the cards it holds, every one named in the refusal."""
        if not self.may(caller, job):
            raise NotAllowed(not_theirs(job, action, self.operators.describe(), cards))

    def check_operator(self, caller: Caller, what: str) -> None:
        """Refuse what only an operator may do (drain, undrain, evict, check a card)."""
        if not caller.operator:
            raise NotAllowed(operators_only(caller.user, what, self.operators.describe()))

    def check_cancel(self, caller: Caller, run_id: str, owner: str, owner_uid: Optional[int]) -> None:
        if caller.operator or is_owner(owner_uid, owner, caller.uid, caller.user):
            return
        raise NotAllowed(not_queued_by_them(run_id, owner, self.operators.describe()))

    def owner_for(self, caller: Caller, requested: str) -> str:
        """The owner a new job gets: the caller, unless an operator names someone else."""
        if not requested or requested == caller.user:
            return caller.user
        if caller.operator:
            return requested
        raise NotAllowed(
            f"{caller.user} asked to act as {shown(requested)}; jobs and reservations belong to "
            f"whoever asks for them, and only an operator ({self.operators.describe()}) may "
            "name another owner"
        )

    def check_quota(
        self, caller: Caller, jobs: Iterable[JobState], wanted: int, group_names: Iterable[str] = ()
    ) -> None:
        """Refuse a request that would take the caller past their card limit."""
        limit = self.limits.limit_for(caller, group_names)
        if limit is None:
            return
        mine = held_by(caller, jobs)
        holding = sum(counted(j) for j in mine)
        if holding + wanted <= limit:
            return
        slices = sum(len(j.slices) for j in mine)
        counts = ", a MIG slice counting as one card" if slices else ""
        what = (
            f"you hold {cards_words(holding)} ({', '.join(j.key for j in mine)}{counts})"
            if mine
            else "you hold no cards"
        )
        raise NotAllowed(
            f"{what} and ask for {cards_words(wanted)}; the limit for {caller.user} is "
            f"{cards_words(limit)}. Stop or let something of yours end first, or ask an "
            f"operator ({self.operators.describe()})"
        )

    def check_quota_ever(self, caller: Caller, wanted: int, group_names: Iterable[str] = ()) -> None:
        """Refuse a request larger than the caller's limit: it could never run,
        so it must not wait in a queue for ever."""
        limit = self.limits.limit_for(caller, group_names)
        if limit is not None and wanted > limit:
            raise NotAllowed(
                f"{caller.user} may hold at most {cards_words(limit)} and asks for "
                f"{cards_words(wanted)}: ask for fewer, or ask an operator ({self.operators.describe()})"
            )

    def check_image(self, image: Optional[str]) -> None:
        if image is None or not self.images:
            return
        if any(fnmatch.fnmatchcase(image, pattern) for pattern in self.images):
            return
        raise NotAllowed(
            f"image {shown(image, 120)} is not allowed on this node (TUNEPLANE_IMAGES allows {', '.join(self.images)})"
        )
