"""lens-core's size limits: no module over 750 lines, no function over 100 but one stated."""

from __future__ import annotations

import ast
from pathlib import Path

import nemo.lens

LENS_ROOT = Path(nemo.lens.__file__).parent

#: A module past this many lines is split by concept (HOUSE_STYLE: near 600, never past 750).
MODULE_LIMIT = 750
#: A function past this many lines, decorators and docstring included, is split.
FUNCTION_LIMIT = 100

#: Functions allowed past FUNCTION_LIMIT, by (module path under nemo/lens, qualified name).
LONG_FUNCTIONS = {
    # The per-step path of record_metrics: a value costs a dict look-up, one chained
    # comparison and the SDK call inside one loop, and every rare case leaves that loop
    # through a call of its own. Split into helpers, the loop would pay a Python call per
    # value, which benchmarks/bench_metrics.py and bench_step.py measure (AGENTS.md).
    ("instruments/_record.py", "record_metrics"),
    # Its twin for coalesced values: one loop under one shard lock, a branch per kind.
    ("instruments/_coalesce.py", "CoalescingBuffer.keep_call"),
}


def lens_sources() -> list[Path]:
    return sorted(LENS_ROOT.rglob("*.py"))


def function_sizes(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines from the first decorator to the last line) of each function."""
    sizes: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    sizes.append((name, (child.end_lineno or child.lineno) - first + 1))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return sizes


def test_no_module_is_over_the_limit() -> None:
    """Every module of nemo.lens has at most 750 lines."""
    too_long = {
        path.relative_to(LENS_ROOT).as_posix(): lines
        for path in lens_sources()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LIMIT
    }
    assert too_long == {}


def test_no_function_is_over_the_limit_but_the_stated_exceptions() -> None:
    """Every function has at most 100 lines, except those LONG_FUNCTIONS names with a reason."""
    too_long = {}
    for path in lens_sources():
        relative = path.relative_to(LENS_ROOT).as_posix()
        for name, lines in function_sizes(path):
            if lines > FUNCTION_LIMIT and (relative, name) not in LONG_FUNCTIONS:
                too_long[relative, name] = lines
    assert too_long == {}


def test_every_stated_exception_still_exists() -> None:
    """An exception that names no function any more (renamed, split) is dropped from the list."""
    present = {
        (path.relative_to(LENS_ROOT).as_posix(), name)
        for path in lens_sources()
        for name, _ in function_sizes(path)
    }
    assert LONG_FUNCTIONS - present == set()
