"""Which node a command talks to: the node's agent, or the node served in this process.

A shared node has one agent, and two accounts each allocating from a private
state dir would be two truths about one set of cards. So ``auto`` uses the
agent whenever its socket answers, serves the node here only where this
account can use the node's state dir, and otherwise says in one line that no
agent answers; it never suggests another state dir. What serving here needs
is imported only then. :func:`quick_status` hands on the agent's
``status --json`` with a plain socket, importing nothing else, and returns
None for anything but the plainest case. See docs/architecture.md, section
'Reaching the agent'.
"""

from __future__ import annotations

import json
import os
import sys

#: as :mod:`tpnode_tui.config.sections` declares TUNEPLANE_AGENT_SOCKET's default
from tpnode_tui.config.defaults import DEFAULT_AGENT_SOCKET
from tpnode_tui.config.nodefile import beneath
from tpnode_tui.host.dial import connect_unix
from tpnode_tui.model.errors import ConfigError

TYPE_CHECKING = False  # typing is one of the imports the quick path does without
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Callable, Optional

    from tpnode_tui.config.settings import Settings
    from tpnode_tui.node.remote import AgentNode
    from tpnode_tui.port.node import Node

#: the most of an answer the quick path reads (as the agent's client, tpnode_tui.node.http)
MAX_BODY = 64 * 1024 * 1024
#: a connection not made within this long (the agent's queue full all along) is the ordinary path's to report
CONNECT_TIMEOUT_S = 5.0

_REQUEST = b"GET /v1/snapshot HTTP/1.1\r\nHost: tpnode-agent\r\nAccept: application/json\r\nConnection: close\r\n\r\n"


