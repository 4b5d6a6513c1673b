"""The "auto" probe: NVML if it starts, else nvidia-smi if it is on PATH, else blind.

While it has found nothing it looks again on every read: a driver can finish
loading after the dashboard started, and one failed look must not leave the
node blind until a restart. Once it has found a probe it keeps it, so the
source shown in the header does not flicker between the two.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

from tpnode_tui.devices.nvidia import DEFAULT_GPUS_DIR
from tpnode_tui.model.facts import ProbeReading
from tpnode_tui.probes.base import Probe, blind_reading
from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.probes.smi import SmiProbe

#: the source shown while no probe works
NONE = "none"


class AutoProbe:
    def __init__(self, timeout_s: float = 10.0, binary: str = "nvidia-smi", gpus_dir: Path = DEFAULT_GPUS_DIR) -> None:
        self.timeout_s = timeout_s
        self.binary = binary
        #: where the nvidia-smi probe reads each card's device minor
        self.gpus_dir = gpus_dir
        self._nvml = NvmlProbe(timeout_s)
        self._found: Optional[Probe] = None

    @property
    def found(self) -> Optional[Probe]:
        """The probe in use, once one works."""
        return self._found

    @property
    def source(self) -> str:
        return self._found.source if self._found is not None else NONE

    async def read(self) -> ProbeReading:
        if self._found is None:
            tried = await self._find()
            if self._found is None:
                return blind_reading(NONE, "no way to read the GPUs: " + "; ".join(tried))
        return await self._found.read()

    async def _find(self) -> list[str]:
        """Pick the first probe that works; else say what each attempt ran into."""
        nvml_problem = await self._nvml.start()
        if nvml_problem is None:
            self._found = self._nvml
            return []
        if shutil.which(self.binary) is not None:
            await self._nvml.close()
            self._found = SmiProbe(self.timeout_s, self.binary, self.gpus_dir)
            return []
        return [nvml_problem, f"{self.binary}: not found on PATH"]

    async def close(self) -> None:
        await self._nvml.close()
        if self._found is not None:
            await self._found.close()
