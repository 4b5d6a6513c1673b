"""The cgroup v2 device program for a job's rules: deny the fenced majors' other minors, allow the rest.

A ``BPF_PROG_TYPE_CGROUP_DEVICE`` program runs on every open and mknod of a
device file in its cgroup and returns 1 to allow, 0 to deny. Its shape is
runc's device filter turned around: it must allow what it does not name,
because with ``BPF_F_ALLOW_MULTI`` the programs above it keep deciding for
every other device. Any access to a denied minor is denied, so the access
bits are never read. The program's outline: see docs/architecture.md,
section 'Which mechanism where'.
"""

from __future__ import annotations

from tpnode_tui.devices.assembler import (
    R0,
    R1,
    R2,
    R4,
    R5,
    Item,
    Label,
    and32,
    assemble,
    exit_insn,
    jump,
    jump_if_equal,
    jump_if_not_equal,
    load_u32,
    mov32,
)
from tpnode_tui.devices.rules import DeviceRules

#: BPF_DEVCG_DEV_CHAR: the access is to a character device (BPF_DEVCG_DEV_BLOCK is 1).
DEV_CHAR = 2
# struct bpf_cgroup_dev_ctx's fields
_ACCESS_TYPE, _MAJOR, _MINOR = 0, 4, 8


def filter_items(rules: DeviceRules) -> list[Item]:
    """The program for ``rules``, as instructions and labels (assembled by :func:`device_program`)."""
    items: list[Item] = [
        load_u32(R2, R1, _ACCESS_TYPE),
        and32(R2, 0xFFFF),
        load_u32(R4, R1, _MAJOR),
        load_u32(R5, R1, _MINOR),
        jump_if_not_equal(R2, DEV_CHAR, "allow"),
    ]
    for index, rule in enumerate(rules.majors):
        after = f"after-major-{index}"
        items.append(jump_if_not_equal(R4, rule.major, after))
        items += [jump_if_equal(R5, minor, "allow") for minor in sorted(rule.allowed)]
        items += [jump("deny"), Label(after)]
    items += [Label("allow"), mov32(R0, 1), exit_insn()]
    if rules.majors:  # the verifier refuses an instruction nothing can reach
        items += [Label("deny"), mov32(R0, 0), exit_insn()]
    return items


def device_program(rules: DeviceRules) -> bytes:
    """The assembled program for ``rules``, ready for ``BPF_PROG_LOAD``."""
    return assemble(filter_items(rules))
