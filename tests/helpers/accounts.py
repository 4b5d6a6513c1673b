"""Real Unix accounts for the tests of a shared node, made and removed by the tests.

What an account may do is decided from what the kernel says about it, so the
tests that check it use real accounts running real processes: two ordinary
users and an operator (a member of a group made for the operators), created
with ``useradd`` when the tests run as root (as in CI) and deleted afterwards.
Their names carry a random suffix, so nothing is assumed about the accounts a
machine already has. Outside CI a machine where they cannot be made skips
these tests; with ``CI=true`` they fail.

What the accounts run is a copy of the product, made for the session under
/tmp where every account may read it (:func:`runnable`): the checkout and its
virtual environment may sit where only root can enter (root's home is 0700),
and the tests must pass from any checkout.
"""

from __future__ import annotations

import atexit
import functools
import grp
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Optional

from helpers.paths import CHECKOUT
from helpers.services import unavailable


@dataclass(frozen=True)
class Runnable:
    """The product where every account can run it: an interpreter they may
    execute, and a directory holding the package and what it needs to run."""

    python: str
    site: Path
    #: a directory with a ``tpnode-tui`` command, for an account's PATH
    bin: Path

    def argv(self, *args: str) -> list[str]:
        return [self.python, "-m", "tpnode_tui", *args]


def _requirements(name: str, seen: set[str]) -> None:
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return
    seen.add(key)
    from packaging.requirements import Requirement

    for raw in metadata.distribution(name).requires or []:
        req = Requirement(raw)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            _requirements(req.name, seen)


def _runnable_by_all(path: str) -> bool:
    """Whether any account may run ``path``: it and every directory above it
    open to others (executable, and searchable)."""
    return all(part.stat().st_mode & stat.S_IXOTH for part in [Path(path), *Path(path).parents])


@functools.cache
def runnable() -> Runnable:
    """Copy the package (from this checkout) and its run-time requirements
    (from this environment) into a fresh directory under /tmp, readable by
    all, for this session; removed when the tests' interpreter exits."""
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if not _runnable_by_all(python):
        unavailable(
            f"the interpreter {python} is not one every account may run: make the test "
            "environment from one that is (tests/run.sh uses /usr/bin/python3)"
        )
    root = Path(tempfile.mkdtemp(prefix="tpn-py-", dir="/tmp"))
    atexit.register(shutil.rmtree, root, True)
    site = root / "site"
    needed: set[str] = set()
    _requirements("tpnode-tui", needed)
    needed.discard("tpnode-tui")
    for name in sorted(needed):
        dist = metadata.distribution(name)
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if file.parts[0] in ("..", "/") or "__pycache__" in file.parts or not source.is_file():
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    shutil.copytree(CHECKOUT / "tpnode_tui", site / "tpnode_tui", ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    command = bin_dir / "tpnode-tui"
    command.write_text(
        f"#!{python}\nimport sys\nsys.path.insert(0, {str(site)!r})\n"
        "from tpnode_tui.cli import main\nsys.exit(main())\n"
    )
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() or path == command else 0o644)
    return Runnable(python=python, site=site, bin=bin_dir)


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: Path
    groups: tuple[int, ...] = ()

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment for this account, nothing inherited from root's."""
        product = runnable()
        env = {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": f"{product.bin}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(product.site),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        env.update(extra)
        return env

    def run(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Optional[Path] = None,
        timeout: float = 60.0,
        input: Optional[str] = None,
    ) -> subprocess.CompletedProcess:
        """``argv`` as a real process of this account (uid, gid and groups from the account)."""
        return subprocess.run(
            argv,
            user=self.uid,
            group=self.gid,
            extra_groups=list(self.groups),
            env=env,
            cwd=cwd or self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def spawn(self, argv: list[str], *, env: dict[str, str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(
            argv, user=self.uid, group=self.gid, extra_groups=list(self.groups), env=env, cwd=self.home, **kwargs
        )


@dataclass
class Accounts:
    alice: Account
    bob: Account
    carol: Account  # an operator
    operators_group: str
    users: list[str]
    groups: list[str]

    def remove(self) -> None:
        _remove(self.users, self.groups)


def _remove(users: list[str], groups: list[str]) -> None:
    for name in users:
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    for name in groups:
        subprocess.run(["groupdel", name], capture_output=True)


def _account(name: str) -> Account:
    entry = pwd.getpwnam(name)
    groups = tuple(sorted(set(os.getgrouplist(name, entry.pw_gid))))
    return Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), groups)


def make_accounts() -> Accounts:
    """Create the test accounts, or fail (CI) / skip (elsewhere) saying why not."""
    if os.geteuid() != 0:
        unavailable("creating test accounts needs root")
    if not shutil.which("useradd"):
        unavailable("useradd is not installed")
    tag = secrets.token_hex(3)
    ops = f"tpnops{tag}"
    names = [f"tpn{role}{tag}" for role in ("a", "b", "c")]
    users: list[str] = []
    groups: list[str] = []
    try:
        _checked(["groupadd", ops])
        groups.append(ops)
        for name in names:
            extra = ["-G", ops] if name == names[2] else []
            _checked(
                [
                    "useradd",
                    "--create-home",
                    "--home-dir",
                    f"/tmp/tpn-home-{name}",
                    "--shell",
                    "/bin/sh",
                    "--user-group",
                    *extra,
                    name,
                ]
            )
            users.append(name)
            groups.append(name)
    except subprocess.CalledProcessError as e:
        _remove(users, groups)
        unavailable(f"cannot create test accounts: {e.stderr.strip() or e}")
    alice, bob, carol = (_account(n) for n in names)
    assert grp.getgrnam(ops).gr_gid in carol.groups
    return Accounts(alice, bob, carol, ops, users, groups)


def _checked(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def cli_as(
    account: Account, env: dict[str, str], *args: str, timeout: float = 60.0, cwd: Optional[Path] = None
) -> subprocess.CompletedProcess:
    """The product's CLI as a real process of ``account``."""
    return account.run(runnable().argv(*args), env=env, timeout=timeout, cwd=cwd)


def shared_dir(prefix: str) -> Path:
    """A directory every test account can reach (a pytest tmp_path is root's alone)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path
