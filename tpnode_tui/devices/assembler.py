"""A small eBPF assembler: the few instructions a device program needs, encoded as the kernel reads them.

The kernel takes a program as an array of 8-byte ``struct bpf_insn`` in the
machine's byte order. A jump's offset counts from the next instruction, easy
to get wrong by hand, so here a jump names a label and :func:`assemble` works
the distances out, refusing a label missing or named twice, a jump backwards,
a value that does not fit, and a program that does not end in an exit. It
holds only what :mod:`.program` uses; a new instruction comes with its own
test. See docs/architecture.md, section 'Which mechanism where'.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from typing import Sequence, Union

# Registers: R0 holds the return value, R1 the context pointer on entry.
R0, R1, R2, R3, R4, R5 = range(6)
_MAX_REG = 10

# Instruction classes, and the fields of the opcode (include/uapi/linux/bpf_common.h, bpf.h).
_LDX, _ALU, _JMP = 0x01, 0x04, 0x05
_W = 0x00  # size: 32-bit word
_MEM = 0x60  # mode: load from memory at src + off
_K = 0x00  # source: the immediate
_AND, _MOV = 0x50, 0xB0
_JA, _JEQ, _JNE, _EXIT = 0x00, 0x10, 0x50, 0x90

#: The most instructions a program may have where the kernel's classic limit applies.
MAX_INSNS = 4096


class AssemblyError(ValueError):
    """A program that cannot be encoded: the message names the instruction or label."""


@dataclass(frozen=True)
class Insn:
    """One instruction, every field given."""

    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    def encode(self, byteorder: str = sys.byteorder) -> bytes:
        """The 8 bytes of ``struct bpf_insn``; the register nibbles follow the bit-field
        order of ``byteorder`` (dst in the low nibble on little-endian machines)."""
        if not 0 <= self.code <= 0xFF:
            raise AssemblyError(f"opcode {self.code:#x} does not fit a byte")
        if not (0 <= self.dst <= _MAX_REG and 0 <= self.src <= _MAX_REG):
            raise AssemblyError(f"no register r{self.dst} or r{self.src}")
        if not -(1 << 15) <= self.off < 1 << 15:
            raise AssemblyError(f"offset {self.off} does not fit 16 bits")
        if not -(1 << 31) <= self.imm < 1 << 31:
            raise AssemblyError(f"immediate {self.imm} does not fit 32 bits")
        little = byteorder == "little"
        regs = (self.src << 4 | self.dst) if little else (self.dst << 4 | self.src)
        return struct.pack(("<" if little else ">") + "BBhi", self.code, regs, self.off, self.imm)


@dataclass(frozen=True)
class Jump:
    """A jump to a label: :func:`assemble` turns it into an :class:`Insn` with its distance."""

    code: int
    target: str
    dst: int = 0
    imm: int = 0


@dataclass(frozen=True)
class Label:
    """Names the position of the instruction that follows it."""

    name: str


Item = Union[Insn, Jump, Label]


def load_u32(dst: int, src: int, off: int) -> Insn:
    """``dst = *(u32 *)(src + off)`` (zero-extended to 64 bits)."""
    return Insn(_LDX | _MEM | _W, dst=dst, src=src, off=off)


def and32(dst: int, imm: int) -> Insn:
    """``dst = (u32)dst & imm`` (the upper half cleared)."""
    return Insn(_ALU | _AND | _K, dst=dst, imm=imm)


def mov32(dst: int, imm: int) -> Insn:
    """``dst = (u32)imm``."""
    return Insn(_ALU | _MOV | _K, dst=dst, imm=imm)


def exit_insn() -> Insn:
    """Return R0 to the kernel."""
    return Insn(_JMP | _EXIT)


def jump(target: str) -> Jump:
    """Always go to ``target``."""
    return Jump(_JMP | _JA, target)


def jump_if_equal(dst: int, imm: int, target: str) -> Jump:
    """Go to ``target`` when ``dst == imm`` (64-bit compare; imm sign-extended)."""
    return Jump(_JMP | _JEQ | _K, target, dst=dst, imm=imm)


def jump_if_not_equal(dst: int, imm: int, target: str) -> Jump:
    """Go to ``target`` when ``dst != imm`` (64-bit compare; imm sign-extended)."""
    return Jump(_JMP | _JNE | _K, target, dst=dst, imm=imm)


def _positions(items: Sequence[Item]) -> dict[str, int]:
    """Each label's instruction index; an error for a label named twice."""
    where: dict[str, int] = {}
    index = 0
    for item in items:
        if isinstance(item, Label):
            if item.name in where:
                raise AssemblyError(f"label {item.name!r} is defined twice")
            where[item.name] = index
        else:
            index += 1
    return where


def _resolve(jump: Jump, index: int, where: dict[str, int], count: int) -> Insn:
    if jump.target not in where:
        raise AssemblyError(f"jump to undefined label {jump.target!r}")
    target = where[jump.target]
    if target <= index:
        raise AssemblyError(f"jump to {jump.target!r} goes backwards (instruction {index} to {target})")
    if target >= count:
        raise AssemblyError(f"label {jump.target!r} is past the last instruction")
    return Insn(jump.code, dst=jump.dst, off=target - index - 1, imm=jump.imm)


def assemble(items: Sequence[Item]) -> bytes:
    """The program's bytes, ready for ``BPF_PROG_LOAD``: labels resolved into jump distances."""
    where = _positions(items)
    insns = [item for item in items if not isinstance(item, Label)]
    if not insns:
        raise AssemblyError("the program is empty")
    if len(insns) > MAX_INSNS:
        raise AssemblyError(f"{len(insns)} instructions, more than {MAX_INSNS}")
    if insns[-1] != exit_insn():
        raise AssemblyError("the last instruction is not an exit: the program would run off its end")
    out = bytearray()
    for index, item in enumerate(insns):
        insn = _resolve(item, index, where, len(insns)) if isinstance(item, Jump) else item
        out += insn.encode()
    return bytes(out)
