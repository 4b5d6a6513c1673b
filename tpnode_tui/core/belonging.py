"""Whose is a process on a card: the card's holder, an intruder, or nobody's business.

A card held by alice's reservation that bob is also using is the quiet way a
shared node goes wrong, while the card still reads "reservation (alice)". So
every process on a held card is told apart: **holder**, **intruder**,
**external** (on a card no job holds) or **unknown** (a pid this machine cannot
look at). See docs/architecture.md, section 'Triage' ("Whose process").

Reads ``/proc`` (through psutil) and, for a job's cgroup, the cgroup
filesystem; call it off the event loop.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Optional

import psutil

from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN, HolderInfo


def owner_uid(job: JobState) -> Optional[int]:
    """The uid of the job's owner: the one it recorded, else its owner's account here."""
    if job.uid is not None:
        return job.uid
    if not job.owner:
        return None
    try:
        return pwd.getpwnam(job.owner).pw_uid
    except KeyError:
        return None


def in_cgroup(pid: int, cgroup: str) -> bool:
    """Whether ``pid`` is in the cgroup directory ``cgroup`` or one below it."""
    root = Path(cgroup)
    try:
        for directory, _dirs, files in os.walk(root):
            if "cgroup.procs" in files:
                text = (Path(directory) / "cgroup.procs").read_text()
                if str(pid) in text.split():
                    return True
    except OSError:
        return False
    return False


def in_process_tree(pid: int, leader: int) -> bool:
    """Whether ``pid`` is ``leader``, one of its descendants, or in the session it leads."""
    if pid == leader:
        return True
    try:
        if os.getsid(pid) == leader:
            return True
    except OSError:
        pass
    try:
        return any(p.pid == leader for p in psutil.Process(pid).parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def part_of_job(holder: HolderInfo, job: JobState) -> bool:
    """Whether a process belongs to ``job`` itself (its tree, its cgroup or its container)."""
    if job.container_id:
        return holder.container is not None and holder.container == job.container_id
    if job.cgroup and in_cgroup(holder.pid, job.cgroup):
        return True
    return job.pid is not None and in_process_tree(holder.pid, job.pid)


def _has_own(job: JobState) -> bool:
    """Whether ``job`` has processes of its own: a job always, a reservation
    only in its shell cgroup (its supervisor runs nothing on its cards)."""
    return job.kind != "reservation" or bool(job.cgroup)


def classify(holder: HolderInfo, job: Optional[JobState], others: Iterable[JobState] = ()) -> HolderInfo:
    """``holder`` with ``belongs`` set, for a card ``job`` holds (None: nobody
    holds it); an outsider that is part of one of the ``others`` (live platform
    jobs) says which, so it is never taken for a stranger's process to evict."""
    found = _classify(holder, job)
    if found.belongs in (EXTERNAL, INTRUDER):
        home = next((o for o in others if o is not job and _has_own(o) and part_of_job(holder, o)), None)
        if home is not None:
            return replace(found, job_elsewhere=home.key)
    return found


def _classify(holder: HolderInfo, job: Optional[JobState]) -> HolderInfo:
    if not holder.visible:
        return replace(holder, belongs=UNKNOWN)
    if job is None:
        return replace(holder, belongs=EXTERNAL)
    uid = owner_uid(job)
    if _has_own(job) and part_of_job(holder, job):
        return replace(holder, belongs=HOLDER)
    if uid is not None and holder.uid == uid:
        return replace(holder, belongs=HOLDER)
    if holder.uid is None and uid is not None:
        # Visible but its owner unreadable: it cannot be told apart from the owner's own.
        return replace(holder, belongs=UNKNOWN)
    if uid is None and not job.owner:
        return replace(holder, belongs=UNKNOWN)  # no owner recorded: nobody to intrude on
    return replace(holder, belongs=INTRUDER)
