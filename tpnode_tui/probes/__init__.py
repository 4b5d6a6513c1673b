"""Probes: what the driver says about each card, asked afresh each time."""

from __future__ import annotations

from tpnode_tui.config.settings import Settings
from tpnode_tui.model.errors import ConfigError
from tpnode_tui.probes.auto import AutoProbe
from tpnode_tui.probes.base import Probe, blind_reading
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


def make_probe(settings: Settings) -> Probe:
    """The probe ``settings.probe.kind`` names: nvml, smi, auto or simulated:PATH."""
    timeout = settings.probe.timeout_s
    if settings.probe.kind == "nvml":
        return NvmlProbe(timeout)
    if settings.probe.kind == "smi":
        return SmiProbe(timeout, gpus_dir=settings.probe.gpus_dir)
    if settings.probe.kind == "auto":
        return AutoProbe(timeout, gpus_dir=settings.probe.gpus_dir)
    path = settings.probe.simulated_path
    if path is not None:
        return SimulatedProbe(path, timeout)
    raise ConfigError(f"TUNEPLANE_PROBE={settings.probe.kind!r} is not one of nvml, smi, auto or simulated:PATH")
