"""tpnode-tui: the GPU allocator and live dashboard for one GPU node."""
from .allocator import GpuAllocator
from .model import GpuOccupancy, NeverFits, NoCapacity, pick_gpus

__version__ = "0.1.0"

__all__ = ["GpuAllocator", "GpuOccupancy", "NeverFits", "NoCapacity", "pick_gpus", "__version__"]
