"""A JSON webhook for the tests of notices: an aiohttp server, as Apprise's json:// posts to it."""

from __future__ import annotations

import asyncio

from aiohttp import web


class Receiver:
    """A JSON webhook, as Apprise's json:// posts to it: each notice kept by the path it came to.
    ``answers``: False for one that takes the request and never answers."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers
        #: cleared, it takes each request and answers none until set again
        self.held = asyncio.Event()
        self.held.set()
        self.got: list[tuple[str, dict]] = []
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{who}", self._take)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def _take(self, request: web.Request) -> web.Response:
        self.got.append((request.match_info["who"], await request.json()))
        if not self.answers:
            await asyncio.Event().wait()
        await self.held.wait()
        return web.Response(text="ok")

    def url(self, who: str, secret: str = "") -> str:
        login = f"{who}:{secret}@" if secret else ""
        return f"json://{login}127.0.0.1:{self.port}/{who}"

    def to(self, who: str) -> list[dict]:
        return [doc for path, doc in self.got if path == who]

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
