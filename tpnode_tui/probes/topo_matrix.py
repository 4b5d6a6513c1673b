"""``nvidia-smi topo -m`` read into a :class:`~tpnode_tui.model.topology.Topology`. Pure: no I/O.

The matrix is other software's text: a row or a word this parser does not
know makes a TopologyError naming it, never a guessed link; the probe then
leaves the topology unknown, which blinds nothing.
"""

from __future__ import annotations

import re
from typing import Optional

from tpnode_tui.model.topology import PCIE_PATHS, Link, Topology


class TopologyError(ValueError):
    """Text that is not an ``nvidia-smi topo -m`` matrix; the message says why."""


#: Most cards a matrix may name: its bytes grow with the square.
MAX_CARDS = 4096


_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


_GPU = re.compile(r"GPU([0-9]{1,5})")


_NVLINK = re.compile(r"NV([0-9]{1,3})")


_NUMBER = re.compile(r"[0-9]{1,5}")


_NUMA_AFFINITY = "NUMA Affinity"


_TRAILING = ("CPU Affinity", _NUMA_AFFINITY, "GPU NUMA ID")


def link_from_word(word: str) -> Optional[Link]:
    """A ``topo -m`` cell as a link: "NV12", "PIX" ... "SYS" (and "SOC", what
    older drivers called SYS); None for "X" (the card itself) and for a word
    this code does not know, which says nothing about the pair."""
    word = word.strip()
    if word in PCIE_PATHS:
        return Link(pcie=word)
    if word == "SOC":
        return Link(pcie="SYS")
    nv = _NVLINK.fullmatch(word)
    if nv is not None and 0 < int(nv.group(1)) < 256:
        return Link(int(nv.group(1)))
    return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def parse_topo_matrix(text: str) -> Topology:
    """The cards' links and NUMA nodes from what ``nvidia-smi topo -m`` printed.

    The real format: a header of tab-separated columns (``\\tGPU0\\tGPU1...\\tNIC0
    ...\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID``, underlined with terminal
    escapes by some drivers), one row per GPU and per NIC (``GPU0\\t X \\tNV18...``),
    then the ``Legend:`` and ``NIC Legend:`` blocks. NIC rows and columns,
    columns this code does not know and cells it cannot read say nothing about
    the cards; a pair whose two cells differ gets the slower. "NUMA Affinity"
    is the CPU side's NUMA node; "GPU NUMA ID" (a GPU's own memory on
    coherent platforms) is not a socket and is not used.

    Raises :class:`TopologyError` naming what is wrong when there is no matrix
    to read: the text is someone else's and is never trusted.
    """
    lines = _ESCAPE.sub("", text).splitlines()
    header_at = _header_line(lines)
    header = [c for c in (c.strip() for c in lines[header_at].split("\t")[1:]) if c]
    rows = _rows(lines[header_at + 1 :])
    devices = 0
    while devices < len(header) and header[devices] in rows:
        devices += 1
    gpus = {int(m.group(1)): name for name in header[:devices] if (m := _GPU.fullmatch(name)) is not None}
    if not gpus:
        raise TopologyError(f"its header names no GPU that has a row ({_shown(lines[header_at].strip())})")
    count = max(gpus) + 1
    if count > MAX_CARDS:
        raise TopologyError(f"it names GPU{count - 1}, more cards than the {MAX_CARDS} this code reads")
    column = {name: i for i, name in enumerate(header[:devices])}
    trailing = header[devices:]
    links: dict[tuple[int, int], Link] = {}
    numa: dict[int, int] = {}
    for a, name in gpus.items():
        cells = rows[name]
        links.update(_row_links(a, cells, gpus, column))
        node = _numa_affinity(trailing, cells[devices:])
        if node is not None:
            numa[a] = node
    return Topology.build(count, links, numa)


def _header_line(lines: list[str]) -> int:
    """Where the matrix's header is: the first line of tab-separated columns naming a GPU."""
    for i, line in enumerate(lines):
        if line.startswith("\t") and any(_GPU.fullmatch(c.strip()) for c in line.split("\t")):
            return i
    first = next((line.strip() for line in lines if line.strip()), "")
    raise TopologyError(f"no GPU matrix in it (it begins {_shown(first)})")


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """Each row's cells by its name, up to the legend; a name seen again keeps its first row."""
    rows: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("Legend:"):
            break
        cells = [c.strip() for c in line.split("\t")]
        if len(cells) > 1 and cells[0] and cells[0] not in rows:
            rows[cells[0]] = cells[1:]
    return rows


def _row_links(a: int, cells: list[str], gpus: dict[int, str], column: dict[str, int]) -> dict[tuple[int, int], Link]:
    """The links GPU ``a``'s row gives it to each other GPU; a cell it cannot read gives none."""
    links: dict[tuple[int, int], Link] = {}
    for b, other in gpus.items():
        at = column[other]
        link = link_from_word(cells[at]) if a != b and at < len(cells) else None
        if link is not None:
            links[(a, b)] = link
    return links


def _numa_affinity(trailing: list[str], cells: list[str]) -> Optional[int]:
    """The row's "NUMA Affinity" (the CPU side's NUMA node), from the columns after the
    devices' (empty cells skipped); None when it is not a number."""
    values = dict(zip(trailing, [c for c in cells if c]))
    node = values.get(_NUMA_AFFINITY, "")
    return int(node) if _NUMBER.fullmatch(node) else None
