"""The agent's post: each notice to its account's terminals and URLs, never holding anyone up.

:meth:`Post.send` only files a notice and returns: nothing the agent does
waits for a terminal or a URL. Each account has its own bounded lane, so one
account whose URL hangs delays only its own notices; sends are children run
as the account and killed at their deadline, and each account is limited per
event and per hour. See docs/architecture.md, section 'Telling each account'.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from tpnode_tui.host.rerun import CLEAN_ENV, rerun_argv
from tpnode_tui.host.terminals import tell_terminals
from tpnode_tui.model.errors import BadRequest, RuntimeUnavailable
from tpnode_tui.model.jobs import RunAs
from tpnode_tui.notify.sender import scheme
from tpnode_tui.state.addresses import Address

log = logging.getLogger(__name__)

SENDER = "tpnode_tui.notify.sender"
#: children sending at once, every account's together
SENDERS = 4
#: the most of a child's answer read: one line of JSON
ANSWER_MOST = 64 * 1024
#: how long a killed child is waited for (one stuck in the kernel is left to it)
REAP_S = 5.0
HOUR = 3600.0


@dataclass(frozen=True)
class Notice:
    """What one account is told of one event: its kind (the table's name for
    it, what the limits count), a title and a text, and Apprise's kind of notice."""

    event: str
    title: str
    text: str
    kind: str = "info"


@dataclass(frozen=True)
class Recipient:
    """An account, as the sender becomes it, and where it is told."""

    account: RunAs
    urls: tuple[Address, ...] = ()
    terminals: bool = True


@dataclass
class _Lane:
    """One account's notices waiting, and how many it lost since the last one filed."""

    waiting: collections.deque[tuple[Recipient, Notice]]
    dropped: int = 0
    over: int = 0
    task: Optional[asyncio.Task[None]] = field(default=None, repr=False)


class Failed(Exception):
    """A send that did not end with an answer: why, in words that quote no URL."""


