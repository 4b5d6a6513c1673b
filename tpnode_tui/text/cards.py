"""What a card's tile says in a few words: its memory, its readings, a state's note, a drain's author.

The dashboard's tiles and the web page's say a card the same way; each lays
the words out (and marks them) in its own medium.
"""

from __future__ import annotations

from typing import Optional

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.views import CardView, Drain
from tpnode_tui.text.badges import BADGES
from tpnode_tui.text.render import NA, card_summary, format_mib

#: the last line of a tile in a state that needs no more than a word
STATE_NOTES = {
    "unhealthy": "never handed out",
    "external": "outside the platform",
    "unverified": "outside use not probed",
}

#: a tile's last line while the node is not read (a banner says why)
UNKNOWN_UNTIL_READ = "unknown until read again"


def memory_words(used: Optional[int], total: Optional[int]) -> str:
    """ "12.0/80.0 GiB", "512 MiB/80.0 GiB", "N/A / 80.0 GiB", "mem N/A"."""
    if used is None and total is None:
        return f"mem {NA}"
    u, t = format_mib(used), format_mib(total)
    if used is None:
        return f"{NA} / {t}"
    if u.endswith(" GiB") and t.endswith(" GiB"):
        return f"{u[:-4]}/{t}"
    return f"{u}/{t}"


def readings(card: CardView) -> str:
    """ "util 42%  35°C  80 W": what the driver reads of the card now."""
    f = card.facts
    util = f"{f.utilization_pct}%" if f and f.utilization_pct is not None else NA
    temp = f"{f.temperature_c if f and f.temperature_c is not None else NA}°C"
    power = f"{f'{f.power_w:.0f}' if f and f.power_w is not None else NA} W"
    return f"util {util}  {temp}  {power}"


def drained_by(drain: Drain) -> str:
    """Who took the card out of service: an operator's name, or "XID 79"."""
    return f"XID {drain.xid}" if drain.source == "xid" and drain.xid is not None else drain.by


#: who lifts a drain by hand, and what undrain asks of one until a reboot
UNDRAINS = "an operator undrains it"
FORCE = "undrain refuses before then unless --force"


def drain_until(drain: Drain, check: Optional[CardCheck], returns: Optional[bool], boot_now: Optional[str]) -> str:
    """Until when a drained card stays out of service, as this node lifts it:
    "it stays out of service until a check passes, or an operator undrains it".
    ``check``: the card's last; ``returns``: TUNEPLANE_RETURN_AFTER_CHECK (None:
    not said); ``boot_now``: this boot's id (None: not known)."""
    if drain.reboot:
        return _until_rebooted(drain, check, returns, boot_now)
    if not drain.by_node:
        return f"it stays out of service until {UNDRAINS}"
    if returns is None:
        return (
            f"it stays out of service until {UNDRAINS}, or a check passes where the node returns a checked "
            "card (TUNEPLANE_RETURN_AFTER_CHECK)"
        )
    if returns:
        return f"it stays out of service until a check passes, or {UNDRAINS}"
    return (
        f"it stays out of service until {UNDRAINS}: a check that passes does not return it, as "
        "TUNEPLANE_RETURN_AFTER_CHECK is off"
    )


def _until_rebooted(drain: Drain, check: Optional[CardCheck], returns: Optional[bool], boot_now: Optional[str]) -> str:
    """A drain whose cure is a reboot (core/checkup.py stays_drained): a reboot,
    then a check passed since, then the node returns it or an operator undrains it."""
    rebooted = drain.boot is not None and boot_now is not None and boot_now != drain.boot
    passed = rebooted and check is not None and check.passed and check.boot == boot_now and check.at >= drain.at
    if passed:
        return f"the node has rebooted and a check has passed since: it stays out of service until {UNDRAINS}"
    returned = returns is True and drain.by_node
    then = ", which returns it" if returned else "" if returns is None else f", and {UNDRAINS}"
    if rebooted:
        return f"the node has rebooted since; it stays out of service until a check passes{then}; {FORCE}"
    return f"it stays out of service until the node has rebooted and a check has passed since{then}; {FORCE}"


def who_words(card: CardView, stale: bool) -> str:
    """Who or what holds the card; while the node is not read, what it was ("was job: train (alice)")."""
    summary = card_summary(card) or ("nothing holds it" if card.state == "free" else "")
    if not stale:
        return summary
    return f"was {BADGES.get(card.state, (card.state,))[0].lower()}" + (f": {summary}" if summary else "")
