"""The node as served by its agent, over the agent's Unix socket (or a bridge to it).

Every answer is the agent's; nothing is decided here. An error arrives as the
agent's one line with its kind and exit code, and is raised as the same
exception the in-process node would have raised, so the CLI and the
dashboard report it the same way whichever node they talk to.

This is the whole of what a command needs to ask an agent, so it imports
nothing of the node's own machinery (service, allocator, runtimes, probes):
``tpnode-tui status`` through the agent costs a Python start, a connection
and the answer.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, NoReturn, Optional, TypeVar

from tpnode_tui.host.identity import user_name
from tpnode_tui.model.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    JobNotFound,
    NeverFits,
    NoCapacity,
    NotAllowed,
    OverLimit,
    RuntimeUnavailable,
    TooMany,
    TpnodeError,
)
from tpnode_tui.node.http import Connector, HttpClient, ProtocolError, Unreachable, unix_blocking
from tpnode_tui.port import operations as ops
from tpnode_tui.port.node import Node
from tpnode_tui.port.operations import Operation
from tpnode_tui.port.types.jobs import LaunchRequest, LaunchResult
from tpnode_tui.port.types.readings import Nothing
from tpnode_tui.port.types.refusals import AgentUnavailable, Cancelled, OverQuota
from tpnode_tui.port.wire.reader import WireError

A = TypeVar("A")

_KINDS: dict[str, type[TpnodeError]] = {
    cls.__name__: cls
    for cls in (
        BadRequest,
        ConfigError,
        Conflict,
        JobNotFound,
        NeverFits,
        NoCapacity,
        NotAllowed,
        OverLimit,
        OverQuota,
        RuntimeUnavailable,
        Cancelled,
        TooMany,
        TpnodeError,
    )
}

#: what the kernel says when this account may not open the socket (or a directory above it)
_FORBIDDEN = (errno.EACCES, errno.EPERM)


class AgentForbidden(NotAllowed):
    """This account may not reach the agent at all (permission denied on its
    socket). Not an AgentUnavailable: an agent is likely there, so serving the
    node in this process instead would make a second record of its cards."""


def _error(doc: Any, status: int) -> TpnodeError:
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        cls = _KINDS.get(str(doc.get("kind")), TpnodeError)
        error = cls(doc["error"])
        error.worded = True
        return error
    return TpnodeError(f"the agent answered HTTP {status} without saying why")


def _json(text: bytes, where: str, status: int) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past reading, a number past reading
        raise TpnodeError(f"the agent at {where} answered something that is not JSON (HTTP {status})") from None


class AgentNode(Node):
    """The node's agent at ``socket_path``; :meth:`through` reaches it by another way.

    ``blocking``: every call blocks, and none needs an event loop; run them
    with :func:`~.http.straight`. For a command that asks one question: the
    dashboard, which goes on drawing while it waits, uses the default."""

    in_process = False
    outlives_client = True

    def __init__(self, socket_path: Path | str, *, blocking: bool = False, connect_timeout_s: float = 5.0) -> None:
        path = str(socket_path)
        if blocking:
            connect = unix_blocking(path, connect_timeout_s)
        else:
            from tpnode_tui.node.aiostream import unix

            connect = unix(path, connect_timeout_s)
        self._setup(connect, address=path, where=f"agent at {path}", sends_env=True)

    @classmethod
    def through(cls, connect: Connector, *, address: str, where: str, sends_env: bool) -> AgentNode:
        """The agent reached through ``connect`` (a bridge to its socket).
        ``sends_env`` False: this machine's environment means nothing there."""
        node = cls.__new__(cls)
        node._setup(connect, address=address, where=where, sends_env=sends_env)
        return node

    def _setup(self, connect: Connector, *, address: str, where: str, sends_env: bool) -> None:
        #: the agent as an error names it
        self.address = address
        self.where = where
        #: whether a launch carries this process's environment and working directory
        self.sends_env = sends_env
        #: the agent is this machine's (not over SSH): its caller is this process
        self.on_this_machine = sends_env
        self._http = HttpClient(connect)

    def _gone(self, e: Unreachable) -> NoReturn:
        """The error that says why no answer came: in the other end's words
        where it gave them (a bridge over SSH), else as this side saw it."""
        if e.forbidden:
            raise AgentForbidden(str(e)) from None
        if e.whole:
            raise AgentUnavailable(str(e)) from None
        cause = e.cause
        if isinstance(cause, OSError) and cause.errno in _FORBIDDEN:
            raise AgentForbidden(
                f"this account ({user_name(os.getuid())}) may not open the node's agent socket "
                f"{self.address} (permission denied on it or on a directory above it): the node's "
                "operator decides which accounts may reach the agent"
            ) from None
        raise AgentUnavailable(
            f"no agent answers at {self.address} ({e}); start it (systemctl start "
            "tpnode-tui-agent) or ask the node's operator"
        ) from None

    async def _call(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        try:
            answer = await self._http.request(method, path, data)
        except Unreachable as e:
            self._gone(e)
        except ProtocolError as e:
            raise TpnodeError(f"the agent at {self.address} answered something that is not HTTP ({e})") from None
        doc = _json(answer.body, self.address, answer.status)
        if answer.status >= 400:
            raise _error(doc, answer.status)
        if not isinstance(doc, dict):
            raise WireError("the agent's answer is not a JSON object")
        return doc

    async def call(self, op: Operation[Any, A], request: Any) -> A:
        """``op`` asked of the agent: its request sent as the table says, its
        answer read back strictly."""
        path, body = op.sent(request)
        return op.answer.decode(await self._call(op.method, path, body))

    async def document(self, op: Operation[Any, A], request: Any) -> dict[str, Any]:
        """``op``'s answer exactly as the agent wrote it, once read back strictly."""
        path, body = op.sent(request)
        doc = await self._call(op.method, path, body)
        op.answer.decode(doc)
        return doc

    async def reach(self) -> None:
        """Ask the agent whether it answers: AgentUnavailable, saying why, when it
        does not; AgentForbidden where this account may not reach it."""
        await self.call(ops.WHOAMI, Nothing())

    async def answers(self) -> bool:
        """Whether an agent answers now (AgentForbidden is not "no agent": it is raised)."""
        try:
            await self.reach()
        except AgentUnavailable:
            return False
        return True

    async def _lines(self, path: str, opened: Optional[Callable[[], None]] = None) -> AsyncIterator[bytes]:
        """A stream's lines until it ends; AgentUnavailable when it cannot be had
        or breaks, which is how an agent that stopped or died looks from here.
        ``opened`` is called once the agent has taken the request."""
        try:
            async with self._http.stream(path) as (status, lines):
                if status >= 400:
                    body = b"".join([line async for line in lines])
                    raise _error(_json(body, self.address, status), status)
                if opened is not None:
                    opened()
                try:
                    async for line in lines:
                        yield line
                except Unreachable as e:  # cut mid-stream: the agent stopped or died
                    self._gone(Unreachable("it went away mid-stream", e.cause))
        except Unreachable as e:
            self._gone(e)
        except ProtocolError as e:
            raise TpnodeError(f"the agent at {self.address} sent something that is not HTTP ({e})") from None
        self._gone(Unreachable("the agent closed the stream"))

    async def stream(
        self, op: Operation[Any, A], request: Any, opened: Optional[Callable[[], None]] = None
    ) -> AsyncIterator[A]:
        """``op``'s stream from the agent, each line read back strictly. Raises
        AgentUnavailable when the agent cannot be reached or goes away mid-stream."""
        path, _body = op.sent(request)
        async for line in self._lines(path, opened):
            yield op.answer.decode(_json(line, self.address, 200))

    async def launch(self, request: LaunchRequest) -> LaunchResult:
        """A process job runs as the caller, with the environment and working
        directory of the shell that asked, as a launch in-process would: a
        request that names none carries this process's (where they mean
        something to the agent: on its own machine)."""
        if self.sends_env:
            env = request.env if request.env is not None else tuple(os.environ.items())
            request = replace(request, env=env, cwd=request.cwd or os.getcwd())
        return await super().launch(request)

    async def close(self) -> None:
        await self._http.close()
