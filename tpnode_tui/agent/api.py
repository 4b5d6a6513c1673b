"""The agent's door: versioned JSON over HTTP/1.1 on a Unix socket, made from the port's table.

The agent runs as root for accounts that do not trust each other, so every
request passes here before anything holds, keeps or echoes it: each route is
an operation of :data:`tpnode_tui.port.operations.OPERATIONS`, answered by one
handler, with the caller from the kernel (``SO_PEERCRED``), never from the
request, and the request read by the operation's own parse. Every error is an
HTTP status and the one line the CLI would print, with its exit code:
``{"error": ..., "exit_code": 77, "kind": "NotAllowed"}``; nothing a client
sends comes back as a traceback. The routes, who may ask them, the limits and
the refusals' audit: see docs/architecture.md, section 'The door'.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.host.identity import Caller, Operators, peer_of
from tpnode_tui.model.errors import (
    BadRequest,
    Conflict,
    JobNotFound,
    NeverFits,
    NoCapacity,
    NotAllowed,
    OverLimit,
    RuntimeUnavailable,
    TooMany,
    TpnodeError,
    error_line,
    exit_code,
)
from tpnode_tui.port.fields import Query
from tpnode_tui.port.operations import OPERATIONS, VIEWS, Operation
from tpnode_tui.port.types.readings import NodeView
from tpnode_tui.port.types.refusals import Cancelled
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.port.wire.snapshot import snapshot_to_json
from tpnode_tui.service import NodeService
from tpnode_tui.text.printable import printable, shown

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: the longest error line sent: what it quotes is cut at its source; this is the last guard
ERROR_MOST = 1000

_STATUS: tuple[tuple[type[TpnodeError], int], ...] = (
    (TooMany, 429),
    (OverLimit, 413),
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
    """An error as every client reads it: one printable line, cut short, its exit code and kind."""
    line = printable(message)
    if len(line) > ERROR_MOST:
        line = line[: ERROR_MOST - 1] + "…"
    return web.json_response({"error": line, "exit_code": code, "kind": kind}, status=status)


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
    except web.HTTPException as e:
        if e.status == 404:
            return error_response(
                404, f"no such endpoint: {request.method} {request.path} (this agent serves /v1/...)", 2, "BadRequest"
            )
        if e.status == 405:
            return error_response(405, f"{request.path} does not take {request.method}", 2, "BadRequest")
        return error_response(e.status, e.reason or "bad request", 2, "BadRequest")
    except Exception:
        log.exception("internal error answering %s %s", request.method, printable(request.path[:200]))
        return error_response(500, "internal error in the agent; its log has the details", 1, "TpnodeError")


def _each_key_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object of a body, at any depth; BadRequest where it gives a key
    twice. JSON's reader keeps the last silently: ``{"cards": 1, "cards": 2}``
    launched 2 cards, and what the client meant is not known."""
    doc = dict(pairs)
    if len(doc) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadRequest(f"the request body gives {shown(key, 30)} more than once in one object")
            seen.add(key)
    return doc


