"""The allocator: read the node afresh, pick cards or a MIG slice, create the job under the lock.

Every launch, from the dashboard, the CLI or the agent, goes through one
:class:`~tpnode_tui.allocator.allocator.GpuAllocator` and its lock.
"""
