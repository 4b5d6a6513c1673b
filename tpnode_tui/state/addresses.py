"""Where each account is told what concerns it: its notification URLs, ``notify.json``.

An account adds its own (``tpnode-tui notify add URL``) and sees and removes
only its own; an operator's URL may be for the node's events instead of
their own. A URL can hold a password or a token, so the file is root's and
0600 in the state dir (:class:`~tpnode_tui.state.jsonstore.JsonStore`), each
URL is kept beside the form that may be shown (Apprise's privacy mode, made
when it was added), and only that form ever leaves the agent. How many one
account keeps is bounded (TUNEPLANE_NOTIFY_MAX_URLS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpnode_tui.model.errors import BadRequest, TooMany
from tpnode_tui.port.types.notify import URL_MOST
from tpnode_tui.state.jsonstore import JsonStore

ADDRESS_FILE = "notify.json"
ADDRESS_VERSION = 1

_FIELDS = {"url", "shown", "node", "added_at"}


@dataclass(frozen=True)
class Address:
    """One URL of an account's: the secret whole, and the form that may be shown."""

    url: str
    shown: str
    #: an operator's URL for the node's events (drains, XIDs, intruders ...), not their own
    node: bool = False
    added_at: float = 0.0


@dataclass(frozen=True)
class Addresses:
    """An account's URLs, in the order added (``notify list`` numbers them from 1)."""

    user: str
    urls: tuple[Address, ...] = ()


def _address(key: str, data: Any) -> Address:
    if not isinstance(data, dict) or set(data) - _FIELDS or not {"url", "shown"} <= set(data):
        raise ValueError(f"account {key}: each URL is an object with url, shown, node and added_at")
    url, shown, node, at = data["url"], data["shown"], data.get("node", False), data.get("added_at", 0.0)
    if not isinstance(url, str) or not isinstance(shown, str) or not 0 < len(url) <= URL_MOST:
        raise ValueError(f"account {key}: a URL and its shown form are text, the URL at most {URL_MOST} characters")
    if not isinstance(node, bool) or isinstance(at, bool) or not isinstance(at, (int, float)):
        raise ValueError(f"account {key}: node is true or false and added_at a time in unix seconds")
    return Address(url, shown, node, float(at))


def _parse(key: str, data: Any) -> Addresses:
    if not key.isdigit() or len(key) > 10:
        raise ValueError(f"account {key!r} is not a uid")
    if not isinstance(data, dict) or set(data) != {"user", "urls"}:
        raise ValueError(f"account {key}: expected an object with user and urls")
    if not isinstance(data["user"], str) or not isinstance(data["urls"], list):
        raise ValueError(f"account {key}: user is text and urls a list")
    return Addresses(data["user"], tuple(_address(key, u) for u in data["urls"]))


def _dump(kept: Addresses) -> dict[str, Any]:
    urls = [{"url": a.url, "shown": a.shown, "node": a.node, "added_at": a.added_at} for a in kept.urls]
    return {"user": kept.user, "urls": urls}


def too_many(user: str, most: int) -> TooMany:
    """The refusal of one URL more than an account may keep."""
    return TooMany(
        f"{user} keeps {most} notification URLs, the most one account may "
        f"(TUNEPLANE_NOTIFY_MAX_URLS={most}): remove one first (tpnode-tui notify remove N)"
    )


class AddressBook:
    """``state_dir/notify.json``: uid -> :class:`Addresses`."""

    def __init__(self, directory: Path) -> None:
        self.store: JsonStore[Addresses] = JsonStore(
            Path(directory),
            ADDRESS_FILE,
            section="accounts",
            version=ADDRESS_VERSION,
            parse=_parse,
            dump=_dump,
            what="notification URL file",
            losing="every account's notification URLs would be forgotten",
        )

    def read(self) -> dict[int, Addresses]:
        """Every account's URLs; RuntimeUnavailable when the file cannot be understood."""
        return {int(k): kept for k, kept in self.store.read().items()}

    def of(self, uid: int) -> tuple[Address, ...]:
        kept = self.read().get(uid)
        return kept.urls if kept is not None else ()

    def add(self, uid: int, user: str, address: Address, most: int) -> tuple[Address, ...]:
        """Keep ``address`` as ``uid``'s last URL, unless it keeps ``most`` already
        (TooMany) or that very URL (BadRequest); the account's URLs after."""
        with self.store.transaction() as accounts:
            kept = accounts.get(str(uid), Addresses(user))
            if any(a.url == address.url for a in kept.urls):
                raise BadRequest("that URL is kept already (tpnode-tui notify list shows it)")
            if len(kept.urls) >= most:
                raise too_many(user, most)
            accounts[str(uid)] = Addresses(user, (*kept.urls, address))
            return accounts[str(uid)].urls

    def remove(self, uid: int, number: int) -> tuple[Address, tuple[Address, ...]]:
        """Forget ``uid``'s URL ``number`` (from 1, as listed): it, and the account's URLs after."""
        with self.store.transaction() as accounts:
            kept = accounts.get(str(uid))
            urls = kept.urls if kept is not None else ()
            if not 1 <= number <= len(urls):
                has = f"1 to {len(urls)}" if urls else "none"
                raise BadRequest(f"there is no notification URL {number} to remove (this account's: {has})")
            assert kept is not None
            left = urls[: number - 1] + urls[number:]
            if left:
                accounts[str(uid)] = Addresses(kept.user, left)
            else:
                del accounts[str(uid)]
            return urls[number - 1], left
