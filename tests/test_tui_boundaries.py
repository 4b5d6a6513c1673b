"""Only the dashboard may import Textual: the back end is a library the CLI,
scripts and tests use without a terminal UI installed or loaded."""
from __future__ import annotations

import ast
from pathlib import Path

import tpnode_tui

PACKAGE = Path(tpnode_tui.__file__).parent


def textual_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {n}"
                  for n in names if n == "textual" or n.startswith("textual.")]
    return found


def test_nothing_outside_tui_imports_textual():
    modules = [p for p in PACKAGE.rglob("*.py") if "tui" not in p.relative_to(PACKAGE).parts[:1]]
    assert len(modules) > 10, "the walk found too few modules to mean anything"
    offenders = [line for path in modules for line in textual_imports(path)]
    assert offenders == []


def test_the_check_does_see_textual_imports():
    app = PACKAGE / "tui" / "app.py"
    assert any("imports textual" in line for line in textual_imports(app))
