"""Probes: what the driver says about each card, asked afresh each time."""

from __future__ import annotations

from ..config import Settings
from ..model import ConfigError
from .auto import AutoProbe
from .base import Probe, blind_reading
from .nvml import NvmlProbe
from .simulated import SimulatedProbe
from .smi import SmiProbe

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
    """The probe ``settings.probe`` names: nvml, smi, auto or simulated:PATH."""
    timeout = settings.probe_timeout_s
    if settings.probe == "nvml":
        return NvmlProbe(timeout)
    if settings.probe == "smi":
        return SmiProbe(timeout)
    if settings.probe == "auto":
        return AutoProbe(timeout)
    path = settings.simulated_path
    if path is not None:
        return SimulatedProbe(path, timeout)
    raise ConfigError(f"TUNEPLANE_PROBE={settings.probe!r} is not one of nvml, smi, auto or simulated:PATH")
