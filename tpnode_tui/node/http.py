"""Just enough HTTP/1.1 to ask the node's agent, over any byte stream.

A command asks one question and exits, so it must start fast: a general
client library costs more to import than the answer takes (aiohttp's client
alone was 150 ms of a 370 ms ``status``). This speaks the agent's small API
(JSON with a Content-Length, chunked JSON lines), written once as coroutines
over a :class:`Stream` that blocks or not (:func:`straight` runs one with no
event loop). A broken connection is asked again only for a GET: a POST the
agent may have acted on is reported as not known. See docs/architecture.md,
section 'Reaching the agent'.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import IO, Any, AsyncIterator, Awaitable, Callable, Optional, Protocol, TypeVar

from tpnode_tui.host.dial import connect_unix

T = TypeVar("T")

#: the most one answer, one chunk or one line of a stream may take (a
#: 1024-card node's reading is far below it); more is an agent gone wrong
MAX_BODY = 64 * 1024 * 1024
#: the longest status or header line read
MAX_HEAD_LINE = 64 * 1024
#: connections kept open for the next request
KEEP = 2
#: a chunk's size: hexadecimal digits only (int(x, 16) also takes "0x10", "+a" and "1_0")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class Unreachable(Exception):
    """No answer could be had: the connection could not be made, or broke.
    ``cause`` is the error underneath (an OSError names what the kernel said)."""

    def __init__(
        self, why: str, cause: Optional[BaseException] = None, *, whole: bool = False, forbidden: bool = False
    ) -> None:
        super().__init__(why)
        self.cause = cause
        #: ``why`` is already the whole line to say (the other end worded it)
        self.whole = whole
        #: the other end said this account may not reach the agent
        self.forbidden = forbidden


class ProtocolError(Exception):
    """The other end answered, but not in HTTP this client can read."""


class Stream(Protocol):
    """One connection's bytes. Reads raise :class:`Unreachable` when the
    connection ends or breaks before what was asked for arrived."""

    async def read_line(self) -> bytes:
        """Up to and including the next ``\\n`` (at most MAX_HEAD_LINE bytes)."""
        ...

    async def read_exactly(self, n: int) -> bytes: ...

    async def read_some(self, n: int) -> bytes:
        """At most ``n`` bytes, at least one; b"" at the end of the connection."""
        ...

    async def send(self, data: bytes) -> None: ...

    def ended(self) -> bool:
        """Whether the other end has closed it (or it broke) while it was idle:
        a kept connection is looked at with this before it carries a request."""
        ...

    async def close(self) -> None: ...


Connector = Callable[[], Awaitable[Stream]]


def straight(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end without an event loop.

    Only for work whose every wait is on a :class:`BlockingStream`, which never
    suspends: a command that asks the agent one question then costs no
    asyncio, whose import alone takes longer than a Python start. A coroutine
    that does suspend is a mistake of ours, said so."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("work run without an event loop waited for one")


def broken(e: OSError) -> Unreachable:
    """A connection the kernel says broke (or could not be made), in its words."""
    return Unreachable(e.strerror or str(e) or type(e).__name__, e)


class BlockingStream:
    """A connection read from a buffered file and written with ``send``, both
    blocking: a socket's, or a bridge's pipes. ``why`` says, when the
    connection ends early, what the other end said about it (a bridge's
    stderr), if anything."""

    def __init__(
        self,
        rfile: IO[bytes],
        send: Callable[[bytes], None],
        close: Callable[[], None],
        why: Callable[[], Optional[Unreachable]] = lambda: None,
    ) -> None:
        self._file = rfile
        self._send = send
        self._close = close
        self._why = why

    def _ended(self) -> Unreachable:
        return self._why() or Unreachable("the connection closed in the middle of an answer")

    async def read_line(self) -> bytes:
        try:
            line = self._file.readline(MAX_HEAD_LINE + 1)
        except OSError as e:
            raise broken(e) from None
        if len(line) > MAX_HEAD_LINE:
            raise ProtocolError("a header line too long to read")
        if not line.endswith(b"\n"):
            raise self._ended()
        return line

    async def read_exactly(self, n: int) -> bytes:
        try:
            data = self._file.read(n)
        except OSError as e:
            raise broken(e) from None
        if len(data) < n:
            raise self._ended()
        return data

    async def read_some(self, n: int) -> bytes:
        try:
            return self._file.read1(n)  # type: ignore[attr-defined,no-any-return]  # a buffered reader's
        except OSError as e:
            raise broken(e) from None

    async def send(self, data: bytes) -> None:
        try:
            self._send(data)
        except OSError as e:
            raise self._why() or broken(e) from None

    def ended(self) -> bool:
        try:
            readable, _, _ = select.select([self._file], [], [], 0)
        except (OSError, ValueError):
            return True
        # nothing may arrive on an idle connection: anything readable is its end (or junk)
        return bool(readable)

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        self._close()


def socket_stream(sock: socket.socket) -> BlockingStream:
    def close() -> None:
        with contextlib.suppress(OSError):
            sock.close()

    return BlockingStream(sock.makefile("rb"), sock.sendall, close)


def unix_blocking(path: str, timeout_s: float) -> Connector:
    """Connections to the Unix socket at ``path``, made and used blocking: a
    full queue is waited on for up to ``timeout_s`` (host/dial.py); an answer
    may wait on the allocation lock, as long as it takes."""

    async def connect() -> Stream:
        try:
            sock = connect_unix(path, timeout_s)
        except TimeoutError as e:
            raise Unreachable(str(e)) from None
        except OSError as e:
            raise broken(e) from None
        return socket_stream(sock)

    return connect


class _Response:
    """One answer being read: its status and headers, then its body."""

    def __init__(self, stream: Stream, version: bytes, status: int, headers: dict[str, str]) -> None:
        self.stream = stream
        self.version = version
        self.status = status
        self.headers = headers
        #: True once the body ran to its end, so the connection may carry another
        self.complete = False

    @property
    def reusable(self) -> bool:
        if not self.complete or "close" in self.headers.get("connection", "").lower():
            return False
        return self.version != b"HTTP/1.0" or "keep-alive" in self.headers.get("connection", "").lower()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, whatever its framing."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            async for data in self._chunked():
                yield data
            return
        length = self.headers.get("content-length")
        if length is None:  # the body runs to the end of the connection
            total = 0
            while data := await self.stream.read_some(1 << 20):
                total += len(data)
                if total > MAX_BODY:
                    raise ProtocolError(f"an answer longer than {MAX_BODY} bytes")
                yield data
            return
        if not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY:
            raise ProtocolError(f"a Content-Length of {length[:40]!r}, not a number up to {MAX_BODY}")
        left = int(length)
        while left:
            data = await self.stream.read_some(min(left, 1 << 20))
            if not data:
                raise Unreachable("the connection closed in the middle of an answer")
            left -= len(data)
            yield data
        self.complete = True

    async def _chunked(self) -> AsyncIterator[bytes]:
        while True:
            size_line = (await self.stream.read_line()).strip()
            digits = size_line.split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(digits):
                raise ProtocolError(f"a chunk size that is not hexadecimal: {size_line[:40]!r}")
            size = int(digits, 16)
            if not 0 <= size <= MAX_BODY:
                raise ProtocolError(f"a chunk of {size} bytes, more than {MAX_BODY}")
            if size == 0:
                while (await self.stream.read_line()).strip():  # trailers, to the blank line
                    pass
                self.complete = True
                return
            data = await self.stream.read_exactly(size)
            if await self.stream.read_exactly(2) != b"\r\n":
                raise ProtocolError("a chunk that does not end where its size says")
            yield data

    async def body(self) -> bytes:
        parts = []
        total = 0
        async for chunk in self.chunks():
            total += len(chunk)
            if total > MAX_BODY:
                raise ProtocolError(f"an answer longer than {MAX_BODY} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's non-empty lines, however it was cut into chunks."""
        buffer = b""
        async for chunk in self.chunks():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line
            if len(buffer) > MAX_BODY:
                raise ProtocolError(f"a line longer than {MAX_BODY} bytes")
        if buffer.strip():
            yield buffer


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class HttpClient:
    """Requests to one agent, over streams from ``connect``; ``host`` only fills the Host header."""

    def __init__(self, connect: Connector, *, host: str = "tpnode-agent") -> None:
        self._connect = connect
        self.host = host
        self._idle: list[Stream] = []

    async def _stream(self) -> tuple[Stream, bool]:
        """A connection for the next request, and whether it was kept from an earlier one."""
        while self._idle:
            stream = self._idle.pop()
            if not stream.ended():
                return stream, True
            await stream.close()  # the agent closed it while it was idle
        return await self._connect(), False

    async def _send(self, method: str, path: str, body: Optional[bytes]) -> _Response:
        """The request sent and the answer's head read. A kept connection that
        breaks before any of the answer came is tried again on a new one for a
        GET only (see the module's docstring)."""
        while True:
            stream, kept = await self._stream()
            answered = False
            try:
                status_line = await self._asked(stream, self._head(method, path, body) + (body or b""))
                answered = True
                return await self._response(stream, status_line)
            except BaseException as e:
                await stream.close()
                if isinstance(e, Unreachable) and kept and not answered:
                    if method == "GET":
                        continue
                    raise Unreachable(
                        f"the connection to the node's agent broke before it answered ({e}), so "
                        "whether it did what was asked is not known: look (tpnode-tui status, "
                        "queue or events) before asking again",
                        e.cause,
                        whole=True,
                    ) from None
                raise

    @staticmethod
    async def _asked(stream: Stream, request: bytes) -> bytes:
        """``request`` sent, and the answer's first line. The agent refuses a
        connection at its door (too many) by answering at once and closing,
        which may be before the request arrived: a request that could not be
        sent is answered all the same if an answer came."""
        try:
            await stream.send(request)
        except Unreachable as unsent:
            try:
                return await stream.read_line()
            except (Unreachable, ProtocolError):
                raise unsent from None
        return await stream.read_line()

    def _head(self, method: str, path: str, body: Optional[bytes]) -> bytes:
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", "Accept: application/json"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        elif method != "GET":
            head.append("Content-Length: 0")
        return ("\r\n".join(head) + "\r\n\r\n").encode("ascii")

    @staticmethod
    async def _response(stream: Stream, status_line: bytes) -> _Response:
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP answer: {status_line[:60]!r}")
        headers: dict[str, str] = {}
        while line := (await stream.read_line()).strip():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return _Response(stream, parts[0], int(parts[1]), headers)

    async def request(self, method: str, path: str, body: Optional[bytes] = None) -> Answer:
        """One request and its whole answer."""
        response = await self._send(method, path, body)
        try:
            data = await response.body()
        except BaseException:
            await response.stream.close()
            raise
        if response.reusable and len(self._idle) < KEEP:
            self._idle.append(response.stream)
        else:
            await response.stream.close()
        return Answer(response.status, data)

    @contextlib.asynccontextmanager
    async def stream(self, path: str) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """A GET whose answer is a stream: its status, and its lines as they come.
        The connection is closed when the block ends: a stream is not resumed."""
        response = await self._send("GET", path, None)
        try:
            yield response.status, response.lines()
        finally:
            await response.stream.close()

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop().close()
