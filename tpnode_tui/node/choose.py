"""Which node a command talks to: the node's agent, or the node served in this process.

A shared node has one agent, and every account talks to it: two accounts
each allocating from a private state dir would be two truths about one set of
cards, which is the failure this product exists to prevent. So ``auto`` (the
default) uses the agent whenever its socket answers; without one it serves
the node in this process only where this account can use the node's state
dir (a machine one account uses, and the demo); otherwise it says, in one
line, that no agent answers and who can start one. It never suggests another
state dir.

What serving the node here needs (the service, the allocator, the lock, the
runtimes and probes) is imported only when it is served here: a command that
asks the agent never loads it; and the agent's client only where one may be
asked (``TUNEPLANE_AGENT=off`` serves the node here without it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from tpnode_tui.config.defaults import DEFAULT_AGENT_SOCKET
from tpnode_tui.config.nodefile import read_node_file
from tpnode_tui.config.settings import DECLARED, Settings
from tpnode_tui.config.statedir import state_dir_exists
from tpnode_tui.host.identity import user_name
from tpnode_tui.port.node import Node
from tpnode_tui.port.types import AgentUnavailable

if TYPE_CHECKING:
    from tpnode_tui.node.remote import AgentNode


def _state_dir_problem(settings: Settings) -> Optional[str]:
    """Why this account cannot serve the node itself; None when it can.
    A state dir that is not a directory is a ConfigError, as it is everywhere."""
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
