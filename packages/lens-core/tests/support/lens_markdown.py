"""The fenced code blocks of a Markdown page, for the docs tests (tests/test_docs.py reads
their widths and syntax, tests/test_docs_examples.py runs the Python ones)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

#: An opening fence, maybe indented (a block inside a list item), with its language.
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w+-]*)")


class CodeBlock(NamedTuple):
    """One fenced block: the page line its code starts on, its language, its lines
    (dedented by the fence's indent)."""

    line: int
    language: str
    lines: list[str]


def code_blocks(page: Path) -> list[CodeBlock]:
    """Every fenced code block of `page`, in page order."""
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
        blocks.append(CodeBlock(start, opening["language"], body))
    return blocks
