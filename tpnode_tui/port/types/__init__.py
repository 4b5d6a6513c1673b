"""The words a client and a node speak, wherever the node is served.

The CLI, the dashboard, the agent's API and the node's service all use these
types, so they live below all of them: a client that imported them from the
service would load the allocator, the runtimes and the probes to ask an agent
one question. What a node is asked (one request type per operation of
:mod:`~tpnode_tui.port.operations`: :class:`LaunchRequest`,
:class:`ReserveRequest`, :class:`EvictRequest` ...), what it answers
(:class:`LaunchResult`, :class:`Reading`, :class:`You`, :class:`NodeView`,
a page of the log) and the refusals only the port has (:class:`OverQuota`,
:class:`Cancelled`, :class:`AgentUnavailable`) are all here; the calls
themselves are :class:`tpnode_tui.node.Node`.

Each request is read in one place, its ``parse``: at the agent's door from
the body (or a GET's query string) an account sent, in-process from the same
JSON, and from the agent's queue file when a queued launch is read back. So
nothing the door takes can fail to load later, and every rule and limit is
applied the same way wherever a request comes in. ``limits`` None reads a
request the node itself kept (its queue file): it was within the limits when
it was taken, and a limit lowered since must not lose it.
"""
