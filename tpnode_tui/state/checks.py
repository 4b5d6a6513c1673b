"""Each card's last check, kept in the state dir: ``checks.json``.

A check is evidence, not a decision: it takes no card out of service by
itself being kept (a failed check drains a card through the drain file), but
it is what lets a card that fell off the bus back in once the node has
rebooted, so it must outlive the agent and the reboot: ``undrain`` of such a
card asks for a check passed since the reboot. Kept like the drains (flock,
atomic replace, 0600), one record a card, the newest only: the node's log
keeps every check.

A record that cannot be understood is set aside (``checks.rejected.json``)
rather than stopping the rest: without it, the card only seems unchecked,
which keeps a drain in place and hands out nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.port.wire.checks import check_from_json, check_to_json
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.state.jsonstore import JsonStore

CHECK_FILE = "checks.json"
CHECK_VERSION = 1


def _parse(key: str, data: Any) -> CardCheck:
    if not key.isdigit() or len(key) > 6:
        raise ValueError(f"card {key!r} is not a card index")
    try:
        check = check_from_json(data, f"card {key}'s check")
    except WireError as e:
        raise ValueError(str(e)) from None
    if check.card != int(key):
        raise ValueError(f"card {key}'s check is card {check.card}'s")
    return check


class CheckStore:
    """``state_dir/checks.json``: card index -> its last :class:`CardCheck`."""

    def __init__(self, directory: Path) -> None:
        self.store: JsonStore[CardCheck] = JsonStore(
            Path(directory),
            CHECK_FILE,
            section="cards",
            version=CHECK_VERSION,
            parse=_parse,
            dump=check_to_json,
            what="check file",
            losing="a card that fell off the bus would seem never checked since the reboot",
            set_aside="checks.rejected.json",
        )

    @property
    def path(self) -> Path:
        return self.store.path

    def read(self) -> dict[int, CardCheck]:
        """Each card's last check; RuntimeUnavailable when the file cannot be read."""
        return {int(k): c for k, c in self.store.read().items()}

    def keep(self, check: CardCheck) -> None:
        """``check`` as its card's last."""
        with self.store.transaction() as cards:
            cards[str(check.card)] = check
