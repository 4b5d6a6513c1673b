"""Streams for an event loop: connections to the agent read without blocking.

The dashboard follows readings and the log while it acts, so its connections
must never block the loop; a command that asks one question uses the
blocking kind in :mod:`.http` instead, and never loads this.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Optional

from tpnode_tui.host.dial import Dial
from tpnode_tui.node.http import MAX_HEAD_LINE, Connector, ProtocolError, Stream, Unreachable, broken


async def _nothing_said() -> Optional[Unreachable]:
    return None


async def _nothing_to_do() -> None:
    pass


class AsyncioStream:
    """asyncio's reader and writer as a :class:`~.http.Stream`. ``why`` says,
    when the connection ends early, what the other end said about it (a
    bridge's stderr), if anything; ``finish`` runs once it is closed (a
    bridge's process is waited for, so nothing of it outlives the loop)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        why: Callable[[], Awaitable[Optional[Unreachable]]] = _nothing_said,
        finish: Callable[[], Awaitable[None]] = _nothing_to_do,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._why = why
        self._finish = finish

    async def _cut(self) -> Unreachable:
        return await self._why() or Unreachable("the connection closed in the middle of an answer")

    async def read_line(self) -> bytes:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            raise await self._cut() from None
        except asyncio.LimitOverrunError:
            raise ProtocolError("a header line too long to read") from None
        except OSError as e:
            raise broken(e) from None

    async def read_exactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError:
            raise await self._cut() from None
        except OSError as e:
            raise broken(e) from None

    async def read_some(self, n: int) -> bytes:
        try:
            return await self._reader.read(n)
        except OSError as e:
            raise broken(e) from None

    async def send(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError as e:
            raise await self._why() or broken(e) from None

    def ended(self) -> bool:
        return self._reader.at_eof() or self._writer.is_closing() or bool(self._reader.exception())

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
            await self._writer.wait_closed()
        await self._finish()


async def _dialled(path: str, timeout_s: float) -> socket.socket:
    """A connection to ``path``, waiting for room in its queue without blocking the loop.
    (asyncio's own connect takes a full queue for a connection made.)"""
    dial = Dial(path, timeout_s)
    try:
        while (sock := dial.attempt()) is None:
            await asyncio.sleep(dial.wait())
    except asyncio.CancelledError:
        dial.close()
        raise
    return sock


def unix(path: str, timeout_s: float) -> Connector:
    """Connections to the Unix socket at ``path``, for an event loop."""

    async def connect() -> Stream:
        try:
            sock = await _dialled(path, timeout_s)
        except TimeoutError as e:
            raise Unreachable(str(e)) from None
        except OSError as e:
            raise broken(e) from None
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_HEAD_LINE)
        except BaseException:
            sock.close()
            raise
        return AsyncioStream(reader, writer)

    return connect
