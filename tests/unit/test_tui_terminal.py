"""Handing the terminal to another program: the program it runs, and how it says a child ended."""

from __future__ import annotations

import signal
import subprocess

from tpnode_tui import __version__
from tpnode_tui.tui.terminal import THIS_PROGRAM, how_it_ended


def test_this_program_run_again_never_takes_a_module_from_the_working_directory(tmp_path):
    """``python -m`` would import a ``tpnode_tui`` planted where the dashboard
    was started (/tmp, a shared project); the child the shell key and the
    fleet's enter run is this program, from where it is installed."""
    planted = tmp_path / "tpnode_tui"
    planted.mkdir()
    (planted / "__init__.py").write_text("print('PLANTED')\n")
    (tmp_path / "json.py").write_text("print('PLANTED')\n")
    done = subprocess.run([*THIS_PROGRAM, "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"tpnode-tui {__version__}\n"), done.stderr
    assert "PLANTED" not in done.stderr


def test_a_child_s_end_is_said_as_an_exit_code_or_the_signal_that_killed_it():
    assert how_it_ended(77) == "exit code 77"
    assert how_it_ended(-signal.SIGKILL) == "killed by SIGKILL"
