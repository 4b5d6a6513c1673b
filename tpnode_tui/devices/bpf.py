"""``bpf(2)`` through ctypes: load a device program, attach it to a cgroup v2, list what a cgroup has.

No compiler and no library beyond the standard one: the program is built by
:mod:`.program`, and the three commands used here take a ``union bpf_attr``
whose few fields are packed by hand. The buffer passed is a fixed
:data:`_ATTR_SIZE` bytes, zero where a field is not set: a kernel whose union
is smaller accepts it because the tail is zero, and one whose union is larger
reads the missing tail as zero.

Each failure is a :class:`~tpnode_tui.devices.errors.CannotFence` in words:
the command, the errno by name, and what usually causes it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from pathlib import Path

from tpnode_tui.devices.errors import CannotFence, errno_words

# bpf(2) commands, program and attach types, flags (include/uapi/linux/bpf.h).
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_GET_FD_BY_ID = 13
BPF_PROG_QUERY = 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
#: Attach beside the programs already there and under those of the cgroups above, never in their place.
BPF_F_ALLOW_MULTI = 2

#: The system call's number where it is known; elsewhere the node cannot fence with cgroup v2.
_SYSCALL_NUMBERS = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "ppc64": 361, "s390x": 351}
_ATTR_SIZE = 128
#: How many times a load interrupted by a signal (EAGAIN, Linux 4.20+) is tried again.
_LOAD_TRIES = 10
#: A cgroup holds at most 64 programs of one attach type.
_MAX_PROGRAMS = 64
_LOG_SIZE = 1 << 16
_LOG_STATISTICS = ("processed ", "verification time", "stack depth")
#: The license a program declares matters only to helpers reserved to GPL code; a
#: device filter calls none, so it declares the project's own (as runc declares Apache).
LICENSE = b"Apache-2.0\0"
#: What ``bpftool prog`` shows for it (15 characters at most).
PROGRAM_NAME = b"tpnode_devices"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def bpf_call(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    """``bpf(cmd, attr, sizeof attr)``: its result, or OSError with the errno."""
    machine = os.uname().machine  # what platform.machine() reads, without importing platform (1 ms a command)
    number = _SYSCALL_NUMBERS.get(machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"no bpf(2) number is known for {machine}")
    result = _libc.syscall(
        ctypes.c_long(number), ctypes.c_long(cmd), ctypes.c_void_p(ctypes.addressof(attr)), ctypes.c_long(len(attr))
    )
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, errno_words(code))
    return int(result)


def _attr() -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(_ATTR_SIZE)


def _load_attr(
    program: ctypes.Array[ctypes.c_char], license: ctypes.Array[ctypes.c_char]
) -> ctypes.Array[ctypes.c_char]:
    attr = _attr()
    # prog_type, insn_cnt, insns, license (log_level, log_size, log_buf at 24..40 stay 0)
    struct.pack_into(
        "=IIQQ",
        attr,
        0,
        BPF_PROG_TYPE_CGROUP_DEVICE,
        len(program) // 8,
        ctypes.addressof(program),
        ctypes.addressof(license),
    )
    struct.pack_into("=16s", attr, 48, PROGRAM_NAME)  # prog_name
    return attr


def _load_hint(code: int) -> str:
    if code == errno.EPERM:
        return ": loading a device program takes root (CAP_SYS_ADMIN, or CAP_BPF with CAP_NET_ADMIN)"
    if code == errno.ENOSYS:
        return ": this kernel has no bpf(2) (CONFIG_BPF_SYSCALL)"
    return ""


def _verifier_says(attr: ctypes.Array[ctypes.c_char]) -> str:
    """Load once more with the verifier's log on, for the line that says why it refused."""
    log = ctypes.create_string_buffer(_LOG_SIZE)
    struct.pack_into("=IIQ", attr, 24, 1, _LOG_SIZE, ctypes.addressof(log))
    try:
        os.close(bpf_call(BPF_PROG_LOAD, attr))
    except OSError:
        pass
    # the log ends with statistics ("processed 3 insns ..."); the refusal is the line before them
    lines = [
        line.strip()
        for line in log.value.decode(errors="replace").splitlines()
        if line.strip() and not line.startswith(_LOG_STATISTICS)
    ]
    return f"; the verifier says: {lines[-1]}" if lines else ""


def load_program(program: bytes) -> int:
    """Load ``program`` as a cgroup device program: its file descriptor (the caller closes it)."""
    insns = ctypes.create_string_buffer(program, len(program))
    license = ctypes.create_string_buffer(LICENSE, len(LICENSE))
    attr = _load_attr(insns, license)
    for _ in range(_LOAD_TRIES):
        try:
            return bpf_call(BPF_PROG_LOAD, attr)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                continue
            # the verifier refuses a program with EACCES (what it reads or returns) or EINVAL (its shape)
            refused = e.errno in (errno.EACCES, errno.EINVAL)
            why = _verifier_says(attr) if refused else _load_hint(e.errno or 0)
            raise CannotFence(f"the kernel did not load the device program: {e.strerror}{why}") from None
    raise CannotFence(f"the kernel did not load the device program: interrupted {_LOAD_TRIES} times, EAGAIN")


def _attach_hint(code: int) -> str:
    if code == errno.EPERM:
        return (
            ": a cgroup above attached its device program without BPF_F_ALLOW_MULTI, "
            "or this process may not attach programs (it takes root)"
        )
    if code in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
        return ": the directory is not a cgroup v2, or this kernel cannot attach device programs (CONFIG_CGROUP_BPF)"
    return ""


def _open_cgroup(cgroup: Path) -> int:
    try:
        return os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise CannotFence(f"cannot open the cgroup {cgroup}: {errno_words(e.errno or 0)}") from None


def attach_program(cgroup: Path, program: bytes) -> None:
    """Load ``program`` and attach it to the cgroup v2 directory ``cgroup`` (with BPF_F_ALLOW_MULTI).

    The program stays attached, and alive, as long as the cgroup exists: the
    descriptors are closed here, and removing the cgroup frees the program.
    """
    directory = _open_cgroup(cgroup)
    try:
        prog = load_program(program)
        try:
            attr = _attr()
            # target_fd, attach_bpf_fd, attach_type, attach_flags
            struct.pack_into("=IIII", attr, 0, directory, prog, BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI)
            bpf_call(BPF_PROG_ATTACH, attr)
        except OSError as e:
            raise CannotFence(
                f"the kernel did not attach the device program to {cgroup}: {e.strerror}{_attach_hint(e.errno or 0)}"
            ) from None
        finally:
            os.close(prog)
    finally:
        os.close(directory)


def attached_programs(cgroup: Path) -> tuple[int, ...]:
    """The ids of the device programs attached to ``cgroup`` itself (not those inherited from above).

    The kernel's own answer to "is this cgroup fenced", for a reader that must
    not trust a record of it.
    """
    directory = _open_cgroup(cgroup)
    ids = (ctypes.c_uint32 * _MAX_PROGRAMS)()
    try:
        attr = _attr()
        # target_fd, attach_type, query_flags, attach_flags, prog_ids, prog_cnt
        struct.pack_into("=IIIIQI", attr, 0, directory, BPF_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), _MAX_PROGRAMS)
        bpf_call(BPF_PROG_QUERY, attr)
    except OSError as e:
        raise CannotFence(f"the kernel did not list the device programs of {cgroup}: {e.strerror}") from None
    finally:
        os.close(directory)
    (count,) = struct.unpack_from("=I", attr, 24)
    return tuple(ids[:count])
