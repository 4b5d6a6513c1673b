"""Many nodes: each agent publishes its snapshot to a Redis, and ``tpnode-tui fleet`` reads them all.

The fleet is a view, never in the allocation path: an agent that cannot reach
the fleet's Redis keeps allocating, and nothing read here decides where a job
goes. ``record`` holds the formats and the rules (no I/O, no redis-py);
``publisher`` (the agent's side) and ``reader`` (``tpnode-tui fleet``'s) talk
to Redis and are imported only when a fleet URL is set, as the Redis lease is.
"""
