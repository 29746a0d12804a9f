"""Render the declared metric groups as an aligned text table or a Markdown table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from nemo.lens.instruments import MetricSpec

__all__ = ["COLUMNS", "render_markdown", "render_table"]

COLUMNS: Final = ("group", "key", "name", "kind", "unit", "description")


def _rows(groups: Mapping[str, Sequence[MetricSpec]]) -> list[tuple[str, ...]]:
    return [
        (group, spec.key, spec.name, spec.kind, spec.unit, spec.description)
        for group, specs in groups.items()
        for spec in specs
    ]


def _flatten(cell: str) -> str:
    # A table row is one line: newlines and tabs inside a description become spaces.
    return " ".join(cell.split())


def render_table(groups: Mapping[str, Sequence[MetricSpec]]) -> str:
    """Return a plain-text table with one row per spec, columns aligned with spaces."""
    rows = [tuple(column.upper() for column in COLUMNS)]
    rows += [tuple(_flatten(cell) for cell in row) for row in _rows(groups)]
    widths = [max(len(row[index]) for row in rows) for index in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def _markdown_cell(cell: str, *, code: bool) -> str:
    # GitHub's tables read "\\|" as a literal pipe, inside code spans too.
    text = _flatten(cell).replace("|", "\\|")
    if code and text and "`" not in text:
        return f"`{text}`"
    return text


def render_markdown(groups: Mapping[str, Sequence[MetricSpec]]) -> str:
    """Return a GitHub-flavoured Markdown table with one row per spec."""
    header = "| " + " | ".join(column.capitalize() for column in COLUMNS) + " |"
    divider = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [header, divider]
    for row in _rows(groups):
        cells = [_markdown_cell(cell, code=index < 5) for index, cell in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
