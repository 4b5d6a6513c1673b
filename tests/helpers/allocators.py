"""An allocator for a test: the product's own, over the runtime and probe the test names.

Every test that needs an allocator without a whole node gets it here (conftest's
``make_allocator`` also closes each after the test), so that what an allocator
is made of is said once, as the product says it: a runtime, a probe, the
settings, and the lock the settings name.
"""

from __future__ import annotations

from typing import Any, Optional

from helpers.fakes import MemoryRuntime, StaticProbe
from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.settings import Settings
from tpnode_tui.locks import make_lock


def build_allocator(settings: Settings, runtime: Optional[Any] = None, probe: Optional[Any] = None, **options: Any):
    """The allocator over ``runtime`` and ``probe`` (the in-memory stand-ins of
    helpers/fakes.py where the test names none), with the lock ``settings`` name;
    ``options`` are the allocator's own (``series_resolver``)."""
    return GpuAllocator(
        MemoryRuntime() if runtime is None else runtime,
        StaticProbe() if probe is None else probe,
        settings,
        make_lock(settings),
        **options,
    )
