"""tpnode-tui: the GPU allocator and live dashboard for one GPU node.

The allocator's names are loaded on first use, not with the package: every
command imports the package, and one that only asks the node's agent must not
pay for the allocator, the runtimes and the probes.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing itself is not imported: every command pays for what the package imports
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

#: the public names, each with the module that defines it
_LAZY = {
    "GpuAllocator": "tpnode_tui.allocator.allocator",
    "GpuOccupancy": "tpnode_tui.model.occupancy",
    "NeverFits": "tpnode_tui.model.errors",
    "NoCapacity": "tpnode_tui.model.errors",
    "pick_gpus": "tpnode_tui.core.placement",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tpnode_tui' has no attribute {name!r}")
