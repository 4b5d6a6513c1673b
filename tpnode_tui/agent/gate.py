"""How many connections one account may hold open to the agent: checked as each is accepted.

Every connection costs the agent a descriptor and the memory of its request
and answer; an account that opens thousands (or sends thirty large requests
at once, each on its own connection) would otherwise make the agent hold
them all, and everyone else waits. So each accepted connection is counted
against the account the kernel names for it (``SO_PEERCRED``), and one past
TUNEPLANE_MAX_CONNECTIONS_PER_USER is answered at once with a 429 and one
line, then closed; the account's other connections go on. Requests on one
connection are answered one after another, so this bounds an account's
requests in flight too. Operators are not counted: they clear a stuck node,
and are trusted with the agent itself.

The gate sits in front of aiohttp's own protocol, as a protocol that hands
everything on to it once the connection is let in.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any, Callable, Optional

from tpnode_tui.host.identity import Operators, peer_of

log = logging.getLogger(__name__)

#: how long a refused connection is kept for its request to arrive (so the
#: client reads the refusal as the answer to what it sent), at most
REFUSED_LINGER_S = 2.0


def refusal(user: str, most: int) -> bytes:
    """The whole HTTP answer a connection past the limit gets."""
    body = json.dumps(
        {
            "error": (
                f"{user} has {most} connections open to the agent already, the most one account may "
                f"(TUNEPLANE_MAX_CONNECTIONS_PER_USER={most}); close some, or wait for them to end"
            ),
            "exit_code": 2,
            "kind": "TooMany",
        }
    ).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Gates:
    """The protocol factory the agent's socket serves with: one :class:`Gate` per
    connection, over aiohttp's own handler factory, counting each account's."""

    def __init__(self, inner: Callable[[], asyncio.Protocol], operators: Operators, most: int) -> None:
        self.inner = inner
        self.operators = operators
        self.most = most
        #: each ordinary account's connections open now, by uid
        self.open: Counter[int] = Counter()

    def __call__(self) -> Gate:
        return Gate(self)


class Gate(asyncio.Protocol):
    def __init__(self, gates: Gates) -> None:
        self.gates = gates
        self.inner: Optional[asyncio.Protocol] = None
        self.uid: Optional[int] = None
        self.transport: Optional[asyncio.BaseTransport] = None
        self._linger: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")  # asyncio's view of the socket: getsockopt is there
        uid, user, counted = None, "this account", True
        if sock is not None:
            try:
                caller = peer_of(sock, self.gates.operators)
                uid, user, counted = caller.uid, caller.user, not caller.operator
            except OSError:
                pass  # no identity: let the request be refused by name, as without a gate
        if counted and uid is not None and self.gates.open[uid] >= self.gates.most:
            self._refuse(transport, user)
            return
        if counted and uid is not None:
            self.uid = uid
            self.gates.open[uid] += 1
        self.inner = self.gates.inner()
        self.inner.connection_made(transport)

    def _refuse(self, transport: asyncio.BaseTransport, user: str) -> None:
        """Answer at once and close once the request has arrived (or soon): the
        answer is read as the reply to it, and nothing of it is kept."""
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(refusal(user, self.gates.most))
        self._linger = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
        elif self.transport is not None:
            self.transport.close()  # the refusal was its answer

    def eof_received(self) -> Optional[bool]:
        if self.inner is not None:
            return self.inner.eof_received()
        return None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self.uid is not None:
            self.gates.open[self.uid] -= 1
            if self.gates.open[self.uid] <= 0:
                del self.gates.open[self.uid]
            self.uid = None
        if self.inner is not None:
            self.inner.connection_lost(exc)


async def serve_gated(
    loop: asyncio.AbstractEventLoop, inner: Callable[[], Any], path: str, operators: Operators, most: int
) -> asyncio.AbstractServer:
    """The agent's Unix socket server, every connection through a gate."""
    return await loop.create_unix_server(Gates(inner, operators, most), path)
