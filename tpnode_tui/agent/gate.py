"""Who comes in at the agent's socket: each connection counted against its account as it is accepted.

Every connection costs the agent a descriptor, memory and time, so one account
holding thousands open, or opening them as fast as it can, would make everyone
else wait. Before anything is done for a connection it is counted against the
account the kernel names (``SO_PEERCRED``): one past the account's open
connections or its rate is answered at once with a 429 and one line, and
closed; operators are never refused. What is let in is handed to aiohttp's
protocol through a :class:`Gate` that gives the account its place back when
the connection ends. See docs/architecture.md, section 'The door'
("Connections and fairness").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.host.identity import Operators, user_name

log = logging.getLogger(__name__)

#: connections the socket's queue holds before the agent accepts them. Under a
#: flood it is full, and a connection let into it waits for all those ahead to
#: be refused (20 to 30 microseconds each): 256 is a few milliseconds of them,
#: where with 4096 another account's status waited 140 ms and more. Room in a full
#: queue comes as fast, and a client waits for it (host/dial.py)
LISTEN_BACKLOG = 256
#: connections accepted in one go before the agent's other work has its turn: a
#: connection let in takes a few turns of the loop to be answered, and each
#: turn waits for this many refusals (under a flood, another account's status
#: took 11 to 22 ms with 16, 20 to 23 ms with 64)
ACCEPT_AT_ONCE = 16
#: how long accepting pauses when no descriptor is left (the agent's or the system's)
NO_DESCRIPTOR_PAUSE_S = 0.5
#: how long the operators' group id is taken as known: looking it up costs more than refusing
GROUP_KNOWN_S = 5.0
#: accounts remembered before those with nothing open and a full bucket are forgotten
REMEMBERED = 1024
#: an account's refusals are said in the agent's log at most this often
REFUSALS_SAID_S = 60.0

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
#: SO_PEERGROUPS (Linux's number; Python does not name it), read for up to 256 groups
_SO_PEERGROUPS, _GROUPS_READ = getattr(socket, "SO_PEERGROUPS", 59), 1024


@functools.lru_cache(maxsize=64)
def refusal(error: str) -> bytes:
    """The whole HTTP answer a refused connection gets: written once for a
    flood's many (an account's refusal reads the same each time)."""
    body = json.dumps({"error": error, "exit_code": 2, "kind": "TooMany"}).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Account:
    """What one account has of the door now (counts that change: not a snapshot)."""

    user: str
    #: its connections open now
    open: int
    #: new connections it may still open at once, and when that was counted
    bucket: float
    counted_at: float
    #: connections refused since the agent's log last said so, and when it did
    refused: int = 0
    said_at: float = -REFUSALS_SAID_S


class Door:
    """The agent's listening socket, accepted here; each connection let in or refused."""

    def __init__(
        self,
        inner: Callable[[], asyncio.Protocol],
        operators: Operators,
        limits: LimitSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.operators = operators
        self.most_open = limits.connections_per_user
        self.rate = limits.connection_rate_per_user
        self.clock = clock
        self.accounts: dict[int, Account] = {}
        self._group: tuple[float, Optional[int]] = (-GROUP_KNOWN_S, None)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._sock: Optional[socket.socket] = None
        self._handing: set[asyncio.Task[Any]] = set()
        self._drain = bytearray(1 << 16)

    def listen(self, path: str) -> None:
        """Bind ``path`` and accept on it from now, in the running loop."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock, self._loop = sock, asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        """Accept nothing more; connections already let in are aiohttp's to end."""
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        for task in self._handing:
            task.cancel()

    def _accept(self) -> None:
        for _ in range(ACCEPT_AT_ONCE):
            if self._sock is None:
                return
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self._pause(e)
                return
            conn.setblocking(False)
            self._admit(conn)

    def _pause(self, e: OSError) -> None:
        """No descriptor left: the socket stays readable, so stop looking for a moment."""
        assert self._sock is not None and self._loop is not None
        log.warning("cannot accept a connection (%s); accepting again in %g s", e.strerror, NO_DESCRIPTOR_PAUSE_S)
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(NO_DESCRIPTOR_PAUSE_S, self._resume)

    def _resume(self) -> None:
        if self._sock is not None and self._loop is not None:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _admit(self, conn: socket.socket) -> None:
        uid: Optional[int]
        gid: Optional[int]
        try:
            _pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        except OSError:
            uid = gid = None  # no identity: the request is refused by name, as without a door
        account = None if uid is None or uid == 0 else self._account(uid)
        if account is not None:
            why = self.why_not(account)
            if why is not None and not self._operator(conn, gid):
                self._refuse(conn, why)
                self._say(uid, account, why)
                return
            account.open += 1
        self._hand_over(conn, account)

    def _account(self, uid: int) -> Account:
        account = self.accounts.get(uid)
        if account is None:
            if len(self.accounts) >= REMEMBERED:
                self._forget_idle()
            account = self.accounts[uid] = Account(user_name(uid), 0, float(self.rate), self.clock())
        return account

    def _forget_idle(self) -> None:
        now = self.clock()
        for uid, account in list(self.accounts.items()):
            if account.open == 0 and account.bucket + (now - account.counted_at) * self.rate >= self.rate:
                del self.accounts[uid]

    def why_not(self, account: Account) -> Optional[str]:
        """Why ``account`` may not open one more connection now; None: it may (and it is counted)."""
        if account.open >= self.most_open:
            return (
                f"{account.user} has {self.most_open} connections open to the agent already, the most one account "
                f"may (TUNEPLANE_MAX_CONNECTIONS_PER_USER={self.most_open}); close some, or wait for them to end"
            )
        now = self.clock()
        account.bucket = min(float(self.rate), account.bucket + (now - account.counted_at) * self.rate)
        account.counted_at = now
        if account.bucket < 1.0:
            return (
                f"{account.user} opened {self.rate} new connections to the agent within a second, the most one "
                f"account may (TUNEPLANE_MAX_CONNECTION_RATE_PER_USER={self.rate}); wait a moment and ask again"
            )
        account.bucket -= 1.0
        return None

    def _operator(self, conn: socket.socket, gid: Optional[int]) -> bool:
        """Whether the peer is an operator: asked only of a connection about to be refused."""
        now = self.clock()
        at, wanted = self._group
        if now - at >= GROUP_KNOWN_S:
            wanted = self.operators.gid()
            self._group = (now, wanted)
        if wanted is None:
            return False
        if gid == wanted:
            return True
        try:
            raw = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, _GROUPS_READ)
        except OSError:
            return False  # more groups than read, or an older kernel: counted, as the ordinary account it may be
        return wanted in struct.unpack(f"{len(raw) // 4}I", raw)

    def _say(self, uid: Optional[int], account: Account, why: str) -> None:
        """The agent's log says an account's refusals at most once a minute, with their count:
        one line each would be a flood of its own."""
        account.refused += 1
        now = self.clock()
        if now - account.said_at >= REFUSALS_SAID_S:
            log.warning(
                "connections of uid %s refused since this was last said: %d; the latest: %s", uid, account.refused, why
            )
            account.refused, account.said_at = 0, now

    def _refuse(self, conn: socket.socket, why: str) -> None:
        """Answer, and close at once: what the client sent already is read and
        dropped first, so its reader sees the answer and a clean end."""
        with contextlib.suppress(OSError):
            conn.recv_into(self._drain)
        with contextlib.suppress(OSError):
            conn.send(refusal(why))
        conn.close()

    def _hand_over(self, conn: socket.socket, account: Optional[Account]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._connect(conn, account))
        self._handing.add(task)
        task.add_done_callback(self._handing.discard)

    async def _connect(self, conn: socket.socket, account: Optional[Account]) -> None:
        assert self._loop is not None
        gate = Gate(self.inner(), account)
        try:
            await self._loop.connect_accepted_socket(lambda: gate, conn)
        except BaseException:
            gate.let_go()
            conn.close()
            raise


class Gate(asyncio.Protocol):
    """aiohttp's protocol for one connection let in; its account's place given back when it ends."""

    def __init__(self, inner: asyncio.Protocol, account: Optional[Account]) -> None:
        self.inner = inner
        self.account = account

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> Optional[bool]:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def let_go(self) -> None:
        """The account's place given back, once, however the connection ended."""
        if self.account is not None:
            self.account.open -= 1
            self.account = None

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.let_go()
        self.inner.connection_lost(exc)
