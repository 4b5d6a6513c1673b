"""The README's first command, ``sh install.sh``, run for real by a plain account.

A fresh ordinary account (its own HOME, nothing of root's environment but the
machine's pip settings) installs from its own copy of the checkout with the
system's python3, as a user of a Debian 12 or Ubuntu 24.04 machine would,
where pip refuses to install outside a virtual environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from helpers.accounts import Account
from helpers.paths import CHECKOUT
from helpers.pins import REQUIREMENTS, for_this_python
from helpers.services import unavailable

#: what the machine's pip is told by its environment (an index, a proxy), as a login there would have it
_MACHINE = ("PIP_", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY")


def _env(account: Account, path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(_MACHINE)}
    env.update(HOME=str(account.home), USER=account.name, LOGNAME=account.name, PATH=path, LANG="C.UTF-8")
    env.update(extra)
    return env


def _copy_checkout(into: Path) -> Path:
    """What install.sh installs from, as a fresh clone has it (pip writes its build there)."""
    copy = into / "tpnode-tui"
    copy.mkdir()
    for name in ("install.sh", "pyproject.toml", "README.md"):
        shutil.copy2(CHECKOUT / name, copy / name)
    shutil.copytree(CHECKOUT / "tpnode_tui", copy / "tpnode_tui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(CHECKOUT / "requirements", copy / "requirements")
    return copy


def _checkout_of(account: Account) -> Path:
    """The checkout as the account would have cloned it: its own, writable."""
    copy = _copy_checkout(account.home)
    subprocess.run(["chown", "-R", f"{account.uid}:{account.gid}", str(copy)], check=True)
    return copy


def _install(account: Account, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return account.run(["sh", "tpnode-tui/install.sh", *args], env=env, timeout=600)


@pytest.fixture(scope="module")
def installed(accounts):
    """alice installs once, with ~/.local/bin not on her PATH."""
    alice = accounts.alice
    _checkout_of(alice)
    done = _install(alice, _env(alice, "/usr/local/bin:/usr/bin:/bin"))
    return alice, done


def test_a_plain_account_installs_into_its_home_and_is_told_its_bin_is_not_on_path(installed):
    alice, done = installed
    assert done.returncode == 0, done.stderr
    command = alice.home / ".local/bin/tpnode-tui"
    assert command.is_symlink()
    assert Path(os.readlink(command)) == alice.home / ".local/share/tpnode-tui/bin/tpnode-tui"
    warned = [line for line in done.stderr.splitlines() if "not on your PATH" in line]
    assert warned == [
        f"tpnode-tui install: {alice.home}/.local/bin is not on your PATH: add it "
        f'(export PATH="{alice.home}/.local/bin:$PATH" in ~/.profile), or run {alice.home}/.local/bin/tpnode-tui'
    ]
    version = alice.run([str(command), "--version"], env=_env(alice, "/usr/bin:/bin"))
    assert version.returncode == 0 and version.stdout.startswith("tpnode-tui "), version.stderr
    owners = {p.lstat().st_uid for p in (alice.home / ".local").rglob("*")}
    assert owners == {alice.uid}  # nothing of root's in her home


def test_it_installs_exactly_the_versions_the_tests_ran(installed):
    alice, done = installed
    assert done.returncode == 0, done.stderr
    venv = alice.home / ".local/share/tpnode-tui"
    frozen = alice.run(
        [str(venv / "bin/python"), "-m", "pip", "list", "--format=freeze"], env=_env(alice, "/usr/bin:/bin")
    )
    installed_versions = {}
    for line in frozen.stdout.splitlines():
        name, _, version = line.partition("==")
        installed_versions[canonicalize_name(name)] = version
    # the venv's own python is the system's: the markers are this interpreter's
    locked = for_this_python(REQUIREMENTS / "node.txt", _markers_of(venv / "bin/python"))
    assert {name: installed_versions.get(name) for name in locked} == locked
    assert installed_versions.pop("tpnode-tui") and installed_versions.pop("pip")
    assert set(installed_versions) == set(locked), "installed beside the lock: " + str(
        set(installed_versions) - set(locked)
    )


#: what a lock's markers are evaluated against, read from the interpreter itself
#: (the installed venv has no packaging to ask)
_MARKERS = """
import json, os, platform, sys
print(json.dumps({
    "python_version": "%d.%d" % sys.version_info[:2],
    "python_full_version": platform.python_version(),
    "platform_python_implementation": platform.python_implementation(),
    "implementation_name": sys.implementation.name,
    "sys_platform": sys.platform,
    "platform_system": platform.system(),
    "platform_machine": platform.machine(),
    "os_name": os.name,
}))
"""


def _markers_of(python: Path) -> dict[str, str]:
    done = subprocess.run([str(python), "-c", _MARKERS], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_install_again_with_demo_upgrades_in_place_and_opens_the_demo(installed):
    alice, first = installed
    assert first.returncode == 0, first.stderr
    done = _install(alice, _env(alice, f"{alice.home}/.local/bin:/usr/bin:/bin"), "--demo")
    assert "not on your PATH" not in done.stderr
    # no terminal here: the demo it opens says so, as `tpnode-tui --demo` does
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("tpnode-tui: the dashboard needs a terminal"), done.stderr


def test_without_python3_venv_it_says_what_to_install_in_one_line(accounts):
    bob = accounts.bob
    _checkout_of(bob)
    # Debian's python3 without python3-venv: no ensurepip to import
    shadow = bob.home / "no-venv"
    (shadow / "ensurepip").mkdir(parents=True)
    (shadow / "ensurepip/__init__.py").write_text("raise ImportError('ensurepip is not available')\n")
    subprocess.run(["chown", "-R", f"{bob.uid}:{bob.gid}", str(shadow)], check=True)
    done = _install(bob, _env(bob, "/usr/bin:/bin", PYTHONPATH=str(shadow)))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "tpnode-tui install: /usr/bin/python3 cannot make a virtual environment (no ensurepip): "
        "install python3-venv (as root: apt-get install python3-venv) and run this again"
    ]
    assert not (bob.home / ".local").exists()


#: as root, in a mount namespace of its own where /opt and /usr/local/bin are
#: overlays: the real paths install.sh writes, and nothing of it left on the machine
AS_ROOT = """
set -e
for dir in /opt /usr/local/bin; do
    mkdir -p "$WORK/upper$dir" "$WORK/work$dir"
    mount -t overlay overlay -o "lowerdir=$dir,upperdir=$WORK/upper$dir,workdir=$WORK/work$dir" "$dir"
