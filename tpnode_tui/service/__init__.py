"""The node as a service: one reading for every reader, every action checked against who asks.

Whoever serves a node (the agent for every account, or an in-process
allocator for its own) runs one :class:`NodeService`: it polls once per
interval however many watch, checks every action of a kernel-named
:class:`~tpnode_tui.host.identity.Caller` against the policy, places through
the one allocator and its lock, logs before it answers, and runs triage. The
parts, one module each, and which may use which: ``pyproject.toml`` and
docs/architecture.md, section 'A shared node'.
"""

from tpnode_tui.service.node import NodeService

__all__ = ["NodeService"]
