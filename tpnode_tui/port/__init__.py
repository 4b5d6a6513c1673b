"""The one narrow port clients reach a node through: its calls (node.py), the words they speak
(types.py) and the snapshot as JSON (wire.py).

Below everything that serves or uses a node: the dashboard and the CLI import
these, never the service, the allocator or the runtimes behind them.
"""
