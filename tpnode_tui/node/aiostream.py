"""Streams for an event loop: connections to the agent read without blocking.

The dashboard follows readings and the log while it acts, so its connections
must never block the loop; a command that asks one question uses the
blocking kind in :mod:`.http` instead, and never loads this.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Optional

from .http import MAX_HEAD_LINE, Connector, ProtocolError, Stream, Unreachable


async def _nothing_said() -> Optional[str]:
    return None


class AsyncioStream:
    """asyncio's reader and writer as a :class:`~.http.Stream`. ``why`` says,
    when the connection ends early, what the other end said about it (a
    bridge's stderr), if anything; ``ended`` runs once it is closed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 why: Callable[[], Awaitable[Optional[str]]] = _nothing_said,
                 ended: Callable[[], None] = lambda: None) -> None:
        self._reader = reader
        self._writer = writer
        self._why = why
        self._ended = ended

    async def _cut(self) -> Unreachable:
        return Unreachable(await self._why() or "the connection closed in the middle of an answer")

    async def read_line(self) -> bytes:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            raise await self._cut() from None
        except asyncio.LimitOverrunError:
            raise ProtocolError("a header line too long to read") from None
        except OSError as e:
            raise Unreachable(e.strerror or str(e), e) from None

    async def read_exactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError:
            raise await self._cut() from None
        except OSError as e:
            raise Unreachable(e.strerror or str(e), e) from None

    async def read_some(self, n: int) -> bytes:
        try:
            return await self._reader.read(n)
        except OSError as e:
            raise Unreachable(e.strerror or str(e), e) from None

    async def send(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as e:
            raise Unreachable(await self._why() or e.strerror or str(e), e) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        self._ended()


def unix(path: str, timeout_s: float) -> Connector:
    """Connections to the Unix socket at ``path``, for an event loop."""

    async def connect() -> Stream:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=MAX_HEAD_LINE), timeout_s)
        except asyncio.TimeoutError:
            raise Unreachable(f"no answer within {timeout_s:g} s") from None
        except OSError as e:
            raise Unreachable(e.strerror or str(e) or type(e).__name__, e) from None
        return AsyncioStream(reader, writer)

    return connect
