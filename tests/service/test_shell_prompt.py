"""A shell on a reservation shows where it runs: one line before it, its run id in front of the prompt.

The login shell is started as ``tpnode-tui shell`` starts it once the node
has moved it (``marked_shell``, then ``become``), on a real pseudo-terminal:
bash with the account's own ~/.bashrc, whose prompt is kept after the run id;
sh, which takes its prompt from the environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.terminal import Terminal
from tpnode_tui.cli.become import SHELL_MARKER, marked_shell
from tpnode_tui.cli.output import shell_line
from tpnode_tui.model.jobs import DeviceFence, ShellEntry, SliceRef, visible_devices

START = (
    "import os, sys; from tpnode_tui.cli.become import become, marked_shell; "
    "argv, env = marked_shell(sys.argv[1], 'r-ali', dict(os.environ)); become(argv, env)"
)


def _started(shell: str, home: Path, env: dict[str, str]) -> Terminal:
    if not os.access(shell, os.X_OK):
        pytest.skip(f"{shell} is not installed")
    me = SimpleNamespace(uid=os.getuid(), gid=os.getgid(), home=home)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "dumb", SHELL_MARKER: "r-ali", **env}
    return Terminal(me, [sys.executable, "-c", START, shell], env)


def test_bash_keeps_the_account_s_own_prompt_after_the_run_id(tmp_path):
    (tmp_path / ".bashrc").write_text('PS1="mine> "\nOWN_RC=read\n')
    term = _started("/bin/bash", tmp_path, {"PS1": "ignored> "})
    try:
        term.shows("(r-ali) mine> ", what="bash's prompt: the run id, then the account's own")
        term.press('echo "rc=$OWN_RC on=$TPNODE_SHELL"; exit\r')
        term.shows("rc=read on=r-ali", what="the account's ~/.bashrc read, and the marker set")
        assert term.proc.wait(30) == 0
    finally:
        term.close()


def test_sh_takes_the_run_id_in_front_of_its_prompt_from_the_environment(tmp_path):
    term = _started("/bin/sh", tmp_path, {"PS1": "mine$ "})
    try:
        term.shows("(r-ali) mine$ ", what="sh's prompt: the run id, then the one it was given")
        term.press("exit\r")
        assert term.proc.wait(30) == 0
    finally:
        term.close()


def test_other_shells_and_a_prompt_not_given_are_marked_as_far_as_they_can_be():
    mark = "# " if os.geteuid() == 0 else "$ "
    assert marked_shell("/bin/dash", "r-1", {}) == (["/bin/dash"], {"PS1": f"(r-1) {mark}"})
    assert marked_shell("/usr/bin/zsh", "r-1", {"PS1": "%~ "}) == (["/usr/bin/zsh"], {"PS1": "%~ "})
    argv, env = marked_shell("/bin/bash", "r-1", {"X": "1"})
    assert argv[1] == "--rcfile" and Path(argv[2]).is_file() and env == {"X": "1"}


def test_the_line_a_shell_opens_with_names_the_cards_and_how_cuda_numbers_them():
    fence = DeviceFence.by("cgroup-v2")
    two = ShellEntry("rsv-alice", tuple(visible_devices((2, 3), fenced=True).items()), fence, "/cg", gpus=(2, 3))
    assert shell_line(two) == "shell on rsv-alice (cards 2,3: CUDA_VISIBLE_DEVICES=0,1); exit to return"
    ref = SliceRef(card=1, uuid="MIG-a1", profile="1g.18gb")
    one = ShellEntry("nb", tuple(visible_devices((), (ref,), fenced=True).items()), fence, "/cg", slices=(ref,))
    assert shell_line(one) == "shell on nb (slice 1g.18gb of card 1: CUDA_VISIBLE_DEVICES=MIG-a1); exit to return"
