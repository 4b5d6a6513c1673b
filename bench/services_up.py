"""The real services the benchmarks need, started privately and always stopped.

tests/helpers/services.py starts them for the tests; the benchmarks use the same code
(a dockerd on a private socket with an imported busybox image, a
redis-server on a free loopback port) and register the stop with an ExitStack,
so an error or Ctrl-C in any section still leaves nothing running.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import common  # noqa: F401  (puts tests/ on sys.path, for services)
from helpers.services import Dockerd, RedisServer, free_port


class Unavailable(Exception):
    """A service could not be started; the section that needs it is skipped."""


def _quietly(step: Callable[[], object]) -> Callable[[], None]:
    """A clean-up step whose failure (the daemon already gone) stops no later step."""

    def run() -> None:
        try:
            step()
        except (OSError, subprocess.SubprocessError):
            pass

    return run


def start_dockerd(stack: ExitStack) -> Dockerd:
    root = Path(tempfile.mkdtemp(prefix="tpb-", dir="/tmp"))  # short: unix socket paths are limited
    stack.callback(shutil.rmtree, root, ignore_errors=True)
    daemon = Dockerd(root=root)
    stack.callback(daemon.stop)
    stack.callback(_quietly(daemon.remove_all_containers))
    try:
        daemon.start()
        daemon.import_busybox()
    except (OSError, TimeoutError, RuntimeError) as e:
        raise Unavailable(f"cannot start dockerd: {e}") from None
    return daemon


def start_redis(stack: ExitStack) -> RedisServer:
    workdir = Path(tempfile.mkdtemp(prefix="tpb-redis-"))
    stack.callback(shutil.rmtree, workdir, ignore_errors=True)
    server = RedisServer(port=free_port(), workdir=workdir)
    stack.callback(server.stop)
    try:
        server.start()
    except (OSError, TimeoutError) as e:
        raise Unavailable(f"cannot start redis-server: {e}") from None
    return server
