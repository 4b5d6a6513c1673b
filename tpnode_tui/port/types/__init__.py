"""The words a client and a node speak, wherever the node is served, by family of operation.

They live below the CLI, the dashboard, the agent's API and the service, so a
client asking an agent one question loads none of the allocator, runtimes or
probes. Each request is read in one place, its ``parse`` (``limits`` None: a
request the node itself kept, such as its queue file, read without today's
limits so a limit lowered since cannot lose it): see docs/architecture.md,
section 'The door' ("One parse").
"""
