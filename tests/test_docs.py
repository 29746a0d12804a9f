"""The documentation a newcomer reads: the README's two commands, and code that works and fits.

The docs site is `mkdocs build --strict` in the `docs` session; these checks cover what that
build does not: that each Python example at least parses, and that code lines fit the page
column instead of scrolling sideways (console output, which is what a command printed, may).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted(
    [
        REPOSITORY / "README.md",
        *(REPOSITORY / "docs").glob("*.md"),
        *(REPOSITORY / "packages").glob("*/README.md"),
    ]
)
# The widest code line the docs site shows without a scroll bar in a 1440-pixel-wide window
# (checked with headless Chromium; docs/stylesheets/extra.css widens the grid for it).
COLUMN = 100
# Blocks that show what a program printed, not code to read or paste.
OUTPUT_LANGUAGES = frozenset({"console", "text"})
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w+-]*)")


def _blocks(page: pathlib.Path) -> list[tuple[int, str, list[str]]]:
    """(first line number, language, lines) of each fenced code block of `page`."""
    blocks = []
    lines = page.read_text(encoding="utf-8").splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        number += 1
        if opening is None:
            continue
        indent, body, start = len(opening["indent"]), [], number + 1
        while number < len(lines) and not lines[number].strip().startswith("```"):
            body.append(lines[number][indent:])
            number += 1
        number += 1
        blocks.append((start, opening["language"], body))
    return blocks


def _page_id(page: pathlib.Path) -> str:
    return page.relative_to(REPOSITORY).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_python_example_parses(page: pathlib.Path) -> None:
    """Each ```python block of the page is valid Python (a typo in an example fails here)."""
    broken = []
    for start, language, body in _blocks(page):
        if language != "python":
            continue
        try:
            ast.parse("\n".join(body))
        except SyntaxError as exc:
            broken.append(f"line {start + (exc.lineno or 1) - 1}: {exc.msg}")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_code_lines_fit_the_column(page: pathlib.Path) -> None:
    """No line of code to read or paste is wider than the page column."""
    too_wide = [
        f"line {start + offset}: {len(line)} characters"
        for start, language, body in _blocks(page)
        if language not in OUTPUT_LANGUAGES
        for offset, line in enumerate(body)
        if len(line) > COLUMN
    ]
    assert too_wide == []


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    """The README's first code block runs the demo; the block under the test-command
    marker (what .ci/run executes) runs nox; the demo comes first."""
    readme = REPOSITORY / "README.md"
    text = readme.read_text(encoding="utf-8")
    blocks = _blocks(readme)
    first = "\n".join(blocks[0][2])
    assert "lens demo" in first
    marker = text.index("<!-- test-command -->")
    after_marker = [body for start, _, body in blocks if start > text[:marker].count("\n") + 1]
    assert "nox" in after_marker[0][0]
    assert text.index("lens demo") < marker
