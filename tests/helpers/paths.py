"""Where things are: the checkout, and the files the tests run or put on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
#: the checkout: the product's package and README beside tests/
CHECKOUT = TESTS.parent
#: a process that takes the allocation lock (run as a script)
LOCK_WORKER = HELPERS / "lock_worker.py"
#: a process that writes the usage ledger until killed (run as a script, tests/ on PYTHONPATH)
LEDGER_CHILD = HELPERS / "ledger_child.py"
#: tests/stubs/: the nvidia-smi stub, found on PATH (helpers.paths.stub_smi_on_path, conftest's smi)
STUBS = TESTS / "stubs"
#: tests/captures/: what real nodes' tools printed, replayed by the stub
CAPTURES = TESTS / "captures"


def path_with_stubs(path: str | None = None) -> str:
    """``path`` (this process's PATH) with the stubs first, then this interpreter's
    directory: the stub's ``#!/usr/bin/env python3`` finds this interpreter first,
    as a version-manager shim later on PATH can take longer to start than a test."""
    return os.pathsep.join([str(STUBS), os.path.dirname(sys.executable), os.environ["PATH"] if path is None else path])


def stub_smi_on_path(monkeypatch) -> None:
    """For the rest of the test, ``nvidia-smi`` is the stub, with none of its
    TPN_SMI_* settings left from outside."""
    for name in list(os.environ):
        if name.startswith("TPN_SMI_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", path_with_stubs())
