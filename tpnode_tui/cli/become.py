"""What ``tpnode-tui shell`` becomes once the node has moved it into a reservation's fence.

The process is already in the reservation's shell cgroup when this runs, so it
replaces itself (``execvp``) with the shell or the command: everything that
starts from there is in the fence, and nothing of the CLI is left over. It
hands on no descriptor but the terminal's three: the device cgroup checks an
open when it happens, so a device file the CLI had open before it was moved
(NVML's, in a node served in this process) would still reach every card.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
import sys
from pathlib import Path
from typing import Mapping, NoReturn, Optional, Sequence

#: the shell of an account whose entry names none, as login(1) takes it
DEFAULT_SHELL = "/bin/sh"
#: names the reservation a shell or command runs on, for a prompt or a script (as Slurm's SLURM_JOB_ID)
SHELL_MARKER = "TPNODE_SHELL"
#: bash's start-up file in a shell on a reservation: the account's own ~/.bashrc, then the run id before the prompt
BASH_RC = Path(__file__).with_name("shellrc.bash")
#: shells that take their prompt from the environment: PS1 with the run id in front reaches them
PROMPT_FROM_ENV = frozenset({"sh", "dash", "ash", "ksh", "mksh"})


def login_shell() -> str:
    """This account's login shell, from the account database (not ``$SHELL``,
    which anything before could have set): what ``salloc`` or ``su -`` would run."""
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        return DEFAULT_SHELL
    return shell if shell.startswith("/") else DEFAULT_SHELL


def given_command(given: Sequence[str]) -> list[str]:
    """The command given (after ``--``, which argparse may have taken already); empty for the login shell."""
    words = list(given)
    if words and words[0] == "--":
        words = words[1:]
    return words


def marked_shell(shell: str, run_id: str, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The login shell ``shell`` started so that its prompt shows ``run_id``
    first, as a virtual environment's activate does, keeping the account's own
    prompt after it: bash reads its ~/.bashrc as always, then puts "(RUN_ID) "
    before the prompt that left (:data:`BASH_RC`, as nix-shell starts bash with
    an rcfile of its own); a shell that reads its prompt from the environment
    gets PS1 with it in front. Any other (zsh, fish), or a prompt remade before
    each line (starship), has ``TPNODE_SHELL`` to show."""
    name = os.path.basename(shell)
    if name == "bash" and os.access(BASH_RC, os.R_OK):  # an unreadable rcfile would skip ~/.bashrc
        return [shell, "--rcfile", str(BASH_RC)], dict(env)
    if name in PROMPT_FROM_ENV:
        own = env.get("PS1") or ("# " if os.geteuid() == 0 else "$ ")
        return [shell], {**env, "PS1": f"({run_id}) {own}"}
    return [shell], dict(env)


def _fd_ceiling() -> int:
    """One past the highest descriptor this process can hold: what it may open
    now or could ever have opened (the hard limit), so none is left open for the
    shell to inherit; a fixed bound would miss one above it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return max(os.sysconf("SC_OPEN_MAX"), hard if hard != resource.RLIM_INFINITY else 2**31 - 1)


def become(argv: list[str], env: dict[str, str], started_fd: Optional[int] = None) -> NoReturn:
    """Replace this process with ``argv``, in ``env``; exit 127 (not found) or 126
    (not runnable) with one line when it cannot, as a shell does. ``started_fd``:
    a pipe of whoever started this command (the dashboard's shell key), told
    with one byte that the node took this process in, and closed with the rest."""
    sys.stdout.flush()
    sys.stderr.flush()
    if started_fd is not None:
        with contextlib.suppress(OSError):
            os.write(started_fd, b"1")
    os.closerange(3, _fd_ceiling())
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        print(f"tpnode-tui: {argv[0]}: command not found", file=sys.stderr, flush=True)
        os._exit(127)
    except OSError as e:
        print(f"tpnode-tui: {argv[0]}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(126)
