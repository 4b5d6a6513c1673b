"""Who a driver-reported pid is: user, command line, container.

The driver reports host pids. From inside a container they belong to another
PID namespace and do not exist here; such a holder is still shown, as "a
process this machine cannot see", because a card is never hidden just because
its holder cannot be named. The driver gives no start time, so a pid that
exists here is taken to be the process it names; its start time is reported
(``started_at``) so a reader can tell a process that began after the card
filled up.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Optional

import psutil

from .model import HolderInfo, ProcessFacts

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
            user = proc.username()
            cmdline = proc.cmdline()
            started = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return HolderInfo(pid=process.pid, used_memory_mib=process.used_memory_mib)
    except psutil.AccessDenied:
        return HolderInfo(pid=process.pid, used_memory_mib=process.used_memory_mib, visible=True)
    return HolderInfo(
        pid=process.pid,
        used_memory_mib=process.used_memory_mib,
        visible=True,
        user=user,
        command=shlex.join(cmdline) if cmdline else None,
        container=container_of(process.pid),
        started_at=started,
    )
