"""How every probe puts a MIG card's processes on its slices, and names a slice's profile.

NVML, nvidia-smi and the simulated node each learn a MIG card's processes in
their own way, but attribute them by one rule, so the three readings of one
card agree: a process goes on the slice whose GPU instance and compute
instance it names (or that listed it itself), and stays on the card's list
whether or not a slice could be told. Nothing here raises, whatever the
driver said.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional, Sequence

from tpnode_tui.model.facts import ProcessFacts, SliceFacts

#: A process as a whole card's list names it: (GPU instance id, compute
#: instance id, the process); an id is None where the driver gave none.
Tagged = tuple[Optional[int], Optional[int], ProcessFacts]

# "NVIDIA H200 MIG 1g.18gb", "A100-SXM4-40GB MIG 1c.3g.20gb": the profile is the
# last word after "MIG". Bounded, so a name of any length costs nothing.
_PROFILE = re.compile(r"(?:^|\s)MIG\s+(\S{1,40})\s*$")


def profile_of(name: Optional[str]) -> Optional[str]:
    """The profile in a MIG device's name ("NVIDIA H200 MIG 1g.18gb" -> "1g.18gb");
    None where the name does not carry one."""
    if name is None:
        return None
    found = _PROFILE.search(name[-200:])
    return found.group(1) if found else None


def attribute(slices: Sequence[SliceFacts], tagged: Optional[Sequence[Tagged]]) -> tuple[SliceFacts, ...]:
    """``slices``, each whose own process list could not be read given the
    processes of ``tagged`` (the card's list) that name its GPU and compute
    instance. A slice that listed its own processes keeps its list: it was
    asked directly. Without ``tagged``, or without both ids, a slice's list
    stays unknown (None), never empty."""
    if tagged is None:
        return tuple(slices)
    out = []
    for s in slices:
        if s.processes is None and s.gpu_instance_id is not None and s.compute_instance_id is not None:
            ids = (s.gpu_instance_id, s.compute_instance_id)
            s = replace(s, processes=tuple(p for gi, ci, p in tagged if (gi, ci) == ids))
        out.append(s)
    return tuple(out)


def card_processes(
    listed: Optional[Sequence[ProcessFacts]], slices: Sequence[SliceFacts]
) -> Optional[tuple[ProcessFacts, ...]]:
    """A MIG card's whole process list: what the driver listed for the card,
    and every process of a slice that it did not list (one may start between
    the two questions).

    When the card's own list could not be read (NVML answers it only to a
    privileged caller in MIG mode), the slices' lists together are the card's,
    provided every slice's could be read: on a MIG card every process runs in
    a slice. Otherwise it is unknown (None).
    """
    if listed is None:
        if not slices or any(s.processes is None for s in slices):
            return None
        listed = ()
    seen = {p.pid for p in listed}
    extra: list[ProcessFacts] = []
    for s in slices:
        for p in s.processes or ():
            if p.pid not in seen:
                seen.add(p.pid)
                extra.append(p)
    return tuple(listed) + tuple(extra)
