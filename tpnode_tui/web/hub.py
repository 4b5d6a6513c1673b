"""The one follow that feeds every browser: the node's readings (or the fleet's Redis) read once,
the page worded once per change, and each open page sent the newest.

A hundred open pages cost the node's agent what one does: one stream of its
readings, and the usage asked once a minute, whoever is looking. Each
reading is hidden (other accounts' commands) and worded once; when its words
are the last ones sent, only its time goes out (a ``fresh`` event of a few
bytes), so a quiet node sends next to nothing. A page that reads slowly
holds no queue: it is sent the newest page when it is ready for one, never
a backlog.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import AsyncGenerator, Callable, Optional

from tpnode_tui.fleet.follow import FleetFollower, FleetSource
from tpnode_tui.fleet.record import fleet_json
from tpnode_tui.model.errors import TpnodeError, error_line
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.node.follow import Follower
from tpnode_tui.port.node import Node
from tpnode_tui.port.wire.snapshot import snapshot_to_json
from tpnode_tui.text.printable import printable, printable_view
from tpnode_tui.text.status import status_lines
from tpnode_tui.web.hidden import hide_others
from tpnode_tui.web.page import USAGE_SPANS, NodeShown, UsageShown, fleet_lines, fleet_page, node_page

log = logging.getLogger(__name__)

#: how often the node's usage (from its agent's ledger) is asked again
USAGE_EVERY_S = 60.0
#: a comment sent to a page that has had nothing for this long, so a proxy keeps the stream open
KEEPALIVE_S = 15.0
#: how soon a page that lost its stream asks again (the browser's own retry)
RETRY_MS = 1000


@dataclass(frozen=True)
class Answer:
    """A route's answer as sent: its status, type and body."""

    status: int
    content_type: str
    body: bytes


def _json_answer(doc: object, status: int = 200) -> Answer:
    return Answer(status, "application/json", json.dumps(doc, indent=2).encode())


def _error_answer(message: str, since: Optional[float]) -> Answer:
    """What ``/api/state.json`` says while nothing current can be read: the one line a command would say."""
    return _json_answer({"error": message, "since": since}, status=503)


