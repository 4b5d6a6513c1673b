"""What the node tells each account of its events, and whom: one table, NOTICES.

Every entry written to the node's log is heard as it is written; a row of
:data:`NOTICES` follows entries of one kind and names the event, who is told
by role and the title, so a new kind of event becomes a notice by one row.
Sending is the post's (:mod:`tpnode_tui.notify.post`), and only the agent
tells anyone. See docs/architecture.md, section 'Telling each account'.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tpnode_tui.config.sections import NotifySettings
from tpnode_tui.host.identity import Caller, Operators
from tpnode_tui.model.errors import NotAllowed, TpnodeError
from tpnode_tui.model.jobs import RunAs
from tpnode_tui.model.words import cards_words
from tpnode_tui.notify.post import Notice, Post, Recipient
from tpnode_tui.notify.sender import scheme
from tpnode_tui.port.types.notify import NotifyAddRequest, NotifyList, NotifyRemoveRequest, NotifyUrl
from tpnode_tui.service.accounts import account_of
from tpnode_tui.service.journal import Journal
from tpnode_tui.service.readings import Readings
from tpnode_tui.state.addresses import Address, AddressBook, Addresses, too_many
from tpnode_tui.text.printable import printable

log = logging.getLogger(__name__)

#: who is told, by role: the account the entry's job is, or was, held for (``owner_uid``) | the
#: account that asked (an action's ``uid``) | the accounts whose live jobs hold the entry's cards,
#: as last read | the account whose process intrudes (``intruder_uid``) | the operators' URLs for
#: the node's events
OWNER, ASKER, HOLDERS, INTRUDER, OPERATORS = "owner", "asker", "holders", "intruder", "operators"
#: the most entries heard and not yet told: a storm of them loses the oldest
HEARD_MOST = 1000
#: the longest title a notice has
TITLE_MOST = 120


@dataclass(frozen=True)
class Tell:
    """One row: the entries it follows, who is told of them, and the words."""

    #: its name: what the limits count and the docs list
    event: str
    #: the node log's kind of entry it follows
    kind: str
    to: tuple[str, ...]
    #: the title, from the entry's fields ("{run_id}", "{cards}": "card 3")
    title: str
    #: fields the entry must have, with these values
    where: tuple[tuple[str, Any], ...] = ()
    #: Apprise's kind of notice: info, success, warning, failure
    severity: str = "info"
    #: what one role reads after the entry's sentence, from the entry's fields
    then: tuple[tuple[str, str], ...] = ()

    def follows(self, entry: dict[str, Any]) -> bool:
        return entry.get("kind") == self.kind and all(entry.get(k) == v for k, v in self.where)


NOTICES: tuple[Tell, ...] = (
    Tell("ending", "ending", (OWNER,), "reservation {run_id} ends soon", severity="warning"),
    Tell(
        "placed",
        "action",
        (ASKER, OWNER),
        "queued launch {target} placed on {cards}",
        where=(("action", "launch"), ("placed_from", "queue")),
        severity="success",
    ),
    Tell("ended", "ended", (OWNER,), "{job_kind} {run_id} ended"),
    Tell(
        "idle-warning",
        "action",
        (OWNER,),
        "idle reservation {target} is to be released",
        where=(("action", "reclaim-idle"), ("state", "warned")),
        severity="warning",
    ),
    Tell(
        "idle-release",
        "action",
        (OWNER, OPERATORS),
        "idle reservation {target} was released",
        where=(("action", "reclaim-idle"), ("state", "released")),
        severity="warning",
    ),
    Tell("drained", "drain", (HOLDERS, OPERATORS), "{cards} drained", severity="failure"),
    Tell("returned", "undrain", (HOLDERS, OPERATORS), "{cards} back in service", severity="success"),
    Tell(
        "intruder",
        "intruder",
        (INTRUDER, OWNER, OPERATORS),
        "an intruder on {cards}",
        where=(("state", "seen"),),
        severity="warning",
        then=(
            (INTRUDER, "That card is not yours: end pid {pid}, and ask for cards of your own (tpnode-tui reserve)."),
            (OWNER, "An operator can end it: tpnode-tui evict {card} --pid {pid}."),
        ),
    ),
    Tell("xid", "xid", (OPERATORS,), "{cards}: XID {xid}", severity="failure"),
    Tell(
        "health", "health", (OPERATORS,), "{cards} reports a problem", where=(("state", "started"),), severity="failure"
    ),
    Tell(
        "check-failed",
        "check",
        (OPERATORS,),
        "{cards} failed its check",
        where=(("outcome", "failed"),),
        severity="failure",
    ),
)


class _Fields(dict[str, Any]):
    """An entry's fields as a title reads them: each made printable, "?" for one it lacks."""

    def __missing__(self, key: str) -> str:
        return "?"