def body_json(raw: bytes) -> Any:
    """A request body as JSON; BadRequest for anything else, including what
    Python's reader cannot take: nesting past its recursion limit, and numbers
    with more digits than it converts (each once answered 500); and a key given
    twice in one object, as a query's is."""
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_each_key_once) if raw.strip() else {}
    except UnicodeDecodeError:
        raise BadRequest("the request body is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise BadRequest("the request body is nested too deep to be read") from None
    except ValueError as e:  # a number too long to convert (Python's int digit limit)
        raise BadRequest(f"the request body holds a number that cannot be read ({str(e)[:80]})") from None


class Api:
    """The door, over one :class:`NodeService`."""

    def __init__(self, service: NodeService, operators: Operators, limits: LimitSettings) -> None:
        self.service = service
        self.operators = operators
        self.limits = limits
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

    def route(self, ops: list[Operation[Any, Any]]) -> Handler:
        """The one handler of a path: every operation on it is read, done and
        answered the same way; two on one path (events or a job's output, and following them)
        are told apart by the request read."""

        async def handle(request: web.Request) -> web.StreamResponse:
            caller = self.caller(request)
            try:
                source = await self._source(ops[0], request)
            except TpnodeError as e:  # nothing the service could read: logged here, as the caller's
                self.service.refused(caller, ops[0], "", e)
                raise
            asked = self.service.read(caller, ops[0], source)
            op = next(o for o in ops if o.selects(asked))
            if op is VIEWS:
                return await self._readings(request, caller, asked)
            if op.stream:
                return await self._lines(request, caller, op, asked)
            result = await self.service.do(caller, op, asked)
            assert op.answer.encode is not None  # every answer but a stream's is written by the table
            return web.json_response(op.answer.encode(result), status=op.answer.status(result))

        return handle

    async def _source(self, op: Operation[Any, Any], request: web.Request) -> Any:
        """What was sent: a GET's query string, or a POST's body as JSON."""
        if op.method == "GET":
            return Query.of(list(request.query.items()), request.path)
        if request.content_type not in ("application/json", "application/octet-stream", ""):
            raise BadRequest(f"send JSON (Content-Type: application/json), not {printable(request.content_type[:60])}")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            most = self.limits.body_kib
            raise OverLimit(
                f"the request body is over {most} KiB, the most the agent reads (TUNEPLANE_MAX_BODY_KIB={most})"
            ) from None
        return body_json(raw)

    # ── streams ──────────────────────────────────────────────────────────────

    def _snapshot_text(self, view: NodeView) -> str:
        seq, text = self._encoded
        reading = view.reading
        if seq != reading.seq:
            doc = None if reading.snapshot is None else snapshot_to_json(reading.snapshot)
            text = json.dumps(doc)
            self._encoded = (reading.seq, text)
        return text

    async def _readings(self, request: web.Request, caller: Caller, asked: Any) -> web.StreamResponse:
        """Every new reading as a line: the snapshot encoded once for every
        stream, the caller's own part (who they are) for each."""

        def line(view: NodeView) -> bytes:
            r = view.reading
            head = json.dumps({"seq": r.seq, "error": r.error, "stale_since": r.stale_since, "you": asdict(view.you)})
            return f'{head[:-1]},"snapshot":{self._snapshot_text(view)}}}\n'.encode()

        return await self._stream(request, await self.service.stream(caller, VIEWS, asked), line)

    async def _lines(
        self, request: web.Request, caller: Caller, op: Operation[Any, Any], asked: Any
    ) -> web.StreamResponse:
        encode = op.answer.encode
        assert encode is not None
        items = await self.service.stream(caller, op, asked)
        return await self._stream(request, items, lambda item: (json.dumps(encode(item)) + "\n").encode())

    async def _stream(self, request: web.Request, items: Any, line: Callable[[Any], bytes]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None  # a handler always runs in a task
        self._streams.add(task)  # a stream never ends by itself: cut it when the agent stops
        try:
            async for item in items:
                try:
                    await response.write(line(item))
                except (ConnectionResetError, RuntimeError):
                    break  # the reader went away
        finally:
            self._streams.discard(task)
        return response

    async def end_streams(self, _app: web.Application) -> None:
        """On stopping: cut every stream, so the agent stops at once; each
        dashboard sees the agent go away and reconnects to the next one."""
        for task in list(self._streams):
            task.cancel()


def make_app(service: NodeService, operators: Operators, limits: Optional[LimitSettings] = None) -> web.Application:
    """The agent's routes, one per path of the table."""
    limits = limits or service.limits
    api = Api(service, operators, limits)
    app = web.Application(middlewares=[_errors], client_max_size=limits.body_kib * 1024)
    app.on_shutdown.append(api.end_streams)
    paths: dict[tuple[str, str], list[Operation[Any, Any]]] = {}
    for op in OPERATIONS:
        paths.setdefault((op.method, op.path), []).append(op)
    app.add_routes([web.route(method, path, api.route(ops)) for (method, path), ops in paths.items()])
    return app
