"""Section 1: one occupancy read, through NVML against the nvidia-smi route.

(a) Our NVML probe over the in-memory fake NVML (every driver call is a
dictionary lookup), so what is timed is our own overhead: the worker thread,
the field-by-field reading, the occupancy rules, the snapshot.

(b) The nvidia-smi route over tests/stubs/nvidia-smi on PATH, which prints
what a real H200 node prints. It pays for the processes it spawns; a real
nvidia-smi also initialises the driver on every run and is slower still, so
the ratio is a lower bound. Both the seed's own ``GpuAllocator.occupancy()``
and our ``SmiProbe`` go this way; each is labelled.

Every card is idle and no platform job runs (a runtime whose ``ps()`` is
empty), so the probe and our code are all there is to time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Iterator, Optional

from common import Limit, Ratio, Row, Section, interleave, run_async
from helpers.nvml import FakeCard, FakeNvml
from helpers.paths import STUBS
from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.config.settings import load_settings
from tpnode_tui.locks import make_lock
from tpnode_tui.model.jobs import DeviceFence
from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.probes.smi import SmiProbe

SMI_STUB = STUBS / "nvidia-smi"


class NoJobs:
    """A runtime with no platform jobs: occupancy then costs the probe and our code only."""

    name = "none"

    def describe(self) -> str:
        return "no runtime (benchmark)"

    def node_fence(self) -> DeviceFence:
        return DeviceFence.missing("a benchmark's runtime starts no jobs")

    async def ps(self) -> list:
        return []

    async def close(self) -> None:
        return None


def load_seed(path: Path) -> Optional[ModuleType]:
    """The seed's allocator module, loaded from its file; None when it is not there."""
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("tpnode_seed_allocator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextmanager
def smi_on_path(cards: int) -> Iterator[None]:
    """The nvidia-smi stub first on PATH, answering for ``cards`` cards.

    It is run by this interpreter directly, isolated and without site
    packages, not through its ``#!/usr/bin/env python3`` line: that can find a
    version manager's shell shim first, which costs several times what the
    interpreter does, and would flatter NVML. What remains (a bare Python
    start, some 10-20 ms) is less than a real nvidia-smi spends starting the
    driver library, so the ratio stays a lower bound.
    """
    saved = {k: os.environ.get(k) for k in ("PATH", "TPN_SMI_GPUS")}
    bindir = Path(tempfile.mkdtemp(prefix="tpb-smi-"))
    try:
        wrapper = bindir / "nvidia-smi"
        wrapper.write_text(
            f"#!{sys.executable} -IS\nexec(compile(open({str(SMI_STUB)!r}).read(), {str(SMI_STUB)!r}, 'exec'))\n"
        )
        wrapper.chmod(0o755)
        os.environ["PATH"] = f"{bindir}{os.pathsep}{saved['PATH'] or ''}"
        os.environ["TPN_SMI_GPUS"] = str(cards)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(bindir, ignore_errors=True)


async def _measure(
    cards: int, seed: Optional[ModuleType], rounds: int, nvml_per_round: int, state_dir: Path
) -> dict[str, list[float]]:
    settings = load_settings({}, state_dir=str(state_dir))
    fake = FakeNvml([FakeCard() for _ in range(cards)])
    nvml = GpuAllocator(NoJobs(), NvmlProbe(nvml=fake), settings, make_lock(settings))
    smi = GpuAllocator(NoJobs(), SmiProbe(), settings, make_lock(settings))
    calls = {
        "nvml_occupancy": (nvml.occupancy, nvml_per_round),
        "nvml_snapshot": (nvml.snapshot, nvml_per_round),
        "smi_occupancy": (smi.occupancy, 1),
        "smi_snapshot": (smi.snapshot, 1),
    }
    if seed is not None:
        seed_alloc = seed.GpuAllocator(
            NoJobs(),
            SimpleNamespace(
                local_gpu_count=0, cluster_profile="", local_check_external_gpus=True, local_check_gpu_health=True
            ),
        )
        calls["seed_occupancy"] = (seed_alloc.occupancy, 1)
    try:
        occ = await nvml.occupancy()
        assert occ.total == cards and len(occ.free) == cards, occ.explain()
        occ = await smi.occupancy()
        assert occ.total == cards and len(occ.free) == cards, occ.explain()
        return await interleave(calls, rounds)
    finally:
        await nvml.close()
        await smi.close()


def run(seed_path: Path, quick: bool) -> Section:
    section = Section("1. Occupancy refresh (idle cards, no platform jobs)")
    seed = load_seed(seed_path)
    rounds = 10 if quick else 60
    nvml_per_round = 20 if quick else 50
    rows: dict[tuple[int, str], Row] = {}
    with tempfile.TemporaryDirectory(prefix="tpb-occ-") as tmp:
        for cards in (8, 64):
            with smi_on_path(cards):
                times = run_async(_measure(cards, seed, rounds, nvml_per_round, Path(tmp)))
            labels = {
                "nvml_occupancy": f"occupancy(), {cards} cards, NVML probe over fake NVML",
                "nvml_snapshot": f"snapshot(), {cards} cards, NVML probe over fake NVML",
                "seed_occupancy": f"occupancy(), {cards} cards, seed GpuAllocator, nvidia-smi stub",
                "smi_occupancy": f"occupancy(), {cards} cards, our SmiProbe, nvidia-smi stub",
                "smi_snapshot": f"snapshot(), {cards} cards, our SmiProbe, nvidia-smi stub",
            }
            for name, samples in times.items():
                row = Row(f"{name}_{cards}", labels[name], samples)
                rows[(cards, name)] = row
                section.rows.append(row)
    # The seed is the route we replaced, so it is what "the nvidia-smi route" means
    # in the headline figures; our SmiProbe stands in only when the seed is absent.
    smi_name = "seed_occupancy" if seed is not None else "smi_occupancy"
    for cards in (8, 64):
        section.ratios.append(
            Ratio(
                f"occupancy_speedup_{cards}",
                f"occupancy(), {cards} cards: {'seed' if seed else 'SmiProbe'} nvidia-smi route / NVML",
                rows[(cards, smi_name)],
                rows[(cards, "nvml_occupancy")],
                target=20 if cards == 8 else None,
            )
        )
        section.ratios.append(
            Ratio(
                f"occupancy_speedup_smiprobe_{cards}",
                f"occupancy(), {cards} cards: our SmiProbe / NVML",
                rows[(cards, "smi_occupancy")],
                rows[(cards, "nvml_occupancy")],
            )
        )
    section.limits.append(Limit("occupancy(), 8 cards, NVML (median ms)", rows[(8, "nvml_occupancy")], 2.0))
    section.notes.append(
        f"NVML rows: {rounds * nvml_per_round} calls each; nvidia-smi rows: {rounds} calls each, "
        "interleaved round by round with the NVML ones."
    )
    if seed is None:
        section.notes.append(f"the seed was not found at {seed_path}: the nvidia-smi route is our SmiProbe")
    else:
        section.notes.append(
            "the seed spawns nvidia-smi 3 times per occupancy() on an idle node "
            "(2 side by side, then health); our SmiProbe 3 side by side"
        )
    return section