class Post:
    def __init__(
        self,
        *,
        queue: int,
        urls: int,
        event_per_hour: int,
        account_per_hour: int,
        timeout_s: float,
        clock: Callable[[], float] = time.time,
        senders: int = SENDERS,
    ) -> None:
        self.queue = queue
        self.urls = urls
        self.event_per_hour = event_per_hour
        self.account_per_hour = account_per_hour
        self.timeout_s = timeout_s
        self.clock = clock
        self._lanes: dict[int, _Lane] = {}
        #: (uid, event) and (uid, "") -> the times notices were filed in the last hour
        self._sent: dict[tuple[int, str], collections.deque[float]] = {}
        self._sending = asyncio.Semaphore(senders)
        self._terminals = ThreadPoolExecutor(1, thread_name_prefix="tpnode-tty")
        #: (uid, URL) -> since when and why it fails, for notify list; said once in the log
        self._failing: dict[tuple[int, str], str] = {}

    # ── filing ───────────────────────────────────────────────────────────────

    def send(self, to: Recipient, notice: Notice) -> bool:
        """File ``notice`` for ``to``, unless over its limits; whether it was filed."""
        uid = to.account.uid
        lane = self._lanes.get(uid)
        if lane is None:
            lane = self._lanes[uid] = _Lane(collections.deque(maxlen=self.queue))
        if not self._within(uid, notice.event):
            lane.over += 1
            return False
        if len(lane.waiting) == lane.waiting.maxlen:
            lane.dropped += 1  # the oldest goes
        lost = _lost(lane.dropped, lane.over, self.event_per_hour, self.account_per_hour)
        if lost:  # said by the first notice filed after them
            notice = replace(notice, text=f"{notice.text} ({lost})")
            lane.dropped = lane.over = 0
        lane.waiting.append((to, notice))
        if lane.task is None or lane.task.done():
            lane.task = asyncio.get_running_loop().create_task(self._empty(lane))
        return True

    def _within(self, uid: int, event: str) -> bool:
        """Count a notice against the account's limits of the last hour, if it is within them."""
        now = self.clock()
        kinds = ((uid, event), self.event_per_hour), ((uid, ""), self.account_per_hour)
        for key, most in kinds:
            times = self._sent.setdefault(key, collections.deque(maxlen=most))
            while times and now - times[0] >= HOUR:
                times.popleft()
            if len(times) >= most:
                return False
        for key, _most in kinds:
            self._sent[key].append(now)
        return True

    def failing(self, uid: int) -> dict[str, str]:
        """``uid``'s URLs that fail now -> since when and why."""
        return {url: why for (owner, url), why in self._failing.items() if owner == uid}

    def forget(self, uid: int, url: str) -> None:
        """``uid`` no longer keeps ``url``: nothing is known of it any more."""
        self._failing.pop((uid, url), None)

    # ── sending ──────────────────────────────────────────────────────────────

    async def _empty(self, lane: _Lane) -> None:
        while lane.waiting:
            to, notice = lane.waiting.popleft()
            try:
                await self._deliver(to, notice)
            except Exception:  # noqa: BLE001 (one notice's trouble is never the next one's)
                log.warning("could not send a notice to %s", to.account.user, exc_info=True)

    async def _deliver(self, to: Recipient, notice: Notice) -> None:
        if to.terminals:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(
                self._terminals, tell_terminals, to.account.uid, notice.title, notice.text, self.clock()
            )
        if not to.urls:
            return
        sheet = {"urls": [a.url for a in to.urls], "title": notice.title, "text": notice.text, "kind": notice.kind}
        try:
            answer = await self._ask(to.account, sheet)
            sent = answer.get("sent")
            if not isinstance(sent, list) or len(sent) != len(to.urls):
                raise Failed("the sender's answer could not be read")
        except Failed as e:
            sent, why = [False] * len(to.urls), str(e)
        else:
            why = "the service did not take the notice"
        for address, ok in zip(to.urls, sent):
            self._note(to.account, address, ok is True, why)

    def _note(self, account: RunAs, address: Address, ok: bool, why: str) -> None:
        """Say in the agent's log that a URL fails, once, and once that it works again: by
        its scheme alone, since even the form shown to its owner may hold what is theirs
        to keep (an ntfy topic); ``notify list`` tells them which."""
        key = (account.uid, address.url)
        kind = scheme(address.url) or "a"
        if ok:
            if self._failing.pop(key, None) is not None:
                log.info("notifications to %s's %s URL are sent again", account.user, kind)
            return
        if key not in self._failing:
            # one removed while a notice was on its way to it is noted all the same: the account's
            # oldest go, so no more are ever kept than it may keep URLs
            theirs = [k for k in self._failing if k[0] == account.uid]
            for old in theirs[: max(0, len(theirs) - self.urls + 1)]:
                del self._failing[old]
            since = time.strftime("%H:%M", time.localtime(self.clock()))
            self._failing[key] = f"failing since {since}: {why}"
            log.warning(
                "notifications to %s's %s URL fail: %s; said once, until one is sent (notify list shows which)",
                account.user,
                kind,
                why,
            )

    async def check(self, account: RunAs, url: str) -> str:
        """``url`` as Apprise, run as ``account``, can send to it: its shown form;
        BadRequest saying why not, in words that do not quote it."""
        try:
            answer = await self._ask(account, {"check": url})
        except Failed as e:
            raise RuntimeUnavailable(f"the URL could not be checked: {e}") from None
        shown, refused = answer.get("shown"), answer.get("refused")
        if isinstance(shown, str):
            return shown
        raise BadRequest(refused if isinstance(refused, str) else "Apprise cannot send to that URL")

    async def _ask(self, account: RunAs, sheet: dict[str, Any]) -> dict[str, Any]:
        """One child, run as ``account``, given ``sheet``: its answer, by the deadline or Failed."""
        sheet = {"uid": account.uid, "gid": account.gid, "groups": list(account.groups), **sheet}
        async with self._sending:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *rerun_argv(SENDER),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=CLEAN_ENV,
                    cwd="/",
                    start_new_session=True,
                )
            except OSError as e:
                raise Failed(f"the sender could not be started ({e.strerror})") from None
            try:
                line = await asyncio.wait_for(_talk(proc, json.dumps(sheet).encode()), self.timeout_s)
            except asyncio.TimeoutError:
                raise Failed(f"no answer within {self.timeout_s:g} s, so it was stopped") from None
            finally:
                await _end(proc)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise Failed("the sender ended without an answer")
        return answer

    async def close(self) -> None:
        """Stop sending: what waits is dropped, a child under way is killed."""
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None and not lane.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._terminals.shutdown(wait=False, cancel_futures=True)


async def _talk(proc: asyncio.subprocess.Process, sheet: bytes) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(sheet)
    await proc.stdin.drain()
    proc.stdin.close()
    line = await proc.stdout.read(ANSWER_MOST)
    await proc.wait()
    return line


async def _end(proc: asyncio.subprocess.Process) -> None:
    """Kill the child's whole group if it still runs, and reap it, within a bound."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), REAP_S)


def _lost(dropped: int, over: int, per_event: int, per_account: int) -> str:
    """What the account lost since its last notice, in words; empty when nothing."""
    said = []
    if dropped:
        said.append(f"{dropped} older {_notices(dropped)} dropped: more came than could be sent")
    if over:
        said.append(
            f"{over} {_notices(over)} not sent: over the limit of {per_event} of a kind, {per_account} in all, an hour"
        )
    return "; ".join(said)


def _notices(n: int) -> str:
    return "notice was" if n == 1 else "notices were"
