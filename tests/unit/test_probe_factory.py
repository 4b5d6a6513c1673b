"""make_probe, and the auto probe's choice between NVML, nvidia-smi and nothing."""

from __future__ import annotations

import sys

import pytest

from helpers.nvml import FakeNvml, NVMLError_DriverNotLoaded, NVMLError_LibraryNotFound
from helpers.paths import stub_smi_on_path
from tpnode_tui.config.settings import load_settings
from tpnode_tui.probes import AutoProbe, NvmlProbe, SimulatedProbe, SmiProbe, make_probe

NOTHING_WORKS = (
    "no way to read the GPUs: NVML: library not found (is the NVIDIA driver installed?); nvidia-smi: not found on PATH"
)


@pytest.fixture
async def closing():
    probes = []
    yield probes.append
    for probe in probes:
        await probe.close()


@pytest.fixture
def no_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))


def nvml(monkeypatch, fake):
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.mark.parametrize(
    "setting, kind, source",
    [("nvml", NvmlProbe, "nvml"), ("smi", SmiProbe, "nvidia-smi"), ("auto", AutoProbe, "none")],
)
async def test_make_probe_builds_what_the_setting_names(closing, setting, kind, source):
    probe = make_probe(load_settings({}, probe_kind=setting, probe_timeout_s=3))
    closing(probe)
    assert isinstance(probe, kind) and probe.source == source
    assert probe.timeout_s == 3


async def test_make_probe_simulated(scene):
    probe = make_probe(load_settings({"TUNEPLANE_PROBE": f"simulated:{scene}"}))
    assert isinstance(probe, SimulatedProbe) and probe.path == scene
    assert (await probe.read()).count == 8


async def test_auto_prefers_nvml(monkeypatch, closing):
    nvml(monkeypatch, FakeNvml())
    stub_smi_on_path(monkeypatch)
    probe = AutoProbe()
    closing(probe)
    reading = await probe.read()
    assert (reading.source, probe.source, reading.count, reading.problem) == ("nvml", "nvml", 2, None)


async def test_auto_falls_back_to_nvidia_smi(monkeypatch, closing):
    nvml(monkeypatch, FakeNvml(init_error=NVMLError_LibraryNotFound, init_failures=99))
    stub_smi_on_path(monkeypatch)
    probe = AutoProbe()
    closing(probe)
    reading = await probe.read()
    assert (reading.source, probe.source, reading.count, reading.problem) == ("nvidia-smi", "nvidia-smi", 2, None)


async def test_auto_with_nothing_is_blind_and_says_what_it_tried(monkeypatch, closing, no_smi):
    nvml(monkeypatch, FakeNvml(init_error=NVMLError_LibraryNotFound, init_failures=99))
    probe = AutoProbe()
    closing(probe)
    reading = await probe.read()
    assert (reading.source, probe.source) == ("none", "none")
    assert (reading.problem, reading.cards, reading.external_probe_ok) == (NOTHING_WORKS, (), False)


async def test_auto_tries_nvml_again_while_blind(monkeypatch, closing, no_smi):
    fake = nvml(monkeypatch, FakeNvml(init_error=NVMLError_DriverNotLoaded, init_failures=1))
    probe = AutoProbe()
    closing(probe)
    assert (await probe.read()).source == "none"
    reading = await probe.read()  # the driver finished loading
    assert (reading.source, reading.count) == ("nvml", 2)
    assert fake.calls["init"] == 2


async def test_auto_finds_nvidia_smi_that_appears_later_and_keeps_it(monkeypatch, closing, no_smi):
    fake = nvml(monkeypatch, FakeNvml(init_error=NVMLError_LibraryNotFound, init_failures=99))
    probe = AutoProbe()
    closing(probe)
    assert (await probe.read()).problem == NOTHING_WORKS

    stub_smi_on_path(monkeypatch)
    assert (await probe.read()).source == "nvidia-smi"

    fake.init_error = None  # NVML would work now, but the choice stands
    assert (await probe.read()).source == "nvidia-smi"
    assert fake.calls["init"] == 2
