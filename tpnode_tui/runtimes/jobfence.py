"""How a process job is fenced to its cards' device files, as the node's policy says.

The mechanism is :mod:`tpnode_tui.devices`; this module decides, for one job
of the process runtime, whether it is to be fenced (``TUNEPLANE_FENCE``), to
what (the device numbers the allocator recorded when it picked the cards),
and what the job's record says about it: by which mechanism, or why not, in
words a person can act on. Under ``required`` a job that cannot be fenced is
refused before anything of it runs.

A reservation runs nothing of its own, so there is nothing to fence; it says
so. A shell on it (``tpnode-tui shell``, :mod:`.shells`) is fenced here as a
job is, with the reservation's grant; what its owner runs by hand outside
such a shell is fenced by nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tpnode_tui.devices import v1
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.fence import ProcFiles, fence, node_fences
from tpnode_tui.devices.rules import Grant, SliceGrant
from tpnode_tui.model.errors import ConfigError
from tpnode_tui.model.jobs import DeviceFence, DeviceGrant

AUTO, REQUIRED, OFF = "auto", "required", "off"

#: why a job is not fenced, where the reason is the node's setting or the job's kind
FENCE_OFF = "TUNEPLANE_FENCE=off: this node does not fence jobs"
RESERVATION = "a reservation runs nothing of its own; what its owner runs outside tpnode-tui is not fenced"
NOT_GRANTED = "the allocator recorded no device numbers for it (it was not placed by the allocator)"


@dataclass(frozen=True)
class JobFence:
    """What fencing one job made: the answer for its record, and the v1 devices
    cgroup its command must join (and that is removed after it), if any."""

    fence: DeviceFence
    v1_cgroup: Optional[Path] = None


def rules_grant(granted: DeviceGrant) -> Grant:
    """The allocator's record of a job's device numbers, as the fence's rules take them."""
    return Grant(
        cards=frozenset(granted.cards),
        slices=tuple(SliceGrant(s.card, s.gpu_instance, s.compute_instance) for s in granted.slices),
    )


def _why_not(policy: str, granted: Optional[DeviceGrant], runs_command: bool) -> str:
    """Why the job is not to be fenced at all, before any mechanism is tried; "" when it is to be."""
    if policy == OFF:
        return FENCE_OFF
    if not runs_command:
        return RESERVATION
    if granted is None:
        return NOT_GRANTED
    if granted.unknown:
        return f"its cards' device files cannot be named: {granted.unknown}"
    return ""


def fence_job(
    policy: str,
    granted: Optional[DeviceGrant],
    *,
    name: str,
    cgroup: Optional[Path],
    runs_command: bool,
    files: ProcFiles,
) -> JobFence:
    """Fence job ``name`` (whose own cgroup v2 is ``cgroup``, None where it has
    none) to ``granted``, as ``policy`` says; never raises for a job that
    cannot be fenced: the answer says why (see :func:`refuse_unfenced`)."""
    why = _why_not(policy, granted, runs_command)
    if why:
        return JobFence(DeviceFence.missing(why))
    assert granted is not None
    made = fence(rules_grant(granted), cgroup=cgroup, name=name, files=files)
    if not made.fenced:
        return JobFence(DeviceFence.missing(made.problem))
    return JobFence(DeviceFence.by(made.mechanism), made.v1_cgroup)


def refuse_unfenced(policy: str, name: str, made: JobFence) -> None:
    """Under ``required``, refuse a job that runs a command and is not fenced:
    ConfigError (exit 2), naming the setting and why the job cannot be fenced."""
    if policy != REQUIRED or made.fence.fenced or made.fence.problem == RESERVATION:
        return
    raise ConfigError(
        f"job {name!r} cannot be fenced to its cards ({made.fence.problem}), and TUNEPLANE_FENCE=required "
        "starts no job that is not; run it through the node's agent, or ask an operator about the node's cgroups"
    )


def undo(made: JobFence) -> None:
    """Remove what fencing a job made, for a job that is not started after all."""
    if made.v1_cgroup is not None:
        try:
            v1.remove(made.v1_cgroup)
        except CannotFence:
            pass  # empty, since nothing joined it yet; if it stays, it holds nothing


def node_fence(policy: str, v2_parent: Optional[Path], v2_why: str, files: ProcFiles) -> DeviceFence:
    """Whether this node fences the jobs the process runtime starts, found by
    fencing a throwaway cgroup (see :func:`tpnode_tui.devices.fence.node_fences`)."""
    if policy == OFF:
        return DeviceFence.missing(FENCE_OFF)
    can = node_fences(v2_parent, v2_why, files)
    return DeviceFence.by(can.mechanism) if can.fenced else DeviceFence.missing(can.problem)
