"""The requests about an account's notification URLs, and what the node answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.port.fields import known_fields, text, whole
from tpnode_tui.port.types.parsing import Limits
from tpnode_tui.port.wire.reader import Reader

#: the longest notification URL taken (Apprise's services take far shorter ones)
URL_MOST = 2048


@dataclass(frozen=True)
class NotifyAddRequest:
    """Keep a URL the caller is told at through Apprise (``node``: an operator's,
    for the node's events instead of their own). Nothing said about it quotes
    it: a URL may hold a password or a token anywhere."""

    url: str
    node: bool = False

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> NotifyAddRequest:
        known_fields(r, "url", "node")
        url = (text(r, "url", required=True) or "").strip()
        if not url:
            raise BadRequest("give the URL to be told at, e.g. ntfy://ntfy.sh/TOPIC or json://host/path")
        if len(url) > URL_MOST:
            raise BadRequest(f"the URL is {len(url)} characters, more than a notification URL may have ({URL_MOST})")
        if not url.isprintable():
            raise BadRequest("the URL holds a control character or a line break: write it on one line")
        return cls(url, r.flag("node", False))

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "node": self.node}


@dataclass(frozen=True)
class NotifyRemoveRequest:
    """Forget the caller's notification URL ``number``, as ``notify list`` numbers them."""

    number: int

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> NotifyRemoveRequest:
        known_fields(r, "number")
        return cls(whole(r, "number", 1, 10_000, "a URL's number as notify list gives it"))

    def to_json(self) -> dict[str, Any]:
        return {"number": self.number}


@dataclass(frozen=True)
class NotifyUrl:
    """One of the caller's notification URLs, as it may be shown: secrets masked."""

    number: int
    shown: str
    #: an operator's URL for the node's events
    node: bool = False
    #: since when and why sending to it fails; None while it works (or was not tried)
    failing: Optional[str] = None


@dataclass(frozen=True)
class NotifyList:
    """Where the caller is told what concerns them: their URLs, and whether the
    node writes to their terminals (where they allow messages), and the most URLs one account keeps."""

    urls: tuple[NotifyUrl, ...]
    terminals: bool
    most: int
