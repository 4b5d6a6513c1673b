"""The web page's server: its routes, read-only, and what every answer carries.

``GET /`` the page (one HTML file, its style sheet and its script, shipped in
the package: no CDN, no build step); ``GET /api/state.json`` the document
``status --json`` prints (``fleet --json`` for the fleet); ``GET /events`` the
page's words as Server-Sent Events, pushed when they change; ``GET
/state.txt`` the text ``status`` prints. Every other method, on any path, is
405: nothing here changes anything. With a token set, every route asks for
it (a cookie the page's first visit with ``?token=`` sets, or an
``Authorization: Bearer`` header); without one, anyone who reaches the
address reads the page, which is why it listens on 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from importlib import resources
from typing import Awaitable, Callable, Optional, Union
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Middleware

from tpnode_tui.web.hub import Answer, FleetHub, NodeHub

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: the page's files, and the type each is served as
STATIC = {
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
}
#: the cookie a visit with the token sets, so the page's own requests carry it
TOKEN_COOKIE = "tpnode_web_token"
#: the most pages open at once: each holds a connection; beyond, one line says so
MAX_STREAMS = 1000
#: what every answer says to the browser: nothing but this page's own files runs or loads
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
READ_ONLY = "tpnode-tui web is read-only: it answers GET (and HEAD) only\n"


def _text(status: int, text: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain", headers=headers)


@web.middleware
async def _read_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Any method but GET and HEAD, on any path, is 405: the page changes nothing."""
    if request.method not in ("GET", "HEAD"):
        return _text(405, READ_ONLY, Allow="GET, HEAD")
    return await handler(request)


@web.middleware
async def _headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as e:  # a path that is not here: one line, with the same headers
        response = _text(e.status, f"{e.reason}\n")
    if not response.prepared:  # a stream sent its headers itself
        response.headers.update(HEADERS)
    return response


def _token_gate(token: str) -> Middleware:
    """Every route asks for ``token``: from the cookie, a bearer header, or ``?token=`` on a
    visit to the page, which sets the cookie and sends the browser on without it in the address."""
    wanted = token.encode()

    def given(value: Optional[str]) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), wanted)

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        bearer = request.headers.get("Authorization", "")
        if given(request.cookies.get(TOKEN_COOKIE)) or (bearer.startswith("Bearer ") and given(bearer[7:])):
            return await handler(request)
        if given(request.query.get("token")):
            # relative, so that a proxy serving the page under a path of its own keeps it
            rest = {k: v for k, v in request.query.items() if k != "token"}
            there = (request.path.rsplit("/", 1)[-1] or "./") + (f"?{urlencode(rest)}" if rest else "")
            response = web.Response(status=303, headers={"Location": there})
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
            return response
        return _text(
            401,
            "this page asks for its token: open it once as /?token=TOKEN (a cookie keeps it), "
            "or send the header Authorization: Bearer TOKEN\n",
            **{"WWW-Authenticate": 'Bearer realm="tpnode-tui web"'},
        )

    return gate


def _files() -> dict[str, bytes]:
    """The page's files, read once from the package."""
    folder = resources.files("tpnode_tui.web") / "static"
    return {name: (folder / name).read_bytes() for name in ("index.html", *STATIC)}


def _answer(answer: Answer) -> web.Response:
    return web.Response(status=answer.status, body=answer.body, content_type=answer.content_type.split(";")[0])


def make_app(hub: Union[NodeHub, FleetHub], token: Optional[str] = None) -> web.Application:
    """The page's application over ``hub``, the one follow of the node or the fleet."""
    files = _files()
    middlewares: list[Middleware] = [_headers, _read_only] + ([_token_gate(token)] if token else [])
    app = web.Application(middlewares=middlewares)
    #: the streams open now: one never ends by itself, so each is cut when the server stops
    streams: set[asyncio.Task[object]] = set()

    async def end_streams(_app: web.Application) -> None:
        for task in list(streams):
            task.cancel()

    app.on_shutdown.append(end_streams)

    async def page(request: web.Request) -> web.Response:
        return web.Response(body=files["index.html"], content_type="text/html", charset="utf-8")

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=files[name], headers={"Content-Type": STATIC[name]})

    async def state_json(request: web.Request) -> web.Response:
        return _answer(hub.state_json())

    async def state_text(request: web.Request) -> web.Response:
        answer = hub.state_text()
        return web.Response(status=answer.status, body=answer.body, content_type="text/plain", charset="utf-8")

    async def events(request: web.Request) -> web.StreamResponse:
        if hub.streams >= MAX_STREAMS:
            return _text(503, f"{MAX_STREAMS} pages are open already; try again later\n", **{"Retry-After": "10"})
        response = web.StreamResponse(
            headers={
                **HEADERS,
                "Content-Type": "text/event-stream",
                # a proxy that buffers would hold every event back (nginx reads this one)
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        if request.method == "HEAD":
            return response  # the headers only: a stream has no end for a HEAD to wait for
        task = asyncio.current_task()
        assert task is not None  # a handler always runs in a task
        streams.add(task)
        try:
            async with contextlib.aclosing(hub.stream()) as events:
                async for event in events:
                    await response.write(event)
        except (ConnectionResetError, RuntimeError):
            pass  # the page went away
        finally:
            streams.discard(task)
        return response

    async def no_icon(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app.add_routes(
        [
            web.get("/", page),
            web.get("/static/{name}", static),
            web.get("/api/state.json", state_json),
            web.get("/state.txt", state_text),
            web.get("/events", events),
            web.get("/favicon.ico", no_icon),
        ]
    )
    return app