def words_of(entry: dict[str, Any]) -> _Fields:
    fields = _Fields({k: printable(str(v)) for k, v in entry.items() if v is not None})
    cards = entry.get("cards")
    if isinstance(cards, list) and cards and all(isinstance(c, int) for c in cards):
        fields.update(cards=cards_words(cards), card=str(cards[0]))
    return fields


def notice_of(tell: Tell, entry: dict[str, Any], role: Optional[str]) -> Notice:
    """What ``tell`` says of ``entry`` to one told as ``role``."""
    fields = words_of(entry)
    title = tell.title.format_map(fields)
    then = dict(tell.then).get(role or "")
    text = printable(str(entry.get("message", "")))
    if then:
        text = f"{text}. {then.format_map(fields)}"
    return Notice(tell.event, title if len(title) <= TITLE_MOST else title[: TITLE_MOST - 1] + "…", text, tell.severity)


@dataclass
class _Told:
    """One account told of one entry: on its own channels (as ``role``), and at its URLs for the node's events."""

    role: Optional[str] = None
    node: bool = False


class Notices:
    def __init__(
        self,
        book: AddressBook,
        post: Post,
        *,
        journal: Journal,
        readings: Readings,
        operators: Operators,
        settings: NotifySettings,
        clock: Callable[[], float],
    ) -> None:
        self.book = book
        self.post = post
        self.journal = journal
        self.readings = readings
        self.operators = operators
        self.settings = settings
        self.clock = clock
        self._heard: collections.deque[dict[str, Any]] = collections.deque(maxlen=HEARD_MOST)
        self._task: Optional[asyncio.Task[None]] = None
        #: one URL checked at a time per account: a flood of adds waits for its own
        self._checks: dict[int, asyncio.Lock] = {}
        #: why the URL file could not be read, said once until it changes
        self._trouble: Optional[str] = None
        journal.listeners.append(self.heard)

    # ── hearing the node's log ───────────────────────────────────────────────

    def heard(self, entry: dict[str, Any]) -> None:
        """File an entry some row follows, to be told once the writer has moved on."""
        if not any(tell.follows(entry) for tell in NOTICES):
            return
        self._heard.append(entry)
        if self._task is None or self._task.done():
            try:
                self._task = asyncio.get_running_loop().create_task(self._tell_all())
            except RuntimeError:  # no event loop (a plain call): nobody is served, nobody is told
                self._heard.clear()

    async def _tell_all(self) -> None:
        while self._heard:
            entry = self._heard.popleft()
            try:
                await self._tell(entry)
            except Exception:  # noqa: BLE001 (one entry's trouble never stops the next)
                log.warning("could not tell anyone of a %s entry", entry.get("kind"), exc_info=True)

    async def _tell(self, entry: dict[str, Any]) -> None:
        book = await self._book()
        for tell in NOTICES:
            if not tell.follows(entry):
                continue
            for uid, told in self._told(tell, entry, book).items():
                recipient = self._recipient(uid, told, book.get(uid))
                if recipient is not None:
                    self.post.send(recipient, notice_of(tell, entry, told.role))

    async def _book(self) -> dict[int, Addresses]:
        """Every account's URLs; none, said once in the agent's log, while the file cannot be read
        (terminals are told all the same)."""
        try:
            book = await asyncio.to_thread(self.book.read)
            trouble = None
        except TpnodeError as e:
            book, trouble = {}, str(e)
            if trouble != self._trouble:
                log.warning("notices go to terminals only: %s", trouble)
        self._trouble = trouble
        return book

    def _told(self, tell: Tell, entry: dict[str, Any], book: dict[int, Addresses]) -> dict[int, _Told]:
        """Each account ``tell`` names for ``entry``, and how."""
        told: dict[int, _Told] = {}
        for role in tell.to:
            if role == OPERATORS:
                for uid, kept in book.items():
                    if any(a.node for a in kept.urls):
                        told.setdefault(uid, _Told()).node = True
                continue
            for uid in self._uids(role, entry):
                one = told.setdefault(uid, _Told())
                one.role = one.role or role
        return told

    def _uids(self, role: str, entry: dict[str, Any]) -> set[int]:
        if role == HOLDERS:
            snap = self.readings.raw
            cards = set(entry.get("cards") or ())
            jobs = snap.jobs if snap is not None else ()
            return {j.uid for j in jobs if j.live and j.uid is not None and cards & set(j.cards)}
        field = {OWNER: "owner_uid", ASKER: "uid", INTRUDER: "intruder_uid"}[role]
        uid = entry.get(field)
        return {uid} if isinstance(uid, int) and not isinstance(uid, bool) and uid >= 0 else set()

    def _recipient(self, uid: int, told: _Told, kept: Optional[Addresses]) -> Optional[Recipient]:
        """``uid`` as the post reaches it: its own channels if named for itself, its URLs for the
        node's events while it is an operator; None when there is nowhere to tell it."""
        account = account_of(uid)
        if account is None:
            return None
        node = told.node and self.operators.includes(uid, account.gid, account.groups)
        own = told.role is not None
        urls = tuple(a for a in (kept.urls if kept is not None else ()) if (node if a.node else own))
        terminals = own and self.settings.terminals
        if not urls and not terminals:
            return None
        return Recipient(account, urls, terminals)

    # ── each account's URLs ──────────────────────────────────────────────────

    def _listed(self, uid: int, urls: tuple[Address, ...]) -> NotifyList:
        failing = self.post.failing(uid)
        listed = tuple(NotifyUrl(n, a.shown, a.node, failing.get(a.url)) for n, a in enumerate(urls, 1))
        return NotifyList(listed, self.settings.terminals, self.settings.urls)

    async def listed(self, caller: Caller) -> NotifyList:
        return self._listed(caller.uid, await asyncio.to_thread(self.book.of, caller.uid))

    async def add(self, caller: Caller, request: NotifyAddRequest) -> NotifyList:
        """Keep a URL of the caller's, once Apprise, run as the caller, can send to it.
        The log and the audit say which number and scheme it got, never the URL."""

        async def work() -> NotifyList:
            if request.node and not caller.operator:
                raise NotAllowed(
                    f"{caller.user} may not add a URL for the node's events: only an operator "
                    f"({self.operators.describe()}) may; leave out --node to be told of your own"
                )
            most = self.settings.urls
            if len(await asyncio.to_thread(self.book.of, caller.uid)) >= most:  # before a child is started for it
                raise too_many(caller.user, most)
            account = RunAs(caller.uid, caller.gid, caller.groups, caller.user, "/")
            async with self._checks.setdefault(caller.uid, asyncio.Lock()):
                shown = await self.post.check(account, request.url)
            address = Address(request.url, shown, request.node, self.clock())
            urls = await asyncio.to_thread(self.book.add, caller.uid, caller.user, address, most)
            return self._listed(caller.uid, urls)

        def done(listed: NotifyList) -> str:
            kind = scheme(request.url) or "a"
            node = " for the node's events" if request.node else ""
            return f"{caller.user} added notification URL {len(listed.urls)}, a {kind} URL{node}"

        return await self.journal.audited(caller, "notify-add", "notification URL", work(), done)

    async def remove(self, caller: Caller, request: NotifyRemoveRequest) -> NotifyList:
        number = request.number

        async def work() -> NotifyList:
            gone, left = await asyncio.to_thread(self.book.remove, caller.uid, number)
            self.post.forget(caller.uid, gone.url)
            return self._listed(caller.uid, left)

        return await self.journal.audited(
            caller,
            "notify-remove",
            f"notification URL {number}",
            work(),
            lambda _listed: f"{caller.user} removed notification URL {number}",
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.post.close()
