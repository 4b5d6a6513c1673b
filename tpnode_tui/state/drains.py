"""Cards taken out of service, kept in the state dir: ``drains.json``.

A drain is a decision, not a reading: nothing on the card says so afterwards,
so it is written down where every allocator reads it, under the allocation
lock. It is written without that lock, so an XID drain never waits on a lock
holder. A file that cannot be understood is never taken for "nothing
drained". See docs/architecture.md, section 'Triage' ("Drains").
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from tpnode_tui.model.views import DRAIN_SOURCES, Drain
from tpnode_tui.state.jsonstore import JsonStore

DRAIN_FILE = "drains.json"
#: 2: a drain keeps the boot it was made in, whether it lasts until a reboot, the card's
#: ECC count and the XIDs after it (version 1 files are read as drains without them)
DRAIN_VERSION = 2

_FIELDS = {"reason", "by", "at", "source", "xid", "boot", "reboot", "ecc", "later_xid", "later_xid_at"}


def _whole_or_none(key: str, data: dict[str, Any], name: str) -> Optional[int]:
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"card {key}: {name} must be a whole number or null")
    return value


def _time_or_none(key: str, data: dict[str, Any], name: str) -> Optional[float]:
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"card {key}: {name} must be a time in unix seconds or null")
    return None if value is None else float(value)


def _parse(key: str, data: Any) -> Drain:
    if not key.isdigit() or len(key) > 6:
        raise ValueError(f"card {key!r} is not a card index")
    if not isinstance(data, dict) or set(data) - _FIELDS or not {"reason", "by", "at"} <= set(data):
        raise ValueError(f"card {key}: expected an object with {', '.join(sorted(_FIELDS))}")
    reason, by, at = data["reason"], data["by"], data["at"]
    source = data.get("source", "operator")
    boot, reboot = data.get("boot"), data.get("reboot", False)
    if not isinstance(reason, str) or not isinstance(by, str):
        raise ValueError(f"card {key}: reason and by must be text")
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise ValueError(f"card {key}: at must be a time in unix seconds")
    if source not in DRAIN_SOURCES:
        raise ValueError(f"card {key}: source {source!r} is not one of {', '.join(DRAIN_SOURCES)}")
    if (boot is not None and not isinstance(boot, str)) or not isinstance(reboot, bool):
        raise ValueError(f"card {key}: boot must be text or null, and reboot true or false")
    return Drain(
        card=int(key),
        reason=reason,
        by=by,
        at=float(at),
        source=source,
        xid=_whole_or_none(key, data, "xid"),
        boot=boot,
        reboot=reboot,
        ecc=_whole_or_none(key, data, "ecc"),
        later_xid=_whole_or_none(key, data, "later_xid"),
        later_xid_at=_time_or_none(key, data, "later_xid_at"),
    )


def _dump(drain: Drain) -> dict[str, Any]:
    return {
        "reason": drain.reason,
        "by": drain.by,
        "at": drain.at,
        "source": drain.source,
        "xid": drain.xid,
        "boot": drain.boot,
        "reboot": drain.reboot,
        "ecc": drain.ecc,
        "later_xid": drain.later_xid,
        "later_xid_at": drain.later_xid_at,
    }


def _same(a: Drain, b: Drain) -> bool:
    """One drain, whatever was noted on it since (its ECC count, later XIDs)."""
    return (a.card, a.at, a.by, a.source, a.xid) == (b.card, b.at, b.by, b.source, b.xid)


class DrainStore:
    """``state_dir/drains.json``: card index -> :class:`Drain`."""

    def __init__(self, directory: Path) -> None:
        self.store: JsonStore[Drain] = JsonStore(
            Path(directory),
            DRAIN_FILE,
            section="cards",
            version=DRAIN_VERSION,
            parse=_parse,
            dump=_dump,
            what="drain file",
            losing="every card taken out of service would be handed out again",
        )

    @property
    def path(self) -> Path:
        return self.store.path

    def read(self) -> dict[int, Drain]:
        """Every drain; RuntimeUnavailable when the file cannot be understood."""
        return {int(k): d for k, d in self.store.read().items()}

    def drain(self, drain: Drain) -> tuple[Drain, bool]:
        """Record ``drain`` unless the card is drained already; the card's drain
        and whether it is new. An earlier drain is kept: its reason (an XID
        and what to do about it) is what the operator will need."""
        with self.store.transaction() as cards:
            old = cards.get(str(drain.card))
            if old is not None:
                return old, False
            cards[str(drain.card)] = drain
            return drain, True

    def undrain(self, card: int) -> Optional[Drain]:
        """Put the card back in service; its drain, or None when it was not drained."""
        with self.store.transaction() as cards:
            return cards.pop(str(card), None)

    def undrain_if(self, drain: Drain) -> Optional[Drain]:
        """Put the card back in service only while ``drain`` is still its drain (a
        check judged the card against it); the drain lifted, or None."""
        with self.store.transaction() as cards:
            now = cards.get(str(drain.card))
            if now is None or not _same(now, drain):
                return None
            return cards.pop(str(drain.card))

    def note_ecc(self, drain: Drain, ecc: int) -> Optional[Drain]:
        """The card's ECC count as first read while drained, kept on ``drain`` if
        it is still the card's drain and has none yet; the drain as kept, or None."""
        with self.store.transaction() as cards:
            now = cards.get(str(drain.card))
            if now is None or not _same(now, drain) or now.ecc is not None:
                return None
            cards[str(drain.card)] = kept = replace(now, ecc=ecc)
            return kept

    def note_xid(self, card: int, xid: int, at: float) -> Optional[Drain]:
        """An XID the card reported while drained, kept on its drain (the latest
        only); the drain as kept, or None when the card is not drained."""
        if not self.store.path.exists():
            return None  # nothing is drained, and a lock file is no reason to make the state dir
        with self.store.transaction() as cards:
            now = cards.get(str(card))
            if now is None or at <= now.at:
                return None
            cards[str(card)] = kept = replace(now, later_xid=xid, later_xid_at=at)
            return kept
