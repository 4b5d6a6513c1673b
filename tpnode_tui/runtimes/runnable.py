"""Whether a command can be started as its account: asked of a process of that account's.

Asked as root, mode bits miss ACLs, read-only mounts and the groups that
grant access, so a small shell script runs as the account, with its PATH and
in its working directory. That process is the caller's to stop or slow, so it
is asked before the allocation lock, never under it, waited for in the event
loop (:mod:`.waiting`) and killed after :data:`CHECK_TIMEOUT_S`. See
docs/architecture.md, section 'A caller's process job runs as the caller'.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Optional, Sequence

from tpnode_tui.model.errors import Conflict, RuntimeUnavailable
from tpnode_tui.model.jobs import RunAs
from tpnode_tui.runtimes.waiting import exit_status
from tpnode_tui.text.printable import shown

#: How long the check may take. It takes milliseconds; only a hung file system
#: (or a caller who stopped it) takes longer.
CHECK_TIMEOUT_S = 5.0
#: how much of a command or a directory a refusal quotes: a path people can
#: recognise, never the 16 KiB a command may be
PATH_SHOWN = 200

#: Run as the account the command will run as: $1 the working directory, $2
#: the program, $3 its PATH. Each way to fail has its own exit code.
RUNNABLE = """
set -f
[ -e "$1" ] || exit 10
[ -d "$1" ] || exit 11
cd -- "$1" 2>/dev/null || exit 12
case $2 in
*/*) [ -f "$2" ] || exit 13; [ -x "$2" ] || exit 14; exit 0 ;;
esac
IFS=:
for dir in $3; do
    [ -f "${dir:-.}/$2" ] && [ -x "${dir:-.}/$2" ] && exit 0
done
exit 15
"""

#: Runs as the launcher until it has become the account (argv: uid, gid, groups
#: as "1,2,3" or "", then the shell's argv): until its exec, nobody else may signal it.
_BECOME = (
    "import os, sys; uid, gid, groups = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]; "
    "os.setgroups([int(g) for g in groups.split(',') if g]); os.setgid(gid); os.setuid(uid); "
    "os.execv(sys.argv[4], sys.argv[4:])"
)


def _argv(shell: Sequence[str], run_as: Optional[RunAs]) -> list[str]:
    if run_as is None:
        return list(shell)
    groups = ",".join(str(g) for g in run_as.groups)
    return [sys.executable, "-I", "-S", "-c", _BECOME, str(run_as.uid), str(run_as.gid), groups, *shell]


def _problem(returncode: int, who: str, program: str, cwd: str) -> Optional[str]:
    return {
        10: f"working directory {shown(cwd, PATH_SHOWN)} does not exist (or {who} cannot reach it)",
        11: f"working directory {shown(cwd, PATH_SHOWN)} is not a directory",
        12: f"{who} may not enter working directory {shown(cwd, PATH_SHOWN)}",
        13: f"command {shown(program, PATH_SHOWN)} not found",
        14: f"command {shown(program, PATH_SHOWN)} is not executable by {who} (chmod +x it)",
        15: f"command {shown(program, PATH_SHOWN)} not found on PATH; give its full path or install it",
    }.get(returncode)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


async def check_runnable(argv: Sequence[str], path: str, cwd: str, run_as: Optional[RunAs]) -> None:
    """Refuse (Conflict) a command that its account cannot start, with PATH ``path``, in ``cwd``."""
    program = argv[0]
    who = run_as.user if run_as is not None else "this account"
    try:
        proc = subprocess.Popen(
            _argv(["/bin/sh", "-c", RUNNABLE, "sh", cwd, program, path], run_as),
            env={"PATH": os.defpath},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as e:
        raise RuntimeUnavailable(f"cannot check the command as {who}: {e.strerror}") from None
    returncode = await exit_status(proc, CHECK_TIMEOUT_S)
    if returncode is None:
        raise Conflict(
            f"could not check within {CHECK_TIMEOUT_S:g} s whether {who} can start "
            f"{shown(program, PATH_SHOWN)} in {shown(cwd, PATH_SHOWN)} (is that file system hanging?)"
        )
    if returncode < 0:  # killed, and not by the launcher (it gives up above): by its account, or the kernel
        raise Conflict(
            f"the check whether {who} can start {shown(program, PATH_SHOWN)} was killed "
            f"({_signal_name(-returncode)}) before it could tell; nothing was started, launch it again"
        )
    problem = _problem(returncode, who, program, cwd)
    if problem is not None:
        raise Conflict(problem)
    if returncode != 0:
        raise RuntimeUnavailable(f"could not check the command as {who}: the check exited with {returncode}")