class Hub:
    """The newest page, and every open page waiting for the next.

    ``page`` is the page's words; ``taken_at`` the moment they describe. A new
    page whose words are the last ones is sent as its time only."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._words = b""
        self._taken_at: Optional[float] = None
        #: moves with each new page's words, and with each new time of the same words
        self.version = 0
        self.words_version = 0
        self._changed = asyncio.Event()
        #: pages open now
        self.streams = 0

    def publish(self, page: dict[str, object], taken_at: Optional[float]) -> None:
        words = json.dumps(page, separators=(",", ":"), sort_keys=True).encode()
        if words == self._words and taken_at == self._taken_at:
            return
        if words != self._words:
            self._words = words
            self.words_version += 1
        self._taken_at = taken_at
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _event(self, name: str, doc: bytes) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + doc + b"\n\n"

    def _page_event(self) -> bytes:
        head = json.dumps({"taken_at": self._taken_at, "now": self.clock()}).encode()
        return self._event("page", head[:-1] + b',"page":' + self._words + b"}")

    def _fresh_event(self) -> bytes:
        return self._event("fresh", json.dumps({"taken_at": self._taken_at, "now": self.clock()}).encode())

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """What one open page is sent: the page now, then each change as it comes (its words,
        or only its time), and a keep-alive comment when nothing came for a while."""
        self.streams += 1
        try:
            yield f"retry: {RETRY_MS}\n\n".encode()
            version, words = -1, -1
            while True:
                if version == self.version:
                    changed = self._changed
                    try:
                        await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
                    except asyncio.TimeoutError:
                        yield b": still here\n\n"
                    continue
                if not self._words:  # nothing read yet: the first page is sent when there is one
                    version = self.version
                    continue
                version = self.version
                if words != self.words_version:
                    words = self.words_version
                    yield self._page_event()
                else:
                    yield self._fresh_event()
        finally:
            self.streams -= 1


class NodeHub(Hub):
    """One node, followed once through the port for every page.

    ``uid``: the account this page runs as, whose own commands are shown;
    ``show_commands``: show everyone's (TUNEPLANE_WEB_SHOW_COMMANDS)."""

    def __init__(
        self,
        node: Node,
        *,
        served: str,
        uid: int,
        show_commands: bool = False,
        usage_every_s: float = USAGE_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self.node = node
        self.uid = uid
        self.show_commands = show_commands
        self.usage_every_s = usage_every_s
        self.follower = Follower(node, clock=clock, on_reading=self._read, on_lost=self._lost)
        self.shown = NodeShown(None, served=served)
        #: the follower's last snapshot, as hidden in ``shown``: hidden once however often it is shown
        self._followed: Optional[NodeSnapshot] = None
        #: the JSON and the text of the snapshot shown, made when first asked for
        self._answers: dict[str, Answer] = {}
        self._usage_now = asyncio.Event()

    async def run(self) -> None:
        """Follow the node, and ask for its usage now and then, until cancelled."""
        await asyncio.gather(self.follower.follow(), self._ask_usage())

    def _hidden(self, snap: Optional[NodeSnapshot]) -> Optional[NodeSnapshot]:
        if snap is None or self.show_commands:
            return snap
        return hide_others(snap, self.uid)

    def _read(self, first: bool) -> None:
        f = self.follower
        back = self.shown.agent_gone  # the agent answers again: its usage is asked again too
        snap = self.shown.snapshot if f.snapshot is self._followed else self._hidden(f.snapshot)
        self._followed = f.snapshot
        self._show(replace(self.shown, snapshot=snap, stale_since=f.stale_since, stale_error=f.stale_error))
        if first or back:
            self._usage_now.set()

    def _lost(self) -> None:
        f = self.follower
        self._show(replace(self.shown, stale_since=f.stale_since, stale_error=f.stale_error, agent_gone=f.gone_agent))

    def _show(self, shown: NodeShown) -> None:
        if not shown.stale_since:
            shown = replace(shown, agent_gone=False)
        if shown.snapshot is not self.shown.snapshot or shown.stale_since != self.shown.stale_since:
            self._answers = {}
        self.shown = shown
        snap = shown.snapshot
        self.publish(node_page(shown, self.clock()), None if snap is None else snap.taken_at)

    async def _ask_usage(self) -> None:
        """The usage table's reports, asked once for every page: at the first reading, then every
        ``usage_every_s``. A node that keeps no ledger (the demo) says so once, in its own words."""
        while True:
            try:
                await asyncio.wait_for(self._usage_now.wait(), self.usage_every_s)
            except asyncio.TimeoutError:
                pass
            self._usage_now.clear()
            usage = await self._usage()
            self._show(replace(self.shown, usage=usage))

    async def _usage(self) -> UsageShown:
        now = self.clock()
        snap = self.shown.snapshot
        held = [j.started_at for j in (snap.jobs if snap else ()) if j.live and j.kind == "reservation"]
        since = min([t for t in held if t is not None] + [now - USAGE_SPANS[-1][1]])
        try:
            spans = await asyncio.gather(*(self.node.usage(now - length, now, "user") for _, length in USAGE_SPANS))
            jobs = await self.node.usage(since, now, "job") if held else None
        except TpnodeError as e:
            return UsageShown(now, problem=printable(error_line(e)))
        except Exception as e:  # a bug of ours: said on the page, with the traceback in the log
            log.warning("could not read the node's usage", exc_info=True)
            return UsageShown(now, problem=printable(f"{type(e).__name__}: {e}"))
        return UsageShown(now, tuple(printable_view(r) for r in spans), printable_view(jobs))

    def state_json(self) -> Answer:
        """``status --json``'s document of the snapshot shown (other accounts' commands hidden)."""
        if "json" not in self._answers:
            self._answers["json"] = self._state_json()
        return self._answers["json"]

    def _state_json(self) -> Answer:
        shown, you = self.shown, self.follower.you
        if shown.snapshot is None or shown.stale_since is not None or you is None:
            why = shown.stale_error or "the node has not been read yet"
            return _error_answer(why, shown.stale_since)
        via = "local" if self.node.in_process else "agent"
        return _json_answer(snapshot_to_json(shown.snapshot) | {"via": via, "you": asdict(you)})

    def state_text(self) -> Answer:
        """``status``'s text of the snapshot shown, with a line saying it is stale while it is."""
        if "text" not in self._answers:
            shown = self.shown
            lines = [] if shown.stale_since is None else [f"stale: {shown.stale_error}", ""]
            if shown.snapshot is not None:
                lines += status_lines(shown.snapshot, self.clock(), note=f"served by: {shown.served}")
            elif not lines:
                lines = ["the node has not been read yet"]
            self._answers["text"] = Answer(200, "text/plain; charset=utf-8", "\n".join(lines + [""]).encode())
        return self._answers["text"]


class FleetHub(Hub):
    """The fleet, read once from its Redis for every page: on a timer and at each node's notice."""

    def __init__(self, source: FleetSource, *, interval: float, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.follower = FleetFollower(source, interval=interval, clock=clock, on_read=self._read)

    async def run(self) -> None:
        await asyncio.gather(self.follower.follow(), self.follower.notices())

    def _read(self) -> None:
        f = self.follower
        page = fleet_page(f.fleet, f.error, f.stale_since, f.source.safe_url, self.clock())
        self.publish(page, None if f.fleet is None else f.fleet.read_at)

    def state_json(self) -> Answer:
        """``fleet --json``'s document, as last read."""
        f = self.follower
        if f.fleet is None or f.error is not None:
            return _error_answer(printable(f.error or "the fleet has not been read yet"), f.stale_since)
        return _json_answer(fleet_json(f.fleet))

    def state_text(self) -> Answer:
        f = self.follower
        lines = [] if f.error is None else [printable(f"stale: {f.error}"), ""]
        lines += ["the fleet has not been read yet"] if f.fleet is None else fleet_lines(f.fleet, self.clock())
        return Answer(200, "text/plain; charset=utf-8", "\n".join(lines + [""]).encode())
