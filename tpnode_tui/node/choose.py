"""Which node a command talks to: the node's agent, or the node served in this process.

A shared node has one agent, and every account talks to it: two accounts
each allocating from a private state dir would be two truths about one set of
cards, which is the failure this product exists to prevent. So ``auto`` (the
default) uses the agent whenever its socket answers; without one it serves
the node in this process only where this account can use the node's state
dir (a machine one account uses, and the demo); otherwise it says, in one
line, that no agent answers and who can start one. It never suggests another
state dir.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from ..config import Settings, state_dir_exists
from ..locks import AllocationLock
from ..runtimes import choose_runtime
from .local import LocalNode
from .remote import AgentNode, AgentUnavailable

AnyNode = Union[LocalNode, AgentNode]


def _state_dir_problem(settings: Settings) -> Optional[str]:
    """Why this account cannot serve the node itself; None when it can.
    A state dir that is not a directory is a ConfigError, as it is everywhere."""
    if choose_runtime(settings) != "process":
        # The engine's socket decides who may read or start containers, and
        # says so itself; the lock file is only needed to allocate.
        return None
    path = Path(settings.state_dir)
    state_dir_exists(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    user = _user()
    if existing == path:
        return f"this account ({user}) cannot use the node's state dir {path}"
    return f"this account ({user}) cannot create the node's state dir {path}"


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


async def open_node(settings: Settings, *, lock: Optional[AllocationLock] = None,
                    interval: float = 1.0) -> AnyNode:
    """The node to talk to, as ``settings.agent`` (auto, on, off) says."""
    socket = settings.agent_socket
    if settings.agent != "off":
        agent = AgentNode(socket)
        if await agent.answers():
            return agent
        await agent.close()
        if settings.agent == "on":
            raise AgentUnavailable(
                f"no agent answers at {socket} (TUNEPLANE_AGENT=on); start it "
                "(systemctl start tpnode-tui-agent) or ask the node's operator")
        problem = _state_dir_problem(settings)
        if problem is not None:
            raise AgentUnavailable(
                f"no agent answers at {socket}, and {problem}; on a shared node every account goes "
                "through the agent: ask the node's operator to start it (systemctl start tpnode-tui-agent)")
    return LocalNode.from_settings(settings, lock=lock, interval=interval)
