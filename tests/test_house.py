"""The house kept in order: a function reads on one screen (a graph's build is its wiring, each node a
function of its own)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "halluscope"
LONGEST = 80  # lines, docstring included


def test_no_function_of_the_package_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for found in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (found.end_lineno or found.lineno) - found.lineno + 1
                if lines > LONGEST:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{found.lineno} {found.name} ({lines} lines)")
    assert not long, long
