"""Probes: what the driver says about each card, asked afresh each time.

Only the probe the settings name is imported (each loads its own driver
bindings or parsers): a command that serves the node here on a simulated or
nvidia-smi node does not pay for NVML, and none pays for the others. The
probe classes are still this package's names, loaded on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import ConfigError
from tpnode_tui.probes.base import Probe, blind_reading

if TYPE_CHECKING:
    from tpnode_tui.probes.auto import AutoProbe
    from tpnode_tui.probes.nvml import NvmlProbe
    from tpnode_tui.probes.simulated import SimulatedProbe
    from tpnode_tui.probes.smi import SmiProbe

__all__ = [
    "AutoProbe",
    "NvmlProbe",
    "Probe",
    "SimulatedProbe",
    "SmiProbe",
    "blind_reading",
    "make_probe",
]

#: each probe class, with the module that defines it
_LAZY = {
    "AutoProbe": "tpnode_tui.probes.auto",
    "NvmlProbe": "tpnode_tui.probes.nvml",
    "SimulatedProbe": "tpnode_tui.probes.simulated",
    "SmiProbe": "tpnode_tui.probes.smi",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tpnode_tui.probes' has no attribute {name!r}")


def make_probe(settings: Settings) -> Probe:
    """The probe ``settings.probe.kind`` names: nvml, smi, auto or simulated:PATH."""
    timeout = settings.probe.timeout_s
    if settings.probe.kind == "nvml":
        from tpnode_tui.probes.nvml import NvmlProbe

        return NvmlProbe(timeout)
    if settings.probe.kind == "smi":
        from tpnode_tui.probes.smi import SmiProbe

        return SmiProbe(timeout, gpus_dir=settings.probe.gpus_dir)
    if settings.probe.kind == "auto":
        from tpnode_tui.probes.auto import AutoProbe

        return AutoProbe(timeout, gpus_dir=settings.probe.gpus_dir)
    path = settings.probe.simulated_path
    if path is not None:
        from tpnode_tui.probes.simulated import SimulatedProbe

        return SimulatedProbe(path, timeout)
    raise ConfigError(f"TUNEPLANE_PROBE={settings.probe.kind!r} is not one of nvml, smi, auto or simulated:PATH")
