"""The agent's local API: versioned JSON over HTTP/1.1 on a Unix socket.

Who is asking comes from the kernel (``SO_PEERCRED`` on the accepted socket),
never from the request: a body that names an owner is a request to act for
someone, which only an operator may make. Every error is an HTTP status and
the same one line the CLI would print, with the exit code the CLI exits with:

    {"error": "card 3 is held by rsv-7 of alice; only alice or ...", "exit_code": 77, "kind": "NotAllowed"}

Malformed input (not JSON, wrong types, unknown fields, a body over 64 KiB)
is a 4xx with a line saying what is wrong; nothing a client sends reaches
the caller as a traceback, and no client can stop the agent from answering
the others.

``GET  /v1/snapshot``       the node now, exactly ``status --json`` (with ``via`` and ``you``)
``GET  /v1/stream``         every new reading as a line of JSON (newline-delimited), as made
``GET  /v1/whoami``         the caller as the node sees them
``GET  /v1/audit``          the node's log of actions (``?since=SECONDS``); your own unless operator
``POST /v1/launch``         ``{cards, command, image, run_id, owner, env, cwd, queue, slice, placement}``
``POST /v1/reserve``        ``{cards, duration_s, run_id, owner, slice, placement}`` (``slice``: a MIG profile, 1 card)
``POST /v1/extend``         ``{run_id, duration_s}``
``POST /v1/stop``           ``{run_id}``
``POST /v1/reclaim``        ``{run_id}`` (null: every exited job the caller may remove)
``GET  /v1/events``         the node's log (``?since=SECONDS&card=N``); ``&follow=true``: then each
                            new entry as a line of JSON, as it is written
``GET  /v1/history``        each card's last hour (``?card=N``: one card's)
``POST /v1/drain``          ``{card, reason}`` (operators)
``POST /v1/undrain``        ``{card}`` (operators; refused while the card reports a problem)
``POST /v1/evict``          ``{card, pid, kill, dry_run, started_at}`` (operators)
``GET  /v1/queue``          launches queued or waiting
``POST /v1/queue/cancel``   ``{run_id}``
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from tpnode_tui.host.identity import Caller, Operators, peer_of
from tpnode_tui.model.errors import (
    BadRequest,
    Conflict,
    JobNotFound,
    NeverFits,
    NoCapacity,
    NotAllowed,
    RuntimeUnavailable,
    TpnodeError,
    error_line,
    exit_code,
)
from tpnode_tui.port.types import Cancelled, LaunchRequest, Reading, ReserveRequest
from tpnode_tui.port.wire import (
    Reader,
    WireError,
    drain_to_json,
    evict_to_json,
    history_to_json,
    job_to_json,
    launched_to_json,
    queued_to_json,
    snapshot_to_json,
)
from tpnode_tui.service import NodeService

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS: tuple[tuple[type[TpnodeError], int], ...] = (
    (BadRequest, 400),
    (WireError, 400),
    (NotAllowed, 403),
    (JobNotFound, 404),
    (Conflict, 409),
    (Cancelled, 409),
    (NeverFits, 422),
    (NoCapacity, 503),
    (RuntimeUnavailable, 503),
)


def error_response(status: int, message: str, code: int, kind: str) -> web.Response:
    return web.json_response({"error": message, "exit_code": code, "kind": kind}, status=status)


def _for_error(e: TpnodeError) -> web.Response:
    status = next((s for cls, s in _STATUS if isinstance(e, cls)), 500)
    code = 2 if isinstance(e, WireError) else exit_code(e)
    kind = "BadRequest" if isinstance(e, WireError) else type(e).__name__
    return error_response(status, error_line(e), code, kind)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as the one-line JSON error; a bug of ours is logged, never sent."""
    try:
        return await handler(request)
    except TpnodeError as e:
        return _for_error(e)
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, f"the request body is over {MAX_BODY // 1024} KiB", 2, "BadRequest")
    except web.HTTPException as e:
        if e.status == 404:
            return error_response(
                404, f"no such endpoint: {request.method} {request.path} (this agent serves /v1/...)", 2, "BadRequest"
            )
        if e.status == 405:
            return error_response(405, f"{request.path} does not take {request.method}", 2, "BadRequest")
        return error_response(e.status, e.reason or "bad request", 2, "BadRequest")
    except Exception:
        log.exception("internal error answering %s %s", request.method, request.path)
        return error_response(500, "internal error in the agent; its log has the details", 1, "TpnodeError")


