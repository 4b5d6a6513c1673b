"""The dependency locks (requirements/*.txt) as pins: what tests/run.sh and install.sh install."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from helpers.paths import CHECKOUT

REQUIREMENTS = CHECKOUT / "requirements"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def pins(lock: Path) -> dict[tuple[str, str], str]:
    """Every pinned line of a lock: (name, marker or '') -> version."""
    found: dict[tuple[str, str], str] = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            name, version, marker = match.groups()
            found[(canonicalize_name(name), marker or "")] = version
    return found


def for_this_python(lock: Path, environment: dict[str, str] | None = None) -> dict[str, str]:
    """The pins whose markers hold for an interpreter (``environment`` as packaging
    evaluates markers; this one when None): name -> version."""
    chosen: dict[str, str] = {}
    for (name, marker), version in pins(lock).items():
        if not marker or Marker(marker).evaluate(environment):
            assert name not in chosen, f"{lock.name} pins {name} twice for one interpreter"
            chosen[name] = version
    return chosen
