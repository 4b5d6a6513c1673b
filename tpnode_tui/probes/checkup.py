"""Tier A of a card's check, read in a process of its own: ``tpnode_tui.probes.checkup SOURCE UUID``.

NVML calls block inside the driver, and a wedged card (the very one a check
is asked about) can keep a call blocked for minutes. A thread stuck there
can never be stopped; a process can be killed. So a check reads the driver
here, in a child that triage/checkup.py starts with a clean environment and
kills at its deadline, and this answers one line of JSON on its standard
output (:func:`facts_to_json`). The child holds nothing of whoever started
it: no lock, no descriptor, no state; it only reads.

SOURCE is ``nvml`` (the card found by its uuid, ``nvmlDeviceGetHandleByUUID``,
then asked field by field, so a field it cannot read costs only that field)
or ``simulated:PATH`` (the simulated node's file, which may make it hang).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TypeVar

from tpnode_tui.model.checks import CheckFacts
from tpnode_tui.port.wire.reader import Reader, WireError
from tpnode_tui.probes import health
from tpnode_tui.probes.nvml import _ecc_total, _init_problem, _recovery_action
from tpnode_tui.probes.simulated import check_facts

USAGE = "usage: python -I -m tpnode_tui.probes.checkup nvml|simulated:PATH UUID"
_T = TypeVar("_T")


class _Fields:
    """Reads one fact at a time: one that is not supported is None; one that
    fails is None too, and noted with why. A lost GPU ends the reading."""

    def __init__(self, nv: Any) -> None:
        self.nv = nv
        self.unread: list[tuple[str, str]] = []

    def __call__(self, what: str, fn: Callable[..., _T], *args: Any) -> Optional[_T]:
        nv = self.nv
        try:
            return fn(*args)
        except nv.NVMLError_GpuIsLost:
            raise
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            return None
        except (nv.NVMLError, getattr(nv, "NVMLLibraryMismatchError", nv.NVMLError)) as e:
            self.unread.append((what, str(e)))
            return None


def _pstate(value: Optional[int]) -> Optional[int]:
    """P0 to P15; None where NVML says it does not know (NVML_PSTATE_UNKNOWN, 32)."""
    return None if value is None or not 0 <= int(value) <= 15 else int(value)


def _pids(infos: Any) -> tuple[int, ...]:
    return tuple(int(p.pid) for p in infos)


def nvml_facts(nv: Any, uuid: str) -> CheckFacts:
    """What NVML (``nv``: pynvml, or a test's stand-in) says of the card ``uuid``."""
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return CheckFacts(uuid, answered=False, problem=_init_problem(nv, e), reached=False)
    try:
        handle = nv.nvmlDeviceGetHandleByUUID(uuid)
    except nv.NVMLError_GpuIsLost:
        return CheckFacts(uuid, answered=False, problem=health.GPU_LOST)
    except nv.NVMLError as e:
        return CheckFacts(uuid, answered=False, problem=f"the driver finds no card by uuid {uuid} ({e})")
    read = _Fields(nv)
    try:
        rows = read("row remapping", nv.nvmlDeviceGetRemappedRows, handle)
        uncorrected, volatile = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        procs = read("the process list", nv.nvmlDeviceGetComputeRunningProcesses, handle)
        return CheckFacts(
            uuid,
            answered=True,
            ecc_total=read("the ECC error count", _ecc_total, nv, handle),
            ecc_volatile=read(
                "the ECC errors since the driver loaded", nv.nvmlDeviceGetTotalEccErrors, handle, uncorrected, volatile
            ),
            remap_pending=None if rows is None else bool(rows[2]),
            remap_failed=None if rows is None else bool(rows[3]),
            recovery_action=read("the recovery action", _recovery_action, nv, handle),
            link_gen=read("the PCIe link generation", nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            link_gen_max=read("the most PCIe link generation", nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            link_width=read("the PCIe link width", nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
            link_width_max=read("the most PCIe link width", nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
            pstate=_pstate(read("the performance state", nv.nvmlDeviceGetPerformanceState, handle)),
            processes=None if procs is None else _pids(procs),
            unread=tuple(read.unread),
        )
    except nv.NVMLError_GpuIsLost:
        return CheckFacts(uuid, answered=False, problem=health.GPU_LOST)


def facts_to_json(facts: CheckFacts) -> dict[str, Any]:
    return asdict(facts) | {
        "processes": None if facts.processes is None else list(facts.processes),
        "unread": [list(pair) for pair in facts.unread],
    }


def _flag(r: Reader, key: str) -> Optional[bool]:
    value = r.doc.get(key)
    if value is not None and not isinstance(value, bool):
        raise WireError(f"{r.where}.{key} is not true, false or null")
    return value


def _unread(r: Reader) -> tuple[tuple[str, str], ...]:
    pairs = r.items("unread", [])
    if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
        raise WireError(f"{r.where}.unread is not a list of [fact, why]")
    return tuple((p[0], p[1]) for p in pairs)


def facts_from_json(doc: Any) -> CheckFacts:
    """What :func:`facts_to_json` wrote; WireError naming the first thing wrong."""
    r = Reader(doc, "the check's answer")
    processes = r.opt_items("processes")
    return CheckFacts(
        uuid=r.text("uuid"),
        answered=r.flag("answered"),
        problem=r.opt_text("problem"),
        reached=r.flag("reached", True),
        ecc_total=r.opt_whole("ecc_total"),
        ecc_volatile=r.opt_whole("ecc_volatile"),
        remap_pending=_flag(r, "remap_pending"),
        remap_failed=_flag(r, "remap_failed"),
        recovery_action=r.opt_whole("recovery_action"),
        link_gen=r.opt_whole("link_gen"),
        link_gen_max=r.opt_whole("link_gen_max"),
        link_width=r.opt_whole("link_width"),
        link_width_max=r.opt_whole("link_width_max"),
        pstate=r.opt_whole("pstate"),
        processes=None if processes is None else r.wholes("processes"),
        unread=_unread(r),
    )


def read_facts(source: str, uuid: str) -> CheckFacts:
    """The card ``uuid`` as ``source`` says it: ``nvml`` or ``simulated:PATH``."""
    if source.startswith("simulated:"):
        return check_facts(Path(source.split(":", 1)[1]), uuid)
    try:
        import pynvml
    except ImportError:
        return CheckFacts(
            uuid, answered=False, problem="NVML: the nvidia-ml-py package is not installed", reached=False
        )
    return nvml_facts(pynvml, uuid)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not (args[0] == "nvml" or args[0].startswith("simulated:")):
        print(USAGE, file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(facts_to_json(read_facts(args[0], args[1]))) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
