"""What a runtime calls: fence a job to the device files of its cards, or say in words why it cannot.

Tried in order: a device program on the job's own cgroup v2
(:data:`MECHANISM_V2`), else a cgroup of the v1 ``devices`` controller made
for the job (:data:`MECHANISM_V1`, :attr:`Fenced.v1_cgroup`: its processes
join it with :func:`.v1.join` before the command runs, and it is removed with
:func:`.v1.remove`). A node that can do neither is not an error:
:func:`fence` returns a :class:`Fenced` saying why, for the policy and for
people; :func:`node_fences` asks the same of the node by trying. See
docs/architecture.md, section 'Which mechanism where'.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tpnode_tui.devices import v1
from tpnode_tui.devices.bpf import attach_program
from tpnode_tui.devices.errors import CannotFence, errno_words
from tpnode_tui.devices.nvidia import DEFAULT_MIG_MINORS, DEFAULT_PROC_DEVICES, read_majors, read_mig_minors
from tpnode_tui.devices.program import device_program
from tpnode_tui.devices.rules import DeviceRules, Grant, device_rules

#: A device program attached to the job's cgroup v2.
MECHANISM_V2 = "cgroup-v2"
#: The job's own cgroup in the v1 devices hierarchy, with a deny list.
MECHANISM_V1 = "cgroup-v1"
#: The name the trial of :func:`node_fences` gives its throwaway cgroups.
_TRIAL = "fence-check"


@dataclass(frozen=True)
class ProcFiles:
    """Where the kernel and the driver are read: /proc's files, parameters so tests can point them at their own."""

    devices: Path = DEFAULT_PROC_DEVICES
    mig_minors: Path = DEFAULT_MIG_MINORS
    mountinfo: Path = v1.DEFAULT_MOUNTINFO
    own_cgroup: Path = v1.DEFAULT_OWN_CGROUP


@dataclass(frozen=True)
class Fenced:
    """Whether a job is fenced: by which mechanism, or why not."""

    #: :data:`MECHANISM_V2`, :data:`MECHANISM_V1`, or "" when it is not fenced
    mechanism: str = ""
    #: why it is not fenced, in words; "" when it is
    problem: str = ""
    #: the v1 devices cgroup its processes must join, and that is removed after them (cgroup v1 only)
    v1_cgroup: Optional[Path] = None

    @property
    def fenced(self) -> bool:
        return bool(self.mechanism)


def read_rules(grant: Grant, files: ProcFiles = ProcFiles()) -> DeviceRules:
    """The rules for a job holding ``grant``: the node's majors and MIG capabilities as the driver lists them now."""
    majors = read_majors(files.devices)
    mig, mig_why = None, ""
    if majors.caps is not None:
        try:
            mig = read_mig_minors(files.mig_minors)
        except CannotFence as e:
            mig_why = str(e)
    return device_rules(grant, majors, mig, mig_why)


def _in_v1(name: str, rules: DeviceRules, files: ProcFiles) -> Path:
    return v1.make(v1.hierarchy_dir(files.mountinfo, files.own_cgroup), name, rules)


def fence(grant: Grant, *, cgroup: Optional[Path], name: str, files: ProcFiles = ProcFiles()) -> Fenced:
    """Fence job ``name``, which holds ``grant``, to its device files.

    ``cgroup`` is the job's own cgroup v2 directory (made by the runtime, before
    any process joins it), or None where it has none. Never raises for a node
    that cannot fence: the answer says why.
    """
    try:
        rules = read_rules(grant, files)
    except CannotFence as e:
        return Fenced(problem=str(e))
    problems = []
    if cgroup is None:
        problems.append("cgroup v2: the job has no cgroup of its own")
    else:
        try:
            attach_program(cgroup, device_program(rules))
            return Fenced(MECHANISM_V2)
        except CannotFence as e:
            problems.append(f"cgroup v2: {e}")
    try:
        return Fenced(MECHANISM_V1, v1_cgroup=_in_v1(name, rules, files))
    except CannotFence as e:
        problems.append(f"cgroup v1: {e}")
    return Fenced(problem="; ".join(problems))


def _trial_v2(parent: Path, rules: DeviceRules) -> None:
    """Attach a program to a throwaway cgroup under ``parent``, then remove it."""
    import secrets  # here, not above: only the trial cgroup needs a random name (secrets loads hmac)

    trial = parent / f"{v1.PREFIX}{_TRIAL}.{secrets.token_hex(4)}"
    try:
        trial.mkdir()
    except OSError as e:
        raise CannotFence(f"cannot make a cgroup in {parent}: {errno_words(e.errno or 0)}") from None
    try:
        attach_program(trial, device_program(rules))
    finally:
        with contextlib.suppress(OSError):  # empty, so it goes; if not, it is no reason to fail the answer
            trial.rmdir()


def node_fences(v2_parent: Optional[Path], v2_why: str = "", files: ProcFiles = ProcFiles()) -> Fenced:
    """Whether this node can fence jobs, and with what, found by fencing a throwaway cgroup.

    ``v2_parent`` is where the runtime makes jobs' cgroups v2, None where it
    cannot (``v2_why`` says why). Nothing is left behind; the answer never
    carries a ``v1_cgroup``.
    """
    try:
        rules = read_rules(Grant(), files)
    except CannotFence as e:
        return Fenced(problem=str(e))
    problems = []
    if v2_parent is None:
        problems.append(f"cgroup v2: {v2_why or 'jobs get no cgroup of their own'}")
    else:
        try:
            _trial_v2(v2_parent, rules)
            return Fenced(MECHANISM_V2)
        except CannotFence as e:
            problems.append(f"cgroup v2: {e}")
    try:
        v1.remove(_in_v1(_TRIAL, rules, files))
        return Fenced(MECHANISM_V1)
    except CannotFence as e:
        problems.append(f"cgroup v1: {e}")
    return Fenced(problem="; ".join(problems))
