"""This very program run again in a child process, clean, as whoever starts it.

A child the agent starts as root (a job's supervisor, a notice's sender) must
run the code the agent runs, wherever that was loaded from (an installed
package or a checkout), and nothing a caller could plant: ``python -I`` (no
PYTHON* variables, no user site, not even the working directory on its
path) with only this package's parent directory put first, a bare PATH as its
whole environment, and "/" as its directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: the directory this package sits in: the one entry put on a child's path
CODE_ROOT = str(Path(__file__).resolve().parents[2])
#: argv[1] is CODE_ROOT, argv[2] the module to run, the rest its arguments
BOOT = (
    "import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)
#: a child's whole environment: nothing of the agent's, nor of any caller's
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def rerun_argv(module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` of this very code in a clean interpreter."""
    return [sys.executable, "-I", "-c", BOOT, CODE_ROOT, module, *args]
