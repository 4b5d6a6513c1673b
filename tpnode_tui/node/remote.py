"""The node as served by its agent, over the agent's Unix socket (or a bridge to it).

Every answer is the agent's; nothing is decided here. An error arrives as the
agent's one line with its kind and exit code, and is raised as the same
exception the in-process node would have raised, so the CLI and the
dashboard report it the same way whichever node they talk to.

This is the whole of what a command needs to ask an agent, so it imports
nothing of the node's own machinery (service, allocator, runtimes, probes):
``tpnode-tui status`` through the agent costs a Python start, a connection
and the answer.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, AsyncIterator, Callable, NoReturn, Optional

from tpnode_tui.host.identity import user_name
from tpnode_tui.model.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    JobNotFound,
    NeverFits,
    NoCapacity,
    NotAllowed,
    RuntimeUnavailable,
    TpnodeError,
)
from tpnode_tui.model.jobs import JobState, Launched, QueuedLaunch
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.views import Drain, EvictReport
from tpnode_tui.node.http import Connector, HttpClient, ProtocolError, Unreachable, unix_blocking
from tpnode_tui.port.types import (
    AgentUnavailable,
    Cancelled,
    LaunchRequest,
    LaunchResult,
    NodeView,
    OverQuota,
    Reading,
    ReserveRequest,
    You,
)
from tpnode_tui.port.wire import (
    Reader,
    WireError,
    drain_from_json,
    event_from_json,
    evict_from_json,
    history_from_json,
    job_from_json,
    launched_from_json,
    queued_from_json,
    snapshot_from_json,
)

_KINDS: dict[str, type[TpnodeError]] = {
    cls.__name__: cls
    for cls in (
        BadRequest,
        ConfigError,
        Conflict,
        JobNotFound,
        NeverFits,
        NoCapacity,
        NotAllowed,
        OverQuota,
        RuntimeUnavailable,
        Cancelled,
        TpnodeError,
    )
}

#: what the kernel says when this account may not open the socket (or a directory above it)
_FORBIDDEN = (errno.EACCES, errno.EPERM)


class AgentForbidden(NotAllowed):
    """This account may not reach the agent at all (permission denied on its
    socket). Not an AgentUnavailable: an agent is likely there, so serving the
    node in this process instead would make a second record of its cards."""


def _error(doc: Any, status: int) -> TpnodeError:
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        cls = _KINDS.get(str(doc.get("kind")), TpnodeError)
        error = cls(doc["error"])
        error.worded = True
        return error
    return TpnodeError(f"the agent answered HTTP {status} without saying why")


def _you(doc: Any) -> You:
    r = Reader(doc, "you")
    limit = r.doc.get("card_limit")
    if limit is not None and not isinstance(limit, int):
        raise WireError("you.card_limit is not a whole number")
    return You(
        user=r.text("user"),
        uid=r.whole("uid"),
        operator=r.flag("operator"),
        cards_held=r.whole("cards_held", 0),
        card_limit=limit,
    )


def _seconds(value: float) -> str:
    """Seconds for a query string: plain digits, never an exponent ("1.0368e+06"
    has a "+", which a query string reads as a space)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _view(doc: Any) -> NodeView:
    r = Reader(doc, "reading")
    snap = doc.get("snapshot")
    reading = Reading(
        seq=r.whole("seq"),
        snapshot=None if snap is None else snapshot_from_json(snap),
        error=r.opt_text("error"),
        stale_since=r.opt_number("stale_since"),
    )
    return NodeView(reading, _you(doc.get("you")))


def _json(text: bytes, where: str, status: int) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TpnodeError(f"the agent at {where} answered something that is not JSON (HTTP {status})") from None


