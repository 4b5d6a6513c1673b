"""The real card, read through NVML and through nvidia-smi: both must say the same.

Skipped where there is no NVIDIA driver (NVML cannot start) or no nvidia-smi.
Run with ``-s`` to see what the card said.
"""

from __future__ import annotations

import shutil

import pytest

from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.probes.smi import SmiProbe

pytestmark = pytest.mark.gpu


@pytest.fixture
async def readings():
    nvml = NvmlProbe()
    try:
        problem = await nvml.start()
        if problem is not None:
            pytest.skip(f"no working NVML here: {problem}")
        if shutil.which("nvidia-smi") is None:
            pytest.skip("nvidia-smi is not on PATH")
        by_nvml = await nvml.read()
    finally:
        await nvml.close()
    by_smi = await SmiProbe().read()
    for reading in (by_nvml, by_smi):
        print(f"\n{reading.source}: count={reading.count} ok={reading.external_probe_ok} problem={reading.problem}")
        for card in reading.cards:
            print(f"  {card}")
    return by_nvml, by_smi


async def test_both_probes_see_the_same_cards(readings):
    by_nvml, by_smi = readings
    assert by_nvml.count and by_nvml.count == by_smi.count
    assert [c.uuid for c in by_nvml.cards] == [c.uuid for c in by_smi.cards]
    assert [c.name for c in by_nvml.cards] == [c.name for c in by_smi.cards]
    assert [c.pci_bus_id for c in by_nvml.cards] == [c.pci_bus_id for c in by_smi.cards]
    assert [c.memory_total_mib for c in by_nvml.cards] == [c.memory_total_mib for c in by_smi.cards]


async def test_each_probe_reads_the_card_fully(readings):
    for reading in readings:
        assert reading.external_probe_ok, reading.problem
        for card in reading.cards:
            assert card.uuid and card.uuid.startswith(("GPU-", "MIG-"))
            assert card.memory_total_mib and card.memory_used_mib is not None
            assert card.memory_used_mib <= card.memory_total_mib
            assert card.processes is not None
