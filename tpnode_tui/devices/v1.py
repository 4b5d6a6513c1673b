"""The fence where the cgroup v1 ``devices`` controller is mounted: a job cgroup with a deny list.

Where the parent allows every device, the job's cgroup is given one
``devices.deny`` line per NVIDIA minor it must not open, as Slurm's
``ConstrainDevices`` does; a parent that allows only listed devices cannot be
fenced so (a deny line cannot cut a minor out of a wildcard) and is refused
with that reason. Unlike a cgroup v2, this cgroup is made here
(:func:`make`), joined (:func:`join`) and removed once empty
(:func:`remove`). See docs/architecture.md, section 'Which mechanism where'.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tpnode_tui.devices.errors import CannotFence, errno_words
from tpnode_tui.devices.rules import DeviceRules
from tpnode_tui.model.validation import RUN_ID_PATTERN

#: A job's devices cgroup is ``<this process's devices cgroup>/tpnode-tui.<job name>.<random>``.
PREFIX = "tpnode-tui."
#: What ``devices.list`` shows for a cgroup that allows every device but what it denies.
_ALLOWS_ALL = "a *:* rwm"
DEFAULT_MOUNTINFO = Path("/proc/self/mountinfo")
DEFAULT_OWN_CGROUP = Path("/proc/self/cgroup")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes come as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def _own_path(own_cgroup: Path) -> str:
    """This process's path in the devices hierarchy, from its ``N:devices:/path`` line."""
    try:
        lines = own_cgroup.read_text(errors="replace").splitlines()
    except OSError as e:
        raise CannotFence(f"cannot read {own_cgroup}: {e.strerror}") from None
    for line in lines:
        _number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "devices" in controllers.split(",") and path.startswith("/"):
            return path
    raise CannotFence("the cgroup v1 devices controller is not mounted (no devices line in /proc/self/cgroup)")


def hierarchy_dir(mountinfo: Path = DEFAULT_MOUNTINFO, own_cgroup: Path = DEFAULT_OWN_CGROUP) -> Path:
    """This process's own cgroup directory in the v1 devices hierarchy, where job cgroups are made.

    Read from where the hierarchy is mounted and which part of it the mount
    shows, never from a fixed path: /sys/fs/cgroup/devices on most nodes.
    """
    own = _own_path(own_cgroup)
    try:
        mounts = mountinfo.read_text(errors="replace").splitlines()
    except OSError as e:
        raise CannotFence(f"cannot read {mountinfo}: {e.strerror}") from None
    for line in mounts:
        fields, _, tail = line.partition(" - ")
        parts, super_options = fields.split(), tail.split()
        if len(parts) < 5 or len(super_options) < 3 or super_options[0] != "cgroup":
            continue
        if "devices" not in super_options[2].split(","):
            continue
        root, mountpoint = _unescape(parts[3]), _unescape(parts[4])
        if own == root or own.startswith(root.rstrip("/") + "/"):
            return Path(mountpoint) / own[len(root) :].lstrip("/")
    raise CannotFence("the cgroup v1 devices controller is not mounted where this process can see its cgroup")


def _write(path: Path, *lines: str) -> None:
    """Write each line with a write of its own: the kernel reads one rule (or pid) per
    write and ignores the rest of it. The file is opened once (an open costs more than a rule)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        for line in lines:
            os.write(fd, line.encode())
    finally:
        os.close(fd)


def deny_lines(rules: DeviceRules) -> list[str]:
    """The ``devices.deny`` lines for ``rules``; CannotFence where a major's minors cannot be named."""
    lines = []
    for rule in rules.majors:
        if rule.denied is None:
            raise CannotFence(f"the {rule.name} minors to deny are not known, and a cgroup v1 deny list names each")
        lines += [f"c {rule.major}:{minor} rwm" for minor in rule.denied]
    return lines


def _check_allows_all(cgroup: Path) -> None:
    try:
        listed = (cgroup / "devices.list").read_text().split("\n")
    except OSError as e:
        raise CannotFence(f"cannot read {cgroup / 'devices.list'}: {e.strerror}") from None
    if listed[0] != _ALLOWS_ALL:
        raise CannotFence(
            f"{cgroup.parent} allows only the devices it lists, and a deny line cannot take a minor out of such a list"
        )


def make(parent: Path, name: str, rules: DeviceRules) -> Path:
    """A new cgroup for job ``name`` under ``parent`` (see :func:`hierarchy_dir`), denying what ``rules`` deny.

    Nothing is left behind when it fails: the cgroup is removed and CannotFence says why.
    """
    if not RUN_ID_PATTERN.fullmatch(name):
        raise CannotFence(f"{name!r} cannot name a cgroup")
    import secrets  # here, not above: only a cgroup being made needs a random name (secrets loads hmac)

    lines = deny_lines(rules)
    path = parent / f"{PREFIX}{name}.{secrets.token_hex(4)}"
    try:
        path.mkdir()
    except OSError as e:
        raise CannotFence(f"cannot make a cgroup in {parent}: {errno_words(e.errno or 0)}") from None
    try:
        _check_allows_all(path)
        _write(path / "devices.deny", *lines)
    except OSError as e:
        remove(path)
        raise CannotFence(f"cannot write {path / 'devices.deny'}: {errno_words(e.errno or 0)}") from None
    except CannotFence:
        remove(path)
        raise
    return path


def join(cgroup: Path, pid: int = 0) -> None:
    """Move process ``pid`` (0: the caller) into the job's devices cgroup; CannotFence when the kernel refuses."""
    try:
        _write(cgroup / "cgroup.procs", str(pid))
    except OSError as e:
        raise CannotFence(
            f"cannot move process {pid or os.getpid()} into {cgroup}: {errno_words(e.errno or 0)}"
        ) from None


def remove(cgroup: Path) -> bool:
    """Remove the job's devices cgroup once its processes have ended; False while one is still in it.

    A cgroup already gone counts as removed.
    """
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError as e:
        if e.errno == errno.EBUSY:
            return False
        raise CannotFence(f"cannot remove {cgroup}: {errno_words(e.errno or 0)}") from None
    return True