class AgentNode:
    """The node's agent at ``socket_path``; :meth:`through` reaches it by another way.

    ``blocking``: every call blocks, and none needs an event loop; run them
    with :func:`~.http.straight`. For a command that asks one question: the
    dashboard, which goes on drawing while it waits, uses the default."""

    in_process = False
    outlives_client = True

    def __init__(self, socket_path: Path | str, *, blocking: bool = False, connect_timeout_s: float = 5.0) -> None:
        path = str(socket_path)
        if blocking:
            connect = unix_blocking(path, connect_timeout_s)
        else:
            from tpnode_tui.node.aiostream import unix

            connect = unix(path, connect_timeout_s)
        self._setup(connect, address=path, where=f"agent at {path}", sends_env=True)

    @classmethod
    def through(cls, connect: Connector, *, address: str, where: str, sends_env: bool) -> AgentNode:
        """The agent reached through ``connect`` (a bridge to its socket).
        ``sends_env`` False: this machine's environment means nothing there."""
        node = cls.__new__(cls)
        node._setup(connect, address=address, where=where, sends_env=sends_env)
        return node

    def _setup(self, connect: Connector, *, address: str, where: str, sends_env: bool) -> None:
        #: the agent as an error names it
        self.address = address
        self.where = where
        #: whether a launch carries this process's environment and working directory
        self.sends_env = sends_env
        self._http = HttpClient(connect)

    def _gone(self, e: Unreachable) -> NoReturn:
        """The error that says why no answer came: in the other end's words
        where it gave them (a bridge over SSH), else as this side saw it."""
        if e.forbidden:
            raise AgentForbidden(str(e)) from None
        if e.whole:
            raise AgentUnavailable(str(e)) from None
        cause = e.cause
        if isinstance(cause, OSError) and cause.errno in _FORBIDDEN:
            raise AgentForbidden(
                f"this account ({user_name(os.getuid())}) may not open the node's agent socket "
                f"{self.address} (permission denied on it or on a directory above it): the node's "
                "operator decides which accounts may reach the agent"
            ) from None
        raise AgentUnavailable(
            f"no agent answers at {self.address} ({e}); start it (systemctl start "
            "tpnode-tui-agent) or ask the node's operator"
        ) from None

    async def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        try:
            answer = await self._http.request(method, path, data)
        except Unreachable as e:
            self._gone(e)
        except ProtocolError as e:
            raise TpnodeError(f"the agent at {self.address} answered something that is not HTTP ({e})") from None
        doc = _json(answer.body, self.address, answer.status)
        if answer.status >= 400:
            raise _error(doc, answer.status)
        if not isinstance(doc, dict):
            raise WireError("the agent's answer is not a JSON object")
        return doc

    async def check(self) -> None:
        """Ask the agent whether it answers: AgentUnavailable, saying why, when it
        does not; AgentForbidden where this account may not reach it."""
        await self._call("GET", "/v1/whoami")

    async def answers(self) -> bool:
        """Whether an agent answers now (AgentForbidden is not "no agent": it is raised)."""
        try:
            await self.check()
        except AgentUnavailable:
            return False
        return True

    async def _lines(self, path: str, opened: Optional[Callable[[], None]] = None) -> AsyncIterator[bytes]:
        """A stream's lines until it ends; AgentUnavailable when it cannot be had
        or breaks, which is how an agent that stopped or died looks from here.
        ``opened`` is called once the agent has taken the request."""
        try:
            async with self._http.stream(path) as (status, lines):
                if status >= 400:
                    body = b"".join([line async for line in lines])
                    raise _error(_json(body, self.address, status), status)
                if opened is not None:
                    opened()
                try:
                    async for line in lines:
                        yield line
                except Unreachable as e:  # cut mid-stream: the agent stopped or died
                    self._gone(Unreachable("it went away mid-stream", e.cause))
        except Unreachable as e:
            self._gone(e)
        except ProtocolError as e:
            raise TpnodeError(f"the agent at {self.address} sent something that is not HTTP ({e})") from None
        self._gone(Unreachable("the agent closed the stream"))

    async def status(self) -> NodeView:
        doc = await self._call("GET", "/v1/snapshot")
        you = _you(doc.pop("you", None))
        doc.pop("via", None)
        return NodeView(Reading(seq=0, snapshot=snapshot_from_json(doc)), you)

    async def views(self) -> AsyncIterator[NodeView]:
        """The agent's readings as it makes them. Raises AgentUnavailable when
        the agent cannot be reached or goes away mid-stream."""
        async for line in self._lines("/v1/stream"):
            yield _view(_json(line, self.address, 200))

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        """A process job runs as the caller, with the environment and working
        directory of the shell that asked, as a launch in-process would: a
        request that names none carries this process's (where they mean
        something to the agent: on its own machine)."""
        env, cwd = request.env, request.cwd
        if self.sends_env:
            env = env if env is not None else tuple(os.environ.items())
            cwd = cwd or os.getcwd()
        body: dict[str, Any] = {
            "cards": request.cards,
            "command": list(request.command),
            "image": request.image,
            "run_id": request.run_id,
            "owner": request.owner,
            "cwd": cwd,
            "queue": request.queue,
            "env": None if env is None else dict(env),
        }
        # only when asked for: an older agent refuses a key it does not know
        if request.slice is not None:
            body["slice"] = request.slice
        if request.placement is not None:
            body["placement"] = request.placement
        doc = await self._call("POST", "/v1/launch", body)
        if "queued" in doc:
            return LaunchResult(queued=queued_from_json(doc["queued"]))
        return LaunchResult(launched=launched_from_json(doc.get("launched")))

    async def reserve(self, request: ReserveRequest) -> Launched:
        body: dict[str, Any] = {
            "cards": request.cards,
            "duration_s": request.duration_s,
            "run_id": request.run_id,
            "owner": request.owner,
        }
        if request.slice is not None:
            body["slice"] = request.slice
        if request.placement is not None:
            body["placement"] = request.placement
        doc = await self._call("POST", "/v1/reserve", body)
        return launched_from_json(doc.get("launched"))

    async def extend(self, run_id: str, duration_s: float) -> JobState:
        doc = await self._call("POST", "/v1/extend", {"run_id": run_id, "duration_s": duration_s})
        return job_from_json(doc.get("job"))

    async def stop(self, run_id: str) -> JobState:
        return job_from_json((await self._call("POST", "/v1/stop", {"run_id": run_id})).get("job"))

    async def reclaim(self, run_id: Optional[str]) -> list[JobState]:
        doc = await self._call("POST", "/v1/reclaim", {"run_id": run_id})
        return [job_from_json(j) for j in Reader(doc, "answer").items("removed")]

    async def cancel(self, run_id: str) -> QueuedLaunch:
        doc = await self._call("POST", "/v1/queue/cancel", {"run_id": run_id})
        return queued_from_json(doc.get("cancelled"))

    async def queued(self) -> tuple[QueuedLaunch, ...]:
        r = Reader(await self._call("GET", "/v1/queue"), "answer")
        return tuple(queued_from_json(q, "queued launch") for q in r.items("queue"))

    async def audit(self, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        path = "/v1/audit" if since_s is None else f"/v1/audit?since={_seconds(since_s)}"
        r = Reader(await self._call("GET", path), "answer")
        return [e for e in r.items("entries") if isinstance(e, dict)], r.flag("all", False)

    async def drain(self, card: int, reason: str) -> Drain:
        return drain_from_json((await self._call("POST", "/v1/drain", {"card": card, "reason": reason})).get("drain"))

    async def undrain(self, card: int) -> Drain:
        return drain_from_json((await self._call("POST", "/v1/undrain", {"card": card})).get("drain"))

    async def evict(
        self,
        card: int,
        pid: Optional[int] = None,
        *,
        kill: bool = False,
        dry_run: bool = False,
        started_at: Optional[float] = None,
    ) -> EvictReport:
        doc = await self._call(
            "POST", "/v1/evict", {"card": card, "pid": pid, "kill": kill, "dry_run": dry_run, "started_at": started_at}
        )
        return evict_from_json(doc.get("evict"))

    @staticmethod
    def _events_query(since_s: Optional[float], card: Optional[int], **more: str) -> str:
        query = {
            **({} if since_s is None else {"since": _seconds(since_s)}),
            **({} if card is None else {"card": str(card)}),
            **more,
        }
        return "/v1/events" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")

    async def events(self, since_s: Optional[float] = None, card: Optional[int] = None) -> list[dict[str, Any]]:
        r = Reader(await self._call("GET", self._events_query(since_s, card)), "answer")
        return [event_from_json(e, f"answer.entries[{n}]") for n, e in enumerate(r.items("entries"))]

    async def follow_events(
        self, card: Optional[int] = None, since_s: Optional[float] = None, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The agent's log as it is written. Raises AgentUnavailable when the
        agent cannot be reached or goes away."""
        async for line in self._lines(self._events_query(since_s, card, follow="true"), opened):
            yield event_from_json(_json(line, self.address, 200))

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        path = "/v1/history" if card is None else f"/v1/history?card={card}"
        return history_from_json(await self._call("GET", path))

    async def close(self) -> None:
        await self._http.close()
