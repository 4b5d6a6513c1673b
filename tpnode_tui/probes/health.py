"""How every probe words a card's health, and when its reading can see outside use.

NVML, nvidia-smi and the simulated node all say the same thing for the same
fault, so an operator who learned the words on the demo reads them the same
on a real node, and tests can compare readings from different probes.

Only faults that are certain grounds to stop using a card count. They raise
nothing while a job runs: the job just produces wrong numbers or runs slowly,
which is the hardest kind of failure to trace back to a card.
"""

from __future__ import annotations

from typing import Iterable

from tpnode_tui.model.facts import CardFacts, ProbeReading
from tpnode_tui.text.render import cards_words

#: Pages waiting to be retired only take effect after a reset; until then the
#: bad memory is still in use.
RETIRED_PAGES_PENDING = "pending retired memory pages, which need a GPU reset"

#: A100/H100/H200 replace retired pages with row remapping (they report
#: retired pages as not supported), so this is their "pending pages".
ROW_REMAP_PENDING = "row remapping pending, which needs a GPU reset"

#: No spare rows were left: the memory fault is permanent.
ROW_REMAP_FAILED = "row remapping failed (the card must be serviced)"

GPU_LOST = "GPU is lost (fell off the bus; needs a reset or reboot)"


def uncorrected_ecc(count: int) -> str:
    """Memory is already returning errors, so results computed on it cannot be trusted."""
    return f"{count} uncorrected ECC errors"


def recovery_needed(action: str) -> str:
    """The driver's own recovery action for the card (NVML field 230): it knows best."""
    return f"the driver asks to {action}"


def hw_slowdown(*, thermal: bool = False, power_brake: bool = False) -> str:
    """Hardware throttling makes training silently slower; name the cause when the driver does."""
    causes = [name for name, on in (("thermal", thermal), ("power brake", power_brake)) if on]
    return f"hardware slowdown ({', '.join(causes) if causes else 'heat or power'})"


def unseen_cards(cards: Iterable[CardFacts]) -> list[int]:
    """Cards on which use from outside the platform could not be read.

    Memory used is the signal that works everywhere (the process list is empty
    inside a container), so a card whose memory could not be read is unknown.
    A MIG card whose driver gives no whole-card figure (some do not in MIG
    mode) is seen when every one of its slices' memory was read. A card
    already known to be unhealthy is not handed out anyway, so a lost GPU does
    not make the whole node blind.
    """
    return [c.index for c in cards if not _memory_seen(c) and not c.health]


def _memory_seen(card: CardFacts) -> bool:
    if card.memory_used_mib is not None:
        return True
    slices = card.slices if card.mig_mode else None
    return bool(slices) and all(s.memory_used_mib is not None for s in slices or ())


def unseen_problem(unseen: list[int]) -> str:
    return (
        f"memory use could not be read on {cards_words(unseen)}, so use from outside the platform cannot be seen there"
    )


def reading(source: str, cards: tuple[CardFacts, ...], notes: list[str]) -> ProbeReading:
    """A reading of ``cards``, blind to outside use wherever memory could not be read."""
    unseen = unseen_cards(cards)
    problems = ([unseen_problem(unseen)] if unseen else []) + notes
    return ProbeReading(
        source=source,
        cards=cards,
        count=len(cards),
        external_probe_ok=not unseen,
        problem="; ".join(problems) or None,
    )
