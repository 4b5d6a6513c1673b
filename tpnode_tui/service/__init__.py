"""The node as a service: one reading for every reader, every action checked against who asks.

Whoever serves a node (the agent for every account, or an in-process
allocator for its own) runs one :class:`NodeService`. It polls the node once
per interval, however many dashboards watch: twenty dashboards cost one probe
and one ``ps()`` per interval, not twenty, and they all see the same reading.
Every action arrives with a :class:`~tpnode_tui.host.identity.Caller` the kernel
named, is checked against the :class:`~tpnode_tui.core.policy.Policy`, goes through
the one :class:`~tpnode_tui.allocator.allocator.GpuAllocator` and its lock, and is
written to the node's log before its answer is given.

Launches that wait are visible: one waiting for the allocation lock, one
placing its job, and one queued for cards are all listed in the snapshot's
queue, and each can be cancelled by its owner or an operator until it holds
cards. A launch whose asker goes away while it waits for the lock is dropped;
once it holds the lock it is finished, so a job is never left half-made.

Triage lives here too, so an agent and an in-process dashboard both have it:
the XID watcher runs beside the polls and drains a card an XID says must be
reset; each reading is compared with the last (intruders appearing and
leaving, health changes, ends and expiries go to the node's log; idle
reservations are marked); each card's last hour is kept in fixed rings; and
operators drain, undrain and evict through the same checks and log.

The parts, each a module (``pyproject.toml`` says which may use which):

- ``node``: :class:`NodeService`, which puts the parts together and answers for them
- ``readings``: the polls, their subscribers, the node as last read, the cards' history
- ``xids``: the XID watcher, and what each XID does to its card
- ``launches``: launch and reserve, the queue and its rounds, launches in flight, cancel
- ``operators``: drain, undrain and evict (operators only)
- ``jobs``: stop, extend and reclaim
- ``journal``: the node's log as actions and events write it; audit, events, follow
- ``changes``: the count of actions a reading must show, and the wake for a poll soon
- ``accounts``: an account's groups, the owner an operator names, whom a job runs as
"""

from tpnode_tui.service.node import NodeService

__all__ = ["NodeService"]
