"""The agent's client: its HTTP, on a blocking socket and in an event loop.

Against a small server of the test's own, speaking raw bytes, for what a
real agent rarely does: close a kept connection, cut an answer short, or
answer something that is not HTTP. The blocking client against the real agent
is in tests/service/test_agent_api.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from tpnode_tui.host.dial import connect_unix
from tpnode_tui.model.errors import TpnodeError, exit_code
from tpnode_tui.node.aiostream import unix
from tpnode_tui.node.http import (
    MAX_BODY,
    HttpClient,
    ProtocolError,
    Unreachable,
    socket_stream,
    straight,
    unix_blocking,
)
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.port.types.refusals import AgentUnavailable

WAIT_S = 15.0


class RawServer:
    """A Unix socket server answering each request with the next of ``answers``
    (bytes sent as they are); ``None`` closes the connection without a word.
    It keeps a connection open after an answer unless told otherwise, and
    records each request's first line, and each connection."""

    def __init__(self, path: Path, answers: list[bytes | None]) -> None:
        self.path = path
        self.answers = list(answers)
        self.requests: list[str] = []
        self.connections = 0
        self.close_after: set[int] = set()  # answer numbers after which the connection is closed
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_unix_server(self._serve, str(self.path))
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.requests.append(head.split(b"\r\n")[0].decode())
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if len(self.requests) in self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        finally:
            writer.close()


def ok(doc: object, *, close: bool = False) -> bytes:
    body = json.dumps(doc).encode()
    extra = b"Connection: close\r\n" if close else b""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def chunked(*pieces: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for piece in pieces:
        out += f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.fixture(params=["blocking", "event loop"])
def kind(request):
    return request.param


async def ask(kind: str, path: Path, work):
    """``work(client)`` with a client of ``kind`` on ``path``: the blocking one
    run straight through (no event loop) on a thread, so the test's server goes on."""
    if kind == "blocking":

        def run():
            client = HttpClient(unix_blocking(str(path), WAIT_S))
            try:
                return straight(work(client))
            finally:
                straight(client.close())

        return await asyncio.to_thread(run)
    client = HttpClient(unix(str(path), WAIT_S))
    try:
        return await work(client)
    finally:
        await client.close()


async def idle(kind: str, seconds: float = 0.2) -> None:
    """A pause in the work ``ask`` runs: blocking on its thread, or on the loop."""
    if kind == "blocking":
        time.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


async def test_a_kept_connection_carries_the_next_request(tmp_path, kind):
    async with RawServer(tmp_path / "s.sock", [ok({"n": 1}), ok({"n": 2})]) as server:

        async def twice(client):
            return [json.loads((await client.request("GET", f"/v1/{n}")).body) for n in (1, 2)]

        assert await ask(kind, server.path, twice) == [{"n": 1}, {"n": 2}]
    assert server.requests == ["GET /v1/1 HTTP/1.1", "GET /v1/2 HTTP/1.1"]
    assert server.connections == 1


async def test_a_kept_connection_the_agent_closed_is_replaced_and_the_request_made_once(tmp_path, kind):
    async with RawServer(tmp_path / "s.sock", [ok({"n": 1}), ok({"n": 2})]) as server:
        server.close_after = {1}  # as an agent closes an idle connection

        async def twice(client):
            first = json.loads((await client.request("GET", "/v1/1")).body)
            await idle(kind)  # the agent's close arrives while the connection is idle, as its idle timeout does
            return first, json.loads((await client.request("POST", "/v1/2", b"{}")).body)

        assert await ask(kind, server.path, twice) == ({"n": 1}, {"n": 2})
    assert server.requests == ["GET /v1/1 HTTP/1.1", "POST /v1/2 HTTP/1.1"]
    assert server.connections == 2


async def test_an_answer_cut_short_is_not_asked_again(tmp_path, kind):
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"half": '
    async with RawServer(tmp_path / "s.sock", [cut, ok({"again": True})]) as server:
        server.close_after = {1}
        with pytest.raises(Unreachable, match="closed in the middle of an answer"):
            await ask(kind, server.path, lambda client: client.request("POST", "/v1/launch", b"{}"))
    assert server.requests == ["POST /v1/launch HTTP/1.1"]


async def test_a_stream_s_lines_whatever_its_chunks(tmp_path, kind):
    pieces = (b'{"a": 1}\n{"b"', b": 2}\n", b'\n\n{"c": 3}\n{"d": ', b"4}")
    async with RawServer(tmp_path / "s.sock", [chunked(*pieces)]) as server:

        async def lines(client):
            async with client.stream("/v1/stream") as (status, body):
                return status, [json.loads(line) async for line in body]

        assert await ask(kind, server.path, lines) == (200, [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}])


@pytest.mark.parametrize(
    "answer, words",
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + str(MAX_BODY + 1).encode() + b"\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not hexadecimal"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"x" * (70 * 1024) + b"\r\n\r\n", "too long"),
    ],
)
async def test_what_is_not_http_is_a_protocol_error(tmp_path, kind, answer, words):
    async with RawServer(tmp_path / "s.sock", [answer]) as server:
        server.close_after = {1}
        with pytest.raises(ProtocolError, match=words):
            await ask(kind, server.path, lambda client: client.request("GET", "/v1/whoami"))


