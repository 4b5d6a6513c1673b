"""The fence's cost per job cgroup: what ``fence()`` adds to a launch (target: under 5 ms).

A job's cgroup is made (not timed: the process runtime makes it today), then
``fence()`` is timed: it reads /proc/devices and mig-minors, works out the
rules and, on cgroup v2, builds the device program, loads it and attaches it
to the cgroup; on cgroup v1, makes the job's cgroup of the devices hierarchy
and writes its deny list. Then the cgroup is removed (timed apart for v1,
where removing it is the fence's own work). The driver's files are those of a
node with 8 cards and a driver that lists MIG capabilities for 32 (4,322
lines of mig-minors, as a real one writes), so the parsing is paid in full.

The parts are timed apart too (reading the files and deciding, building the
program, loading and attaching it), and ``node_fences`` once per round, the
check a node makes at start. Every cgroup made is removed, also when
interrupted. Needs root, cgroup v2 where this process can make cgroups, and
the v1 devices controller; a part the machine does not have is reported as
not measured. The driver's list is parsed once per text (it does not change
while the driver is loaded), so one row times a fence that parses it.

``python bench/fence.py [--quick]`` prints the figures; ``bench/run.py`` can
take it as a section (``run(quick)``).
"""

from __future__ import annotations

import secrets
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional

from common import Limit, Row, Section
from tpnode_tui.devices import v1
from tpnode_tui.devices.bpf import attach_program
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.fence import Fenced, ProcFiles, fence, node_fences, read_rules
from tpnode_tui.devices.nvidia import parse_mig_minors
from tpnode_tui.devices.program import device_program
from tpnode_tui.devices.rules import Grant, SliceGrant
from tpnode_tui.runtimes.jobprocs import cgroup_parent

TITLE = "9. The fence: its cost per job cgroup"
#: the most the fence may add to a launch, the goal it was built to
TARGET_MS = 5.0
CARD_JOB = Grant(cards=frozenset({2}))
MIG_JOB = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))


def _driver_files(root: Path) -> ProcFiles:
    """/proc/devices and mig-minors as a node with the NVIDIA driver has them."""
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(32):
        for gi in range(15):
            for name in [f"gpu{gpu}/gi{gi}/access"] + [f"gpu{gpu}/gi{gi}/ci{ci}/access" for ci in range(8)]:
                lines.append(f"{name} {minor}")
                minor += 1
    (root / "mig-minors").write_text("\n".join(lines) + "\n")
    (root / "devices").write_text(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-uvm\n511 nvidia-caps\n\nBlock devices:\n"
    )
    return ProcFiles(devices=root / "devices", mig_minors=root / "mig-minors")


@contextmanager
def _job_cgroup(parent: Path) -> Iterator[Path]:
    path = parent / f"tpnode-tui.bench-fence.{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        path.rmdir()


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _v2_rows(parent: Path, files: ProcFiles, rounds: int) -> list[Row]:
    card = Row("fence_v2_card_ms", "cgroup v2, a card job: fence()")
    mig = Row("fence_v2_mig_ms", "cgroup v2, a MIG job: fence()")
    first = Row("fence_v2_first_ms", "cgroup v2, a card job, the driver's list not parsed yet")
    rules = Row("fence_rules_ms", "  of which: read the driver's files, decide the rules")
    build = Row("fence_program_ms", "  of which: build the program")
    attach = Row("fence_attach_ms", "  of which: load and attach it")
    for _ in range(rounds):
        for row, grant, parsed in ((card, CARD_JOB, True), (mig, MIG_JOB, True), (first, CARD_JOB, False)):
            if not parsed:
                parse_mig_minors.cache_clear()
            with _job_cgroup(parent) as cgroup:
                row.samples.append(_timed(partial(_fence, grant, cgroup, files)))
        rules.samples.append(_timed(partial(read_rules, CARD_JOB, files)))
        decided = read_rules(CARD_JOB, files)
        build.samples.append(_timed(partial(device_program, decided)))
        with _job_cgroup(parent) as cgroup:
            attach.samples.append(_timed(partial(attach_program, cgroup, device_program(decided))))
    return [card, mig, first, rules, build, attach]


def _v1_rows(files: ProcFiles, rounds: int) -> list[Row]:
    rows = {
        CARD_JOB: (Row("fence_v1_card_ms", "cgroup v1, a card job: fence()"), Row("fence_v1_remove_ms", "  remove")),
        MIG_JOB: (Row("fence_v1_mig_ms", "cgroup v1, a MIG job: fence()"), Row("fence_v1_mig_remove_ms", "  remove")),
    }
    for _ in range(rounds):
        for grant, (made, removed) in rows.items():
            start = time.perf_counter()
            fenced = _fence(grant, None, files)
            made.samples.append(time.perf_counter() - start)
            assert fenced.v1_cgroup is not None
            removed.samples.append(_timed(partial(v1.remove, fenced.v1_cgroup)))
    return [row for pair in rows.values() for row in pair]


def _fence(grant: Grant, cgroup: Optional[Path], files: ProcFiles) -> Fenced:
    """fence(), which must fence: a figure for a fence that was not made would mean nothing."""
    fenced = fence(grant, cgroup=cgroup, name="bench", files=files)
    if not fenced.fenced:
        raise CannotFence(fenced.problem)
    return fenced


def run(quick: bool) -> Section:
    section = Section(TITLE)
    rounds = 20 if quick else 200
    root = Path(tempfile.mkdtemp(prefix="tpnode-bench-fence-"))
    try:
        files = _driver_files(root)
        parent, why = cgroup_parent()
        if parent is None:
            section.notes.append(f"cgroup v2 not measured: {why}")
        else:
            section.rows += _v2_rows(parent, files, rounds)
            node = Row("fence_node_check_ms", "node_fences(): the node's check at start (v2)")
            node.samples += [_timed(partial(node_fences, parent, files=files)) for _ in range(rounds // 4 or 1)]
            section.rows.append(node)
        try:
            v1.hierarchy_dir()
            section.rows += _v1_rows(files, rounds)
        except CannotFence as e:
            section.notes.append(f"cgroup v1 not measured: {e}")
    finally:
        shutil.rmtree(root)
    for row in section.rows:
        if row.key in ("fence_v2_card_ms", "fence_v2_mig_ms", "fence_v1_card_ms", "fence_v1_mig_ms"):
            section.limits.append(Limit(f"{row.label} (ms)", row, TARGET_MS))
    section.notes.append("wall-clock time per call; the job's cgroup v2 is made and removed outside the timing")
    return section


def _print(section: Section) -> None:
    print(section.title)
    for row in section.rows:
        print(f"  {row.label:<55} median {row.median:8.3f} ms   p99 {row.p99:8.3f} ms   ({len(row.samples)} runs)")
    for limit in section.limits:
        print(f"  {limit.label}: under {limit.bound} ms: {'met' if limit.met else 'MISSED'}")
    for note in section.notes:
        print(f"  note: {note}")


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--quick"]):
        print(__doc__, file=sys.stderr)
        return 2
    _print(run(quick=args == ["--quick"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
