"""The eBPF assembler, one test per rule of the encoding, and the device program it builds for a job's rules.

The program is run here by a small interpreter of the instructions it uses,
so each rule of the filter is checked without a kernel; the tests of
test_devices_kernel.py load the same bytes into a real one.
"""

from __future__ import annotations

import struct
import sys

import pytest

from tpnode_tui.devices.assembler import (
    MAX_INSNS,
    R0,
    R1,
    R2,
    R4,
    R5,
    AssemblyError,
    Insn,
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
from tpnode_tui.devices.nvidia import NvidiaMajors, parse_mig_minors
from tpnode_tui.devices.program import DEV_CHAR, device_program, filter_items
from tpnode_tui.devices.rules import DeviceRules, Grant, MajorRule, SliceGrant, device_rules

# ── the encoding of each instruction kind ───────────────────────────────────


def _fields(raw: bytes) -> tuple[int, int, int, int, int]:
    """code, dst, src, off, imm of one little-endian instruction."""
    code, regs, off, imm = struct.unpack("<BBhi", raw)
    return code, regs & 0xF, regs >> 4, off, imm


def test_an_instruction_is_eight_bytes_code_registers_offset_immediate():
    raw = Insn(0x61, dst=2, src=1, off=8, imm=-2).encode("little")
    assert raw == bytes([0x61, 0x12, 8, 0, 0xFE, 0xFF, 0xFF, 0xFF])


def test_big_endian_puts_the_destination_in_the_high_nibble_and_numbers_big_end_first():
    raw = Insn(0x61, dst=2, src=1, off=8, imm=-2).encode("big")
    assert raw == bytes([0x61, 0x21, 0, 8, 0xFF, 0xFF, 0xFF, 0xFE])


def test_the_default_byte_order_is_the_machines():
    insn = Insn(0x61, dst=2, src=1, off=8, imm=5)
    assert insn.encode() == insn.encode(sys.byteorder)


def test_load_u32_is_ldx_mem_word():
    assert _fields(load_u32(R4, R1, 4).encode("little")) == (0x61, 4, 1, 4, 0)


def test_and32_is_alu_and_immediate():
    assert _fields(and32(R2, 0xFFFF).encode("little")) == (0x54, 2, 0, 0, 0xFFFF)


def test_mov32_is_alu_mov_immediate():
    assert _fields(mov32(R0, 1).encode("little")) == (0xB4, 0, 0, 0, 1)


def test_exit_is_jmp_exit():
    assert _fields(exit_insn().encode("little")) == (0x95, 0, 0, 0, 0)


@pytest.mark.parametrize(
    "make, code", [(lambda t: jump_if_equal(R5, 7, t), 0x15), (lambda t: jump_if_not_equal(R5, 7, t), 0x55)]
)
def test_conditional_jumps_compare_a_register_with_an_immediate(make, code):
    raw = assemble([make("end"), Label("end"), exit_insn()])
    assert _fields(raw[:8]) == (code, 5, 0, 0, 7)


def test_jump_is_ja():
    raw = assemble([jump("end"), mov32(R0, 0), Label("end"), exit_insn()])
    assert _fields(raw[:8])[0] == 0x05


@pytest.mark.parametrize("field", [{"dst": 11}, {"src": 16}, {"dst": -1}])
def test_a_register_that_does_not_exist_is_refused(field):
    with pytest.raises(AssemblyError, match="no register"):
        Insn(0x61, **field).encode()


def test_an_offset_or_immediate_that_does_not_fit_is_refused():
    with pytest.raises(AssemblyError, match="offset 32768"):
        Insn(0x61, off=1 << 15).encode()
    with pytest.raises(AssemblyError, match="immediate 2147483648"):
        Insn(0xB4, imm=1 << 31).encode()
    with pytest.raises(AssemblyError, match="opcode 0x100"):
        Insn(0x100).encode()


# ── jumps' offsets ───────────────────────────────────────────────────────────


def test_a_jump_counts_from_the_next_instruction():
    raw = assemble([jump_if_equal(R2, 1, "here"), Label("here"), exit_insn()])
    assert _fields(raw[:8])[3] == 0  # the very next instruction


def test_a_jump_over_instructions_counts_them():
    raw = assemble([jump("x"), mov32(R0, 0), mov32(R0, 1), mov32(R0, 2), Label("x"), exit_insn()])
    assert _fields(raw[:8])[3] == 3


def test_labels_take_no_room_and_two_may_name_one_place():
    raw = assemble([jump("b"), Label("a"), Label("b"), mov32(R0, 1), exit_insn()])
    assert len(raw) == 3 * 8
    assert _fields(raw[:8])[3] == 0


def test_a_label_named_twice_is_refused():
    with pytest.raises(AssemblyError, match="'a' is defined twice"):
        assemble([Label("a"), mov32(R0, 1), Label("a"), exit_insn()])


def test_a_jump_to_no_label_is_refused():
    with pytest.raises(AssemblyError, match="undefined label 'nowhere'"):
        assemble([jump("nowhere"), exit_insn()])


def test_a_jump_backwards_is_refused():
    with pytest.raises(AssemblyError, match="goes backwards"):
        assemble([Label("top"), mov32(R0, 1), jump("top"), exit_insn()])
    with pytest.raises(AssemblyError, match="goes backwards"):
        assemble([Label("self"), jump("self"), exit_insn()])


def test_a_label_after_the_last_instruction_is_refused():
    with pytest.raises(AssemblyError, match="past the last instruction"):
        assemble([jump("end"), exit_insn(), Label("end")])


def test_a_program_must_end_with_exit():
    with pytest.raises(AssemblyError, match="not an exit"):
        assemble([mov32(R0, 1)])
    with pytest.raises(AssemblyError, match="empty"):
        assemble([Label("a")])


def test_a_program_longer_than_the_limit_is_refused():
    with pytest.raises(AssemblyError, match=f"more than {MAX_INSNS}"):
        assemble([mov32(R0, 1)] * MAX_INSNS + [exit_insn()])


# ── the filter, run ──────────────────────────────────────────────────────────

CHAR, BLOCK = DEV_CHAR, 1
READ, WRITE, MKNOD = 2, 4, 1  # BPF_DEVCG_ACC_*


def run_filter(program: bytes, dev_type: int, major: int, minor: int, access: int = READ | WRITE) -> int:
    """What the kernel would get back from ``program`` for one access (little-endian encoding)."""
    ctx = struct.pack("<III", access << 16 | dev_type, major, minor)
    insns = [_fields(program[i : i + 8]) for i in range(0, len(program), 8)]
    regs = [0] * 11
    pc = 0
    for _ in range(len(insns) + 1):  # forward jumps only: each instruction runs at most once
        code, dst, src, off, imm = insns[pc]
        pc += 1
        if code == 0x61:  # ldx word from the context (R1)
            assert src == R1 and off in (0, 4, 8)
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif code == 0x54:
            regs[dst] = regs[dst] & imm & 0xFFFFFFFF
        elif code == 0xB4:
            regs[dst] = imm & 0xFFFFFFFF
        elif code == 0x05:
            pc += off
        elif code in (0x15, 0x55):
            if (regs[dst] == imm) == (code == 0x15):
                pc += off
        elif code == 0x95:
            return regs[R0]
        else:
            raise AssertionError(f"instruction {code:#x} not expected in a device filter")
    raise AssertionError("the program ran off its end")


MAJORS = NvidiaMajors(uvm=237, caps=238)
MIG = parse_mig_minors("config 1\nmonitor 2\ngpu2/gi1/access 21\ngpu2/gi1/ci0/access 22\ngpu2/gi2/access 30\n")


@pytest.fixture
def card2() -> bytes:
    return _native_le(device_rules(Grant(cards=frozenset({2})), MAJORS, MIG))


def _native_le(rules: DeviceRules) -> bytes:
    """The program as the interpreter reads it (little-endian), whatever this machine is."""
    return b"".join(item.encode("little") for item in _resolved(rules))


def _resolved(rules: DeviceRules) -> list[Insn]:
    raw = device_program(rules)
    if sys.byteorder == "little":
        return [Insn(*_fields(raw[i : i + 8])) for i in range(0, len(raw), 8)]
    return [Insn(*_big_fields(raw[i : i + 8])) for i in range(0, len(raw), 8)]


def _big_fields(raw: bytes) -> tuple[int, int, int, int, int]:
    code, regs, off, imm = struct.unpack(">BBhi", raw)
    return code, regs >> 4, regs & 0xF, off, imm


def test_the_filter_allows_the_jobs_card_and_the_control_devices(card2):
    for major, minor in ((195, 2), (195, 255), (195, 254), (237, 0), (237, 1)):
        assert run_filter(card2, CHAR, major, minor) == 1, (major, minor)


def test_the_filter_denies_every_other_nvidia_minor(card2):
    for major, minor in ((195, 0), (195, 3), (195, 253), (195, 300), (237, 2), (238, 1), (238, 21), (238, 99)):
        assert run_filter(card2, CHAR, major, minor) == 0, (major, minor)


def test_the_filter_allows_every_device_that_is_not_nvidias(card2):
    for major, minor in ((1, 3), (1, 5), (4, 1), (136, 0), (511, 0), (196, 2)):
        assert run_filter(card2, CHAR, major, minor) == 1, (major, minor)


def test_the_filter_never_touches_block_devices(card2):
    # a block device 195:3 is somebody's disk, not a card
    assert run_filter(card2, BLOCK, 195, 3) == 1


def test_the_filter_denies_every_kind_of_access_to_a_denied_minor(card2):
    for access in (READ, WRITE, MKNOD, READ | WRITE | MKNOD):
        assert run_filter(card2, CHAR, 195, 3, access) == 0
        assert run_filter(card2, CHAR, 195, 2, access) == 1


def test_the_filter_of_a_mig_job_allows_its_instances_capabilities_only():
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    program = _native_le(device_rules(grant, MAJORS, MIG))
    assert [run_filter(program, CHAR, 238, m) for m in (1, 2, 21, 22, 30)] == [0, 0, 1, 1, 0]
    assert run_filter(program, CHAR, 195, 2) == 1
    assert run_filter(program, CHAR, 195, 1) == 0


def test_the_filter_agrees_with_the_rules_everywhere_that_matters():
    rules = device_rules(Grant(cards=frozenset({0, 3})), MAJORS, MIG)
    program = _native_le(rules)
    for major in (1, 195, 237, 238, 239):
        for minor in range(0, 260):
            assert run_filter(program, CHAR, major, minor) == int(rules.allows(major, minor)), (major, minor)


def test_a_filter_with_no_fenced_major_allows_everything_and_has_no_deny_block():
    program = _native_le(DeviceRules(()))
    assert run_filter(program, CHAR, 195, 3) == 1
    # the verifier refuses an instruction nothing reaches
    assert not any(isinstance(i, Label) and i.name == "deny" for i in filter_items(DeviceRules(())))


def test_the_filter_tests_one_minor_per_allowed_minor_and_nothing_per_denied_one():
    rules = DeviceRules((MajorRule(195, "nvidia", frozenset({2, 254, 255}), denied=None),))
    # 4 loads, 1 type test; per major: 1 major test, 3 minor tests, 1 jump; 2 for allow, 2 for deny
    assert len([i for i in filter_items(rules) if not isinstance(i, Label)]) == 5 + 5 + 4
