"""Runtimes: where the platform's own jobs live (container labels, the state file)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tpnode_tui.config.settings import Settings
from tpnode_tui.runtimes.base import Runtime

DEFAULT_DOCKER_SOCKET = Path("/var/run/docker.sock")


def choose_runtime(settings: Settings, environ: Mapping[str, str] = os.environ) -> str:
    """ "auto" means docker wherever an engine is configured or its socket exists.

    The choice is made from configuration, not from whether the engine answers
    right now: falling back to the process runtime because dockerd was briefly
    down would hide every running container and hand their cards out again.
    """
    if settings.runtime.kind != "auto":
        return settings.runtime.kind
    if environ.get("DOCKER_HOST") or DEFAULT_DOCKER_SOCKET.exists():
        return "docker"
    return "process"


def make_runtime(settings: Settings) -> Runtime:
    if choose_runtime(settings) == "docker":
        from tpnode_tui.runtimes.docker import DockerRuntime

        return DockerRuntime(
            gpu_mode=settings.runtime.docker_gpu_mode,
            hold_image=settings.runtime.hold_image,
            fence_policy=settings.runtime.fence,
        )
    from tpnode_tui.devices.fence import ProcFiles
    from tpnode_tui.runtimes.process import ProcessRuntime

    return ProcessRuntime(
        settings.state.dir,
        fence_policy=settings.runtime.fence,
        fence_files=ProcFiles(devices=settings.runtime.proc_devices, mig_minors=settings.runtime.mig_minors),
    )
