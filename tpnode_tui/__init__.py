"""tpnode-tui: the GPU allocator and live dashboard for one GPU node.

The allocator's names are loaded on first use, not with the package: every
command imports the package, and one that only asks the node's agent must not
pay for the allocator, the runtimes and the probes.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["GpuAllocator", "GpuOccupancy", "NeverFits", "NoCapacity", "pick_gpus", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "GpuAllocator":
        from .allocator import GpuAllocator

        return GpuAllocator
    if name in ("GpuOccupancy", "NeverFits", "NoCapacity", "pick_gpus"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'tpnode_tui' has no attribute {name!r}")
