"""Docstrings stay short: the design is explained once, in docs/architecture.md.

A docstring says why the thing exists and what a caller must know; the longer
story of how the parts fit lives in docs/architecture.md, where it is read
beside the rest. A docstring that points there names a section that exists.
"""

from __future__ import annotations

import ast
import re

from helpers.paths import CHECKOUT

PACKAGE = CHECKOUT / "tpnode_tui"
ARCHITECTURE = CHECKOUT / "docs" / "architecture.md"
MOST_LINES = 15

# A section's name is quoted; an apostrophe inside it is followed by a letter.
NAME = r"'((?:[^']|'(?=\w))+)'"
POINTER = re.compile(rf"architecture\.md,\s+sections?\s+{NAME}(?:(?:,|,?\s+and)\s+{NAME})*")
NAMES = re.compile(NAME)
HEADING = re.compile(r"^#+\s+(.*\S)\s*$", re.MULTILINE)

DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _long_docstrings() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(CHECKOUT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, DOCUMENTED):
                continue
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and len(doc.splitlines()) > MOST_LINES:
                where = getattr(node, "lineno", 1)
                what = getattr(node, "name", "<module>")
                found.append(f"{name}:{where} {what}: {len(doc.splitlines())} lines")
    return found


def test_no_docstring_is_longer_than_fifteen_lines() -> None:
    assert _long_docstrings() == []


def test_every_pointer_names_a_section_of_the_architecture() -> None:
    sections = set(HEADING.findall(ARCHITECTURE.read_text()))
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for match in POINTER.finditer(path.read_text()):
            for name in NAMES.findall(match.group(0)):
                section = " ".join(name.split())
                if section not in sections:
                    missing.append(f"{path.relative_to(CHECKOUT)}: {section!r}")
    assert missing == []


def test_a_pointer_is_read_across_lines_and_apostrophes() -> None:
    text = "docs/architecture.md, sections 'The\n    supervisor's exit codes' and 'Triage'."
    pointer = POINTER.search(text)
    assert pointer is not None
    names = [" ".join(name.split()) for name in NAMES.findall(pointer.group(0))]
    assert names == ["The supervisor's exit codes", "Triage"]