def _state_dir_problem(settings: Settings) -> Optional[str]:
    """Why this account cannot serve the node itself; None when it can.
    A state dir that is not a directory is a ConfigError, as it is everywhere."""
    from pathlib import Path

    from tpnode_tui.config.statedir import state_dir_exists
    from tpnode_tui.host.identity import user_name
    from tpnode_tui.runtimes import choose_runtime

    if choose_runtime(settings) != "process":
        # The engine's socket decides who may read or start containers, and
        # says so itself; the lock file is only needed to allocate.
        return None
    path = Path(settings.state.dir)
    state_dir_exists(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    user = user_name(os.getuid())
    if existing == path:
        return f"this account, {user}, cannot serve the node itself: it may not write in the node's state dir {path}"
    return (
        f"this account, {user}, cannot serve the node itself: the node's state dir {path} is not there, "
        f"and {user} may not create it"
    )


def node_socket(settings: Settings) -> Path:
    """The socket this node's agent is given: the node's file's (what its unit
    reads), else the default. Only where no agent answers there may ``auto``
    serve the node in this process; any other socket was named by whoever runs
    the command, and means that agent."""
    from pathlib import Path

    from tpnode_tui.config.nodefile import read_node_file
    from tpnode_tui.config.settings import DECLARED

    declared = DECLARED["agent_socket"]
    given = read_node_file(settings.agent.env_file).get(declared.env, "")
    return Path(declared.parse(declared.env, given) if given.strip() else DEFAULT_AGENT_SOCKET)


def agent_for(settings: Settings, *, blocking: bool = False) -> AgentNode:
    """The agent the settings name: this machine's, at its socket, or another
    node's over SSH (``settings.agent.host``). ``blocking``: see :class:`AgentNode`."""
    if settings.agent.host is not None:
        from tpnode_tui.node.ssh import ssh_node

        return ssh_node(settings.agent.host, blocking_calls=blocking)
    from tpnode_tui.node.remote import AgentNode

    return AgentNode(settings.agent.socket, blocking=blocking)


async def open_node(
    settings: Settings,
    *,
    interval: float = 1.0,
    max_wait_s: Optional[float] = None,
    on_wait: Optional[Callable[[str], None]] = None,
) -> Node:
    """The node to talk to, as ``settings.agent.mode`` (auto, on, off) says.

    ``max_wait_s`` and ``on_wait`` bound and report a wait for the allocation
    lock of a node served here (see :class:`~tpnode_tui.locks.AllocationLock`);
    an agent's launches wait in the agent, and the caller bounds those itself.
    With ``settings.agent.host`` it is that node's agent over SSH, or nothing: a node
    asked for by name is never served here instead."""
    if settings.agent.host is not None:
        node = agent_for(settings)
        try:
            await node.reach()
        except BaseException:
            await node.close()
            raise
        return node
    from tpnode_tui.port.types.refusals import AgentUnavailable

    socket = settings.agent.socket
    if settings.agent.mode != "off":
        from tpnode_tui.node.remote import AgentNode

        agent = AgentNode(socket)
        if await agent.answers():
            return agent
        await agent.close()
        if settings.agent.mode == "on":
            raise AgentUnavailable(
                f"no agent answers at {socket} (TUNEPLANE_AGENT=on); start it "
                "(systemctl start tpnode-tui-agent) or ask the node's operator"
            )
        own = node_socket(settings)
        if socket != own:
            raise AgentUnavailable(
                f"no agent answers at {socket}, the socket --agent-socket or TUNEPLANE_AGENT_SOCKET names; "
                f"this node's agent listens at {own}. A socket named means that agent or none, so the node "
                "is not served in this process instead: correct the socket, or give --agent off to serve it here"
            )
        problem = _state_dir_problem(settings)
        if problem is not None:
            raise AgentUnavailable(
                f"no agent answers at {socket}, and {problem}; on a shared node every account goes "
                "through the agent: ask the node's operator to start it (systemctl start tpnode-tui-agent)"
            )
    from tpnode_tui.locks import make_lock
    from tpnode_tui.node.local import LocalNode

    lock = make_lock(settings, max_wait_s=max_wait_s, on_wait=on_wait)
    return LocalNode.from_settings(settings, lock=lock, interval=interval)


# ── the quick path: status --json as this machine's agent wrote it ──────────


def agent_socket() -> Optional[str]:
    """The agent's socket, where the settings would choose this machine's agent
    first; None where they might not (another node, no agent, or a value the
    ordinary path must read and judge)."""
    try:
        environ = beneath(os.environ)  # the node's own file beneath, as the settings read it
    except ConfigError:  # a file that cannot be read: the ordinary path says so
        return None
    if environ.get("TUNEPLANE_HOST", "").strip():
        return None
    if environ.get("TUNEPLANE_AGENT", "").strip().lower() not in ("", "auto", "on"):
        return None
    path = environ.get("TUNEPLANE_AGENT_SOCKET", "")  # taken as written, as the settings take it
    return os.path.expanduser(path) if path.strip() else DEFAULT_AGENT_SOCKET


def fetch(path: str) -> Optional[bytes]:
    """The body of the agent's 200 answer to a status, or None."""
    try:
        # a full queue waited on, as the agent's client does; the answer takes as long as it takes
        sock = connect_unix(path, CONNECT_TIMEOUT_S)
    except OSError:
        return None
    try:
        sock.sendall(_REQUEST)
        with sock.makefile("rb") as answer:
            if not answer.readline(4096).startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")):
                return None
            length = None
            while (line := answer.readline(65536).strip()) != b"":
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length" and value.strip().isdigit():
                    length = int(value)
                elif name == b"transfer-encoding":
                    return None
            if length is None or length > MAX_BODY:
                return None
            body = answer.read(length)
            return body if len(body) == length else None
    except OSError:
        return None
    finally:
        sock.close()


def quick_status() -> Optional[int]:
    """Print the agent's status document and return 0; None: not this way."""
    path = agent_socket()
    body = None if path is None else fetch(path)
    if body is None:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    doc["state_dir_note"] = None  # the agent's node: this process has no state dir to speak of
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()
    return 0
