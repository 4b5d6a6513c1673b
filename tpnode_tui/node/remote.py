"""The node as served by its agent, over the agent's Unix socket.

Every answer is the agent's; nothing is decided here. An error arrives as the
agent's one line with its kind and exit code, and is raised as the same
exception the in-process node would have raised, so the CLI and the
dashboard report it the same way whichever node they talk to.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

import aiohttp

from ..model import (
    BadRequest,
    ConfigError,
    Conflict,
    Drain,
    EvictReport,
    JobNotFound,
    JobState,
    Launched,
    NeverFits,
    NoCapacity,
    NotAllowed,
    QueuedLaunch,
    RuntimeUnavailable,
    Sample,
    TpnodeError,
)
from ..service import (
    Cancelled,
    LaunchRequest,
    LaunchResult,
    OverQuota,
    Reading,
    ReserveRequest,
    You,
)
from ..wire import (
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
from .base import NodeView

#: the longest line one streamed reading may take (a 1024-card node is far below it)
MAX_LINE = 64 * 1024 * 1024

_KINDS: dict[str, type[TpnodeError]] = {cls.__name__: cls for cls in (
    BadRequest, ConfigError, Conflict, JobNotFound, NeverFits, NoCapacity, NotAllowed,
    OverQuota, RuntimeUnavailable, Cancelled, TpnodeError)}


class AgentUnavailable(TpnodeError):
    """No agent answers at the socket (not running, restarting, or not reachable)."""


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
    return You(user=r.text("user"), uid=r.whole("uid"), operator=r.flag("operator"),
               cards_held=r.whole("cards_held", 0), card_limit=limit)


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Whole lines from a stream, however it was cut into chunks; a line past
    MAX_LINE is an agent gone wrong, not a reading to wait for."""
    buffer = b""
    async for chunk in content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
        if len(buffer) > MAX_LINE:
            raise WireError(f"the agent sent a line longer than {MAX_LINE} bytes")


def _view(doc: Any) -> NodeView:
    r = Reader(doc, "reading")
    snap = doc.get("snapshot")
    reading = Reading(seq=r.whole("seq"), snapshot=None if snap is None else snapshot_from_json(snap),
                      error=r.opt_text("error"), stale_since=r.opt_number("stale_since"))
    return NodeView(reading, _you(doc.get("you")))


