"""Real Unix accounts for the tests of a shared node, made and removed by the tests.

What an account may do is decided from what the kernel says about it, so the
tests that check it use real accounts running real processes: two ordinary
users and an operator (a member of a group made for the operators), created
with ``useradd`` when the tests run as root (as in CI) and deleted afterwards.
Their names carry a random suffix, so nothing is assumed about the accounts a
machine already has. Outside CI a machine where they cannot be made skips
these tests; with ``CI=true`` they fail.
"""
from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from services import unavailable


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: Path
    groups: tuple[int, ...] = ()

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment for this account, nothing inherited from root's."""
        env = {
            "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        env.update(extra)
        return env

    def run(self, argv: list[str], *, env: dict[str, str], cwd: Optional[Path] = None,
            timeout: float = 60.0, input: Optional[str] = None) -> subprocess.CompletedProcess:
        """``argv`` as a real process of this account (uid, gid and groups from the account)."""
        return subprocess.run(argv, user=self.uid, group=self.gid, extra_groups=list(self.groups),
                              env=env, cwd=cwd or self.home, capture_output=True, text=True,
                              timeout=timeout, input=input)

    def spawn(self, argv: list[str], *, env: dict[str, str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(argv, user=self.uid, group=self.gid, extra_groups=list(self.groups),
                                env=env, cwd=self.home, **kwargs)


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
            _checked(["useradd", "--create-home", "--home-dir", f"/tmp/tpn-home-{name}",
                      "--shell", "/bin/sh", "--user-group", *extra, name])
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


def cli_as(account: Account, env: dict[str, str], *args: str, timeout: float = 60.0,
           cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """The product's CLI as a real process of ``account``."""
    return account.run([sys.executable, "-m", "tpnode_tui", *args], env=env, timeout=timeout, cwd=cwd)


def shared_dir(prefix: str) -> Path:
    """A directory every test account can reach (a pytest tmp_path is root's alone)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path
