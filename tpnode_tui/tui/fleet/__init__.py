"""``tpnode-tui fleet``: every node that publishes to the fleet's Redis, one row each. It only reads.

A row is a node; one that stopped publishing, cannot be read, or that two
agents claim shows its cards as unknown and counts none free. ``g`` opens a
node's grid read-only, ``enter`` its own dashboard over SSH. Laid out like
the dashboard (``app``, ``screens``, ``wording``, ``ssh``); every string came
from Redis and is escaped as it is shown. See docs/architecture.md, section
'Many nodes'.
"""