done
sh "$WORK/tpnode-tui/install.sh"
echo "link: $(readlink /usr/local/bin/tpnode-tui)"
echo "version: $(env -i PATH=/usr/local/bin:/usr/bin:/bin tpnode-tui --version)"
echo "python: $(readlink /opt/tpnode-tui/bin/python3)"
echo "as $ACCOUNT: $(runuser -u "$ACCOUNT" -- env -i PATH=/usr/local/bin:/usr/bin:/bin tpnode-tui --version 2>&1)"
"""


def test_as_root_it_installs_into_opt_with_the_command_where_the_unit_runs_it(tmp_path, accounts):
    """Root's PATH finds first a python3 only root may run (pyenv or conda under
    /root): what is installed for every account is made from the system's."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        unavailable("installing as root is tried in a mount namespace of its own: it needs root and unshare")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        unavailable(f"no mount namespace can be made here: {probe.stderr.strip()}")
    _copy_checkout(tmp_path)
    own = tmp_path / "roots-own"
    own.mkdir(mode=0o700)
    (own / "python3").symlink_to(Path(os.path.realpath("/usr/bin/python3")))
    env = {k: v for k, v in os.environ.items() if k.startswith(_MACHINE)}
    env.update(
        HOME=str(tmp_path),
        PATH=f"{own}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        LANG="C.UTF-8",
        WORK=str(tmp_path),
        ACCOUNT=accounts.alice.name,
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_ROOT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "link: /opt/tpnode-tui/bin/tpnode-tui" in done.stdout.splitlines()
    assert any(line.startswith("version: tpnode-tui ") for line in done.stdout.splitlines()), done.stdout
    said = done.stdout.splitlines()
    assert "python: /usr/bin/python3" in said, done.stdout
    assert any(line.startswith(f"as {accounts.alice.name}: tpnode-tui ") for line in said), done.stdout
    assert "not on your PATH" not in done.stderr
    assert (tmp_path / "upper/opt/tpnode-tui/bin/tpnode-tui").exists()  # written in the overlay, not on the machine
    # pip built a copy: the checkout holds nothing of root's that would stop another account's install there
    left = {p.name for p in (tmp_path / "tpnode-tui").iterdir()}
    assert left == {"install.sh", "pyproject.toml", "README.md", "tpnode_tui", "requirements"}, left
