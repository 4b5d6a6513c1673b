"""Where things are: the checkout, and the files the tests run or put on PATH."""
from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
#: the checkout: the product's package and README beside tests/
CHECKOUT = TESTS.parent
#: a process that takes the allocation lock (run as a script)
LOCK_WORKER = HELPERS / "lock_worker.py"