async def test_the_node_says_in_one_line_what_an_answer_that_is_not_http_was(tmp_path):
    async with RawServer(tmp_path / "s.sock", [b"220 smtp ready\r\n"]) as server:
        node = AgentNode(server.path)
        try:
            with pytest.raises(TpnodeError) as said:
                await node.status()
        finally:
            await node.close()
    assert "answered something that is not HTTP" in str(said.value) and "\n" not in str(said.value)
    assert exit_code(said.value) == 1


def test_work_that_waits_on_an_event_loop_is_refused_straight_through():
    async def sleeps():
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="waited for one"):
        straight(sleeps())


def test_no_agent_is_unavailable_not_an_error_of_ours(tmp_path):
    gone = AgentNode(tmp_path / "nobody.sock", blocking=True)
    assert straight(gone.answers()) is False
    with pytest.raises(AgentUnavailable, match="no agent answers at .*nobody.sock"):
        straight(gone.status())


async def test_a_post_the_agent_read_before_its_connection_broke_is_not_asked_again(tmp_path, kind):
    async with RawServer(tmp_path / "s.sock", [ok({"n": 1}), None, ok({"again": True})]) as server:

        async def twice(client):
            await client.request("GET", "/v1/1")
            return await client.request("POST", "/v1/extend", b'{"run_id": "r", "duration_s": 3600}')

        with pytest.raises(Unreachable, match="whether it did what was asked is not known") as broke:
            await ask(kind, server.path, twice)
    assert broke.value.whole
    assert server.requests == ["GET /v1/1 HTTP/1.1", "POST /v1/extend HTTP/1.1"]  # once, never twice


async def test_a_get_whose_kept_connection_broke_is_asked_again_on_a_new_one(tmp_path, kind):
    async with RawServer(tmp_path / "s.sock", [ok({"n": 1}), None, ok({"n": 2})]) as server:

        async def twice(client):
            await client.request("GET", "/v1/1")
            return json.loads((await client.request("GET", "/v1/2")).body)

        assert await ask(kind, server.path, twice) == {"n": 2}
    assert server.requests == ["GET /v1/1 HTTP/1.1", "GET /v1/2 HTTP/1.1", "GET /v1/2 HTTP/1.1"]
    assert server.connections == 2


class FullQueue:
    """A Unix socket nobody accepts on yet, its queue of connections full: as
    the agent's is while one account floods it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(0)
        self.waiting: list[socket.socket] = []
        while True:
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            try:
                filler.connect(str(path))
            except BlockingIOError:
                filler.close()
                break
            self.waiting.append(filler)

    def answer_later(self, answer: bytes) -> threading.Thread:
        """In a while, accept every connection: the fillers are closed, the
        first other is read and answered."""

        def serve() -> None:
            time.sleep(0.3)  # the client finds the queue full first
            for _ in self.waiting:
                self.server.accept()[0].close()
            conn, _ = self.server.accept()
            with conn:
                conn.recv(1 << 16)
                conn.sendall(answer)

        thread = threading.Thread(target=serve)
        thread.start()
        return thread

    def close(self) -> None:
        for filler in self.waiting:
            filler.close()
        self.server.close()


async def test_a_full_queue_is_waited_on_not_taken_for_no_agent(tmp_path, kind):
    """A full queue answers a connect EAGAIN at once; the client waits for room
    (once it said "no agent answers", and asyncio took it for a connection made)."""
    full = FullQueue(tmp_path / "s.sock")
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        with pytest.raises(BlockingIOError), probe:
            probe.connect(str(full.path))
        server = full.answer_later(ok({"n": 1}, close=True))
        answer = await ask(kind, full.path, lambda client: client.request("GET", "/v1/whoami"))
        server.join(WAIT_S)
    finally:
        full.close()
    assert (answer.status, json.loads(answer.body)) == (200, {"n": 1})


def test_a_queue_full_all_the_while_is_said_as_such(tmp_path):
    full = FullQueue(tmp_path / "s.sock")
    try:
        with pytest.raises(TimeoutError, match="its queue of connections stayed full for 0.05 s"):
            connect_unix(str(full.path), 0.05)
        node = AgentNode(full.path, blocking=True, connect_timeout_s=0.05)
        with pytest.raises(AgentUnavailable, match=r"\(its queue of connections stayed full for 0.05 s\)"):
            straight(node.status())
    finally:
        full.close()


def test_a_refusal_sent_before_the_request_arrived_is_read(tmp_path):
    """The agent refuses a connection at its door (too many) by answering and
    closing at once; a request sent after that fails, and the answer is read."""
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    refused = b'{"error": "too many", "exit_code": 2, "kind": "TooMany"}'
    answered = threading.Event()

    def refuse() -> None:
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n%s" % (len(refused), refused))
        conn.close()
        answered.set()

    async def connect():
        sock = connect_unix(str(path), WAIT_S)
        answered.wait(WAIT_S)  # the request goes only once the agent has answered and closed
        return socket_stream(sock)

    thread = threading.Thread(target=refuse)
    thread.start()
    try:
        answer = straight(HttpClient(connect).request("GET", "/v1/whoami"))
    finally:
        thread.join(WAIT_S)
        server.close()
    assert (answer.status, answer.body) == (429, refused)
