"""The port's implementations: how the CLI and the dashboard reach a node.

Two implementations, one behaviour (the calls of
:class:`~tpnode_tui.port.node.Node`): :class:`~.local.LocalNode` runs the
node's service in this process (a single-account machine, the demo), and
:class:`~.remote.AgentNode` talks to the node's agent over its socket. The
clients never reach inside an allocator, a runtime or a lock: what they may
know arrives in snapshots, and what they may do is one of these calls, each
checked by the node against who is asking.

It imports nothing itself: ``status --json`` through the agent (:mod:`.choose`'s
quick path) must cost little more than a Python start.
"""