class AgentNode:
    via = "agent"

    def __init__(self, socket_path: Path, *, connect_timeout_s: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self.connect_timeout_s = connect_timeout_s
        self._session: Optional[aiohttp.ClientSession] = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=str(self.socket_path)),
                base_url="http://tpnode-agent",
                timeout=aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s),
            )
        return self._session

    def _gone(self, e: BaseException) -> AgentUnavailable:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return AgentUnavailable(
            f"no agent answers at {self.socket_path} ({why}); start it (systemctl start "
            "tpnode-tui-agent) or ask the node's operator")

    async def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        try:
            async with self._client().request(method, path, json=body) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientConnectionError, OSError) as e:
            raise self._gone(e) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            raise TpnodeError(f"the agent at {self.socket_path} answered something that is not "
                              f"JSON (HTTP {status})") from None
        if status >= 400:
            raise _error(doc, status)
        if not isinstance(doc, dict):
            raise WireError("the agent's answer is not a JSON object")
        return doc

    async def answers(self) -> bool:
        """Whether an agent answers at the socket now."""
        if not self.socket_path.exists():
            return False
        try:
            await self._call("GET", "/v1/whoami")
        except AgentUnavailable:
            return False
        return True

    async def status(self) -> NodeView:
        doc = await self._call("GET", "/v1/snapshot")
        you = _you(doc.pop("you", None))
        doc.pop("via", None)
        return NodeView(Reading(seq=0, snapshot=snapshot_from_json(doc)), you)

    async def views(self) -> AsyncIterator[NodeView]:
        """The agent's readings as it makes them. Raises AgentUnavailable when
        the agent cannot be reached or goes away mid-stream."""
        try:
            async with self._client().get("/v1/stream") as response:
                if response.status >= 400:
                    raise _error(await response.json(content_type=None), response.status)
                async for line in _lines(response.content):
                    yield _view(json.loads(line))
        except aiohttp.ClientPayloadError:  # cut mid-stream: the agent stopped or died
            raise self._gone(ConnectionResetError("it went away mid-stream")) from None
        except (aiohttp.ClientConnectionError, OSError) as e:
            raise self._gone(e) from None
        raise self._gone(ConnectionResetError("the agent closed the stream"))

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        body: dict[str, Any] = {
            "cards": request.cards, "command": list(request.command), "image": request.image,
            "run_id": request.run_id, "owner": request.owner, "cwd": request.cwd,
            "queue": request.queue, "env": None if request.env is None else dict(request.env),
        }
        doc = await self._call("POST", "/v1/launch", body)
        if "queued" in doc:
            return LaunchResult(queued=queued_from_json(doc["queued"]))
        return LaunchResult(launched=launched_from_json(doc.get("launched")))

    async def reserve(self, request: ReserveRequest) -> Launched:
        doc = await self._call("POST", "/v1/reserve", {
            "cards": request.cards, "duration_s": request.duration_s,
            "run_id": request.run_id, "owner": request.owner})
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
        path = "/v1/audit" if since_s is None else f"/v1/audit?since={since_s:g}"
        r = Reader(await self._call("GET", path), "answer")
        return [e for e in r.items("entries") if isinstance(e, dict)], r.flag("all", False)

    async def drain(self, card: int, reason: str) -> Drain:
        return drain_from_json((await self._call("POST", "/v1/drain", {"card": card, "reason": reason})).get("drain"))

    async def undrain(self, card: int) -> Drain:
        return drain_from_json((await self._call("POST", "/v1/undrain", {"card": card})).get("drain"))

    async def evict(self, card: int, pid: Optional[int] = None, *, kill: bool = False,
                    dry_run: bool = False, started_at: Optional[float] = None) -> EvictReport:
        doc = await self._call("POST", "/v1/evict", {"card": card, "pid": pid, "kill": kill, "dry_run": dry_run,
                                                     "started_at": started_at})
        return evict_from_json(doc.get("evict"))

    @staticmethod
    def _events_query(since_s: Optional[float], card: Optional[int], **more: str) -> str:
        query = {**({} if since_s is None else {"since": f"{since_s:g}"}),
                 **({} if card is None else {"card": str(card)}), **more}
        return "/v1/events" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")

    async def events(self, since_s: Optional[float] = None, card: Optional[int] = None) -> list[dict[str, Any]]:
        r = Reader(await self._call("GET", self._events_query(since_s, card)), "answer")
        return [event_from_json(e, f"answer.entries[{n}]") for n, e in enumerate(r.items("entries"))]

    async def follow_events(self, card: Optional[int] = None, since_s: Optional[float] = None,
                            opened: Optional[Callable[[], None]] = None) -> AsyncIterator[dict[str, Any]]:
        """The agent's log as it is written. Raises AgentUnavailable when the
        agent cannot be reached or goes away."""
        try:
            async with self._client().get(self._events_query(since_s, card, follow="true")) as response:
                if response.status >= 400:
                    raise _error(await response.json(content_type=None), response.status)
                if opened is not None:
                    opened()
                async for line in _lines(response.content):
                    yield event_from_json(json.loads(line))
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as e:
            raise self._gone(e) from None
        raise self._gone(ConnectionResetError("the agent closed the stream"))

    async def history(self, card: Optional[int] = None) -> dict[int, list[Sample]]:
        path = "/v1/history" if card is None else f"/v1/history?card={card}"
        return history_from_json(await self._call("GET", path))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def launch_environment() -> tuple[tuple[str, str], ...]:
    """This shell's environment, as a launch through the agent carries it to the job."""
    return tuple(os.environ.items())
