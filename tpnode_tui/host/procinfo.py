"""Who a driver-reported pid is: user, command line, container.

The driver reports host pids. From inside a container they belong to another
PID namespace and do not exist here; such a holder is still shown, as "a
process this machine cannot see", because a card is never hidden just because
its holder cannot be named. The driver gives no start time, so a pid that
exists here is taken to be the process it names; its start time is reported
(``started_at``) so a reader can tell a process that began after the card
filled up.

A holder in a container is shown by the container's name and image where the
runtime can look them up (:class:`ContainerLookup`, offered by the docker
runtime), not only by the 64-character id its cgroup names.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Mapping, Optional

import psutil

from tpnode_tui.model.facts import ProcessFacts
from tpnode_tui.model.views import HolderInfo

#: container ids as they appear in /proc/<pid>/cgroup under docker, containerd
#: and systemd's cgroup drivers (".../docker/<id>", ".../docker-<id>.scope")
_CONTAINER_ID = re.compile(r"(?:docker|cri-containerd|libpod)[-/]([0-9a-f]{64})")


def container_of(pid: int, proc_root: Path = Path("/proc")) -> Optional[str]:
    """The id of the container a host pid runs in, or None (not in one, or unreadable)."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    match = _CONTAINER_ID.search(text)
    return match.group(1) if match else None


def describe(process: ProcessFacts) -> HolderInfo:
    """Everything this machine can say about one process on a card."""
    try:
        proc = psutil.Process(process.pid)
        with proc.oneshot():
            uid = proc.uids().real
            user = proc.username()
            cmdline = proc.cmdline()
            started = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return HolderInfo(pid=process.pid, used_memory_mib=process.used_memory_mib)
    except psutil.AccessDenied:
        return HolderInfo(
            pid=process.pid,
            used_memory_mib=process.used_memory_mib,
            visible=True,
            uid=_uid(process.pid),
            container=container_of(process.pid),
        )
    return HolderInfo(
        pid=process.pid,
        used_memory_mib=process.used_memory_mib,
        visible=True,
        user=user,
        command=shlex.join(cmdline) if cmdline else None,
        container=container_of(process.pid),
        started_at=started,
        uid=uid,
    )


def _uid(pid: int) -> Optional[int]:
    """The uid of a process whose details are refused, as the owner of its /proc entry."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


#: What a runtime that knows containers offers (the docker runtime's ``containers``):
#: container id -> (name, image) for the ids it knows; unknown ids are left out.
ContainerLookup = Callable[[Iterable[str]], Awaitable[dict[str, tuple[str, str]]]]


async def name_containers(
    holders: Mapping[int, tuple[HolderInfo, ...]], lookup: Optional[ContainerLookup]
) -> dict[int, tuple[HolderInfo, ...]]:
    """``holders`` with the name and image of each holder's container filled in
    where ``lookup`` knows it (None: a runtime that knows no containers)."""
    ids = {h.container for hs in holders.values() for h in hs if h.container}
    if lookup is None or not ids:
        return dict(holders)
    known = await lookup(ids)
    return {
        card: tuple(
            replace(h, container_name=known[h.container][0], container_image=known[h.container][1])
            if h.container in known
            else h
            for h in hs
        )
        for card, hs in holders.items()
    }
