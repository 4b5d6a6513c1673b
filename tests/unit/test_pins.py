"""The locks: the test environment and a node's install are the versions pinned in
requirements/, so a release made after the lock cannot break a fresh clone's test
command, and a node runs only what the suite ran."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers.pins import REQUIREMENTS, for_this_python, pins

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the lock pins tomli for 3.10
    import tomli as tomllib

TEST_LOCK = REQUIREMENTS / "test.txt"
NODE_LOCK = REQUIREMENTS / "node.txt"
PROJECT = tomllib.loads((REQUIREMENTS.parent / "pyproject.toml").read_text())["project"]

#: interpreters the package supports, as packaging evaluates markers
PYTHONS = [
    {"python_version": v, "python_full_version": f"{v}.0", "platform_python_implementation": "CPython"}
    for v in ("3.10", "3.11", "3.12", "3.13")
]


def _declared(extra: bool) -> list[Requirement]:
    found = [Requirement(r) for r in PROJECT["dependencies"]]
    if extra:
        found += [Requirement(r) for r in PROJECT["optional-dependencies"]["test"]]
    return found


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: p["python_version"])
@pytest.mark.parametrize(("lock", "extra"), [(TEST_LOCK, True), (NODE_LOCK, False)], ids=["test", "node"])
def test_each_lock_pins_every_declared_dependency_within_its_range(lock, extra, python):
    chosen = for_this_python(lock, python)
    for requirement in [*_declared(extra), Requirement("setuptools>=68")]:
        name = canonicalize_name(requirement.name)
        assert name in chosen, f"{lock.name} pins no {name} for Python {python['python_version']}"
        assert requirement.specifier.contains(chosen[name], prereleases=True), (lock.name, name, chosen[name])


def test_every_pin_carries_its_hashes():
    for lock in (TEST_LOCK, NODE_LOCK):
        lines = lock.read_text().splitlines()
        pinned = [i for i, line in enumerate(lines) if "==" in line and not line.startswith("#")]
        assert len(pinned) == len(pins(lock)) > 0
        for i in pinned:
            assert lines[i + 1].strip().startswith("--hash=sha256:"), f"{lock.name}: no hash for {lines[i]}"


def test_a_node_installs_only_versions_the_tests_ran():
    tested = pins(TEST_LOCK)
    node = pins(NODE_LOCK)
    assert node, "node.txt pins nothing"
    for key, version in node.items():
        assert tested.get(key) == version, f"node.txt pins {key[0]} {version}, test.txt {tested.get(key)}"


def test_the_locks_say_how_they_are_refreshed():
    for lock in (TEST_LOCK, NODE_LOCK):
        assert "#    bash requirements/refresh.sh" in lock.read_text().splitlines()[1]


def test_this_test_environment_is_the_locked_one():
    """tests/run.sh installed the lock (bash tests/run.sh --latest, on purpose, does not)."""
    if ".venv-latest" in metadata.distribution("pytest").locate_file("").as_posix():
        pytest.skip("bash tests/run.sh --latest runs the newest releases, not the lock")
    for name, version in for_this_python(TEST_LOCK).items():
        assert metadata.version(name) == version, (
            f"{name} {metadata.version(name)} is installed, the lock says {version}"
        )
