"""The allocator: read the node afresh, pick cards or a MIG slice, create the job under the lock.

Every launch, from the dashboard, the CLI or the agent, goes through one
:class:`~tpnode_tui.allocator.allocator.GpuAllocator` and its lock.

The parts, each a module (``pyproject.toml`` says which may use which):

- ``allocator``: :class:`~tpnode_tui.allocator.allocator.GpuAllocator`: the reads, the
  lock, launch and reserve, the lease check, stop, extend and reclaim
- ``picking``: which whole cards or which MIG slice a launch gets, and each refusal
- ``repeats``: a launch asked again under its run id: the same request, or a Conflict
- ``missing``: the problems of a job that names cards or MIG slices nobody can see
- ``holders``: whose each process on a card or slice is, against the job holding it
"""
