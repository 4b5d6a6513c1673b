"""A process job's launch sheet: what its supervisor starts, with which environment, where, as whom.

The supervisor runs as the launching account (root, in the node's agent),
because it writes the state file. The job's environment, working directory
and account come from the caller, so none of them may shape the supervisor's
own start: a caller's ``PYTHONPATH``, ``PYTHONSTARTUP`` or ``LD_PRELOAD`` in the
supervisor's environment would run the caller's code as root. The supervisor
therefore starts with a clean environment under ``python -I`` and reads the
launch from this sheet: JSON in an anonymous memory file (``memfd``) that it
inherits as a descriptor. Not its argv: anyone can read a command line with
``ps``, and argv and the environment share one size limit. Not a file in a
directory: nobody else can open it, and nothing is left behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Optional

from tpnode_tui.model.jobs import RunAs

#: A sheet bigger than this is not one the launcher wrote: the kernel refuses
#: to start a command whose arguments and environment pass a few MiB anyway.
MAX_SHEET_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class LaunchSheet:
    """One launch, as the supervisor receives it."""

    #: the argv to run; empty for a reservation, which the supervisor holds itself
    command: tuple[str, ...]
    #: the command's whole environment
    env: tuple[tuple[str, str], ...]
    #: the directory the command starts in, entered only as ``run_as``
    cwd: str
    #: the account to switch to before the command runs; None: the supervisor's own
    run_as: Optional[RunAs] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "env": dict(self.env),
            "cwd": self.cwd,
            "run_as": None if self.run_as is None else dict(asdict(self.run_as), groups=list(self.run_as.groups)),
        }


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _id(value: Any) -> bool:
    return type(value) is int and value >= 0


def _account(doc: Any) -> RunAs:
    fine = (
        isinstance(doc, dict)
        and set(doc) == {"uid", "gid", "groups", "user", "home"}
        and _id(doc["uid"])
        and _id(doc["gid"])
        and isinstance(doc["groups"], list)
        and all(_id(g) for g in doc["groups"])
        and isinstance(doc["user"], str)
        and isinstance(doc["home"], str)
    )
    if not fine:
        raise ValueError("its run_as is not an account (uid, gid, groups, user, home)")
    return RunAs(doc["uid"], doc["gid"], tuple(doc["groups"]), doc["user"], doc["home"])


def sheet_from_json(doc: Any) -> LaunchSheet:
    """A sheet from its JSON form; ValueError saying what is wrong with it."""
    if not isinstance(doc, dict) or set(doc) != {"command", "env", "cwd", "run_as"}:
        raise ValueError("it does not hold exactly command, env, cwd and run_as")
    if not _strings(doc["command"]):
        raise ValueError("its command is not a list of strings")
    env = doc["env"]
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("its env is not an object of strings")
    if not isinstance(doc["cwd"], str) or not doc["cwd"].startswith("/"):
        raise ValueError("its cwd is not an absolute path")
    run_as = None if doc["run_as"] is None else _account(doc["run_as"])
    return LaunchSheet(tuple(doc["command"]), tuple(env.items()), doc["cwd"], run_as)


def write_sheet(sheet: LaunchSheet) -> int:
    """The sheet in a new memory file, read from its start; the caller passes
    the descriptor to the supervisor and closes it. It is close-on-exec, so only
    the process it is passed to gets it."""
    fd = os.memfd_create("tpnode-tui-launch")
    try:
        data = json.dumps(sheet.to_json()).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_sheet(fd: int) -> LaunchSheet:
    """Read the sheet from ``fd`` (and close it); ValueError when it cannot be understood."""
    chunks = []
    size = 0
    try:
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_SHEET_BYTES:
                raise ValueError(f"it is larger than {MAX_SHEET_BYTES} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        doc = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"it is not JSON ({e})") from None
    return sheet_from_json(doc)