class Api:
    """The handlers, over one :class:`NodeService`."""

    def __init__(self, service: NodeService, operators: Operators) -> None:
        self.service = service
        self.operators = operators
        #: the latest reading's snapshot as JSON text, shared by every stream
        self._encoded: tuple[int, str] = (-1, "null")
        #: the tasks serving streams now: a stream never ends by itself, and
        #: an agent that waited for them would take a minute to stop
        self._streams: set[asyncio.Task[Any]] = set()

    def caller(self, request: web.Request) -> Caller:
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is None:
            raise NotAllowed("the agent cannot tell who is asking (no socket): refused")
        try:
            return peer_of(sock, self.operators)
        except OSError as e:
            raise NotAllowed(f"the agent cannot tell who is asking ({e.strerror or e}): refused") from None

    # ── reading ──────────────────────────────────────────────────────────────

    def _you(self, caller: Caller, reading: Reading) -> dict[str, Any]:
        return asdict(self.service.you(caller, reading.snapshot))

    def _snapshot_text(self, reading: Reading) -> str:
        seq, text = self._encoded
        if seq != reading.seq:
            doc = None if reading.snapshot is None else snapshot_to_json(reading.snapshot)
            text = json.dumps(doc)
            self._encoded = (reading.seq, text)
        return text

    async def snapshot(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        reading = await self.service.current()
        if reading.error is not None or reading.snapshot is None:
            raise RuntimeUnavailable(reading.error or "the agent has not read the node yet; try again")
        doc = snapshot_to_json(reading.snapshot)
        doc.update(via="agent", you=self._you(caller, reading))
        return web.json_response(doc)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        caller = self.caller(request)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None  # a handler always runs in a task
        self._streams.add(task)
        try:
            async for reading in self.service.subscribe():
                head = json.dumps(
                    {
                        "seq": reading.seq,
                        "error": reading.error,
                        "stale_since": reading.stale_since,
                        "you": self._you(caller, reading),
                    }
                )
                line = f'{head[:-1]},"snapshot":{self._snapshot_text(reading)}}}\n'
                try:
                    await response.write(line.encode())
                except (ConnectionResetError, RuntimeError):
                    break  # the dashboard went away
        finally:
            self._streams.discard(task)
        return response

    async def end_streams(self, _app: web.Application) -> None:
        """On stopping: cut every stream, so the agent stops at once; each
        dashboard sees the agent go away and reconnects to the next one."""
        for task in list(self._streams):
            task.cancel()

    async def whoami(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        return web.json_response(self._you(caller, self.service.reading) | {"pid": caller.pid})

    async def audit(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        # the log files are read in a thread: a long log must not stall everyone else's requests
        entries, everyone = await asyncio.to_thread(self.service.audit, caller, _since(request))
        return web.json_response({"entries": entries, "all": everyone})

    async def events(self, request: web.Request) -> web.StreamResponse:
        caller = self.caller(request)
        _only_query(request, "since", "card", "follow")
        since, card = _since(request), _card(request)
        follow = request.query.get("follow", "false").lower()
        if follow not in ("true", "false", "1", "0"):
            raise BadRequest(f"follow={follow!r} is not true or false")
        if follow in ("false", "0"):
            return web.json_response({"entries": await asyncio.to_thread(self.service.events, caller, since, card)})
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None  # a handler always runs in a task
        self._streams.add(task)  # a follower never ends by itself: cut it when the agent stops
        try:
            async for entry in self.service.follow_events(caller, card, since):
                try:
                    await response.write((json.dumps(entry) + "\n").encode())
                except (ConnectionResetError, RuntimeError):
                    break  # the follower went away
        finally:
            self._streams.discard(task)
        return response

    async def history(self, request: web.Request) -> web.Response:
        self.caller(request)
        _only_query(request, "card")
        return web.json_response(history_to_json(self.service.card_history(_card(request))))

    async def queue(self, request: web.Request) -> web.Response:
        self.caller(request)
        return web.json_response({"queue": [queued_to_json(q) for q in self.service.queued()]})

    # ── acting ───────────────────────────────────────────────────────────────

    async def _body(self, request: web.Request, *keys: str) -> Reader:
        if request.content_type not in ("application/json", "application/octet-stream", ""):
            raise BadRequest(f"send JSON (Content-Type: application/json), not {request.content_type}")
        raw = await request.read()
        try:
            doc = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except UnicodeDecodeError:
            raise BadRequest("the request body is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise BadRequest(f"the request body is not valid JSON ({e.msg} at column {e.colno})") from None
        return Reader(doc, "request").only(*keys)

    async def launch(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(
            request, "cards", "command", "image", "run_id", "owner", "env", "cwd", "queue", "slice", "placement"
        )
        env_doc = r.doc.get("env")
        env: Optional[tuple[tuple[str, str], ...]] = None
        if env_doc is not None:
            if not isinstance(env_doc, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env_doc.items()
            ):
                raise BadRequest("request.env is not an object of text values")
            env = tuple(env_doc.items())
        req = LaunchRequest(
            cards=r.whole("cards"),
            command=r.texts("command"),
            image=r.opt_text("image"),
            run_id=r.opt_text("run_id"),
            owner=r.text("owner", ""),
            env=env,
            cwd=r.opt_text("cwd"),
            queue=r.flag("queue", False),
            slice=r.opt_text("slice"),
            placement=r.opt_text("placement"),
        )
        result = await self.service.launch(caller, req)
        if result.queued is not None:
            return web.json_response({"queued": queued_to_json(result.queued)}, status=202)
        assert result.launched is not None
        return web.json_response({"launched": launched_to_json(result.launched)})

    async def reserve(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "cards", "duration_s", "run_id", "owner", "slice", "placement")
        req = ReserveRequest(
            cards=r.whole("cards"),
            duration_s=r.number("duration_s"),
            run_id=r.opt_text("run_id"),
            owner=r.text("owner", ""),
            slice=r.opt_text("slice"),
            placement=r.opt_text("placement"),
        )
        return web.json_response({"launched": launched_to_json(await self.service.reserve(caller, req))})

    async def extend(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "run_id", "duration_s")
        job = await self.service.extend(caller, r.text("run_id"), r.number("duration_s"))
        return web.json_response({"job": job_to_json(job)})

    async def stop(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "run_id")
        return web.json_response({"job": job_to_json(await self.service.stop(caller, r.text("run_id")))})

    async def reclaim(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "run_id")
        removed = await self.service.reclaim(caller, r.opt_text("run_id"))
        return web.json_response({"removed": [job_to_json(j) for j in removed]})

    async def drain(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "card", "reason")
        drain = await self.service.drain_card(caller, _card_index(r), r.text("reason"))
        return web.json_response({"drain": drain_to_json(drain)})

    async def undrain(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "card")
        return web.json_response({"drain": drain_to_json(await self.service.undrain_card(caller, _card_index(r)))})

    async def evict(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "card", "pid", "kill", "dry_run", "started_at")
        pid = r.opt_whole("pid")
        if pid is not None and pid <= 0:
            raise BadRequest(f"request.pid is {pid}, not a process id")
        started_at = r.opt_number("started_at")
        if started_at is not None and pid is None:
            raise BadRequest("request.started_at names the start of one process: give its pid too")
        report = await self.service.evict(
            caller,
            _card_index(r),
            pid,
            kill=r.flag("kill", False),
            dry_run=r.flag("dry_run", False),
            started_at=started_at,
        )
        return web.json_response({"evict": evict_to_json(report)})

    async def cancel(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        r = await self._body(request, "run_id")
        return web.json_response({"cancelled": queued_to_json(await self.service.cancel(caller, r.text("run_id")))})


def make_app(service: NodeService, operators: Operators) -> web.Application:
    api = Api(service, operators)
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY)
    app.on_shutdown.append(api.end_streams)
    app.add_routes(
        [
            web.get("/v1/snapshot", api.snapshot),
            web.get("/v1/stream", api.stream),
            web.get("/v1/whoami", api.whoami),
            web.get("/v1/audit", api.audit),
            web.get("/v1/queue", api.queue),
            web.post("/v1/launch", api.launch),
            web.post("/v1/reserve", api.reserve),
            web.post("/v1/extend", api.extend),
            web.post("/v1/stop", api.stop),
            web.post("/v1/reclaim", api.reclaim),
            web.post("/v1/queue/cancel", api.cancel),
            web.get("/v1/events", api.events),
            web.get("/v1/history", api.history),
            web.post("/v1/drain", api.drain),
            web.post("/v1/undrain", api.undrain),
            web.post("/v1/evict", api.evict),
        ]
    )
    return app


def _only_query(request: web.Request, *keys: str) -> None:
    unknown = sorted(set(request.query) - set(keys))
    if unknown:
        raise BadRequest(f"{request.path} does not take {', '.join(unknown)}; it takes {', '.join(keys)}")


def _since(request: web.Request) -> Optional[float]:
    text = request.query.get("since")
    if text is None:
        return None
    try:
        since = float(text)
    except ValueError:
        raise BadRequest(f"since={text!r} is not a number of seconds") from None
    if not since >= 0:
        raise BadRequest(f"since={text!r} is not a number of seconds")
    return since


def _card(request: web.Request) -> Optional[int]:
    text = request.query.get("card")
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise BadRequest(f"card={text!r} is not a card index")
    return int(text)


def _card_index(r: Reader) -> int:
    card = r.whole("card")
    if not 0 <= card < 1_000_000:
        raise BadRequest(f"request.card is {card}, not a card index")
    return card
