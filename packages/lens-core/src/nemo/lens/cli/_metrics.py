"""`lens metrics`: list every metric group a consumer's code declares, before it runs a job.

Three renderings of the same declarations: an aligned text table, a GitHub Markdown table,
and an OpenTelemetry Weaver semantic-convention registry. Each `MetricSpec` becomes one
Weaver `type: metric` group, so `weaver registry check` can lint the series a framework
declares. Weaver's syntax has no field for histogram buckets, so a spec's buckets go in
lens's own annotation, `annotations.lens.explicit_bucket_boundaries` (named after the
OpenTelemetry API's advisory parameter). The YAML is written by hand (lens has no YAML
dependency at run time); every string is a double-quoted, ASCII-only scalar, which reads
back unchanged whatever it holds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from nemo.lens.cli._common import EXIT_BAD_INPUT, import_target, load_targets
from nemo.lens.instruments import MetricSpec, registered_metric_groups

HELP = "list the metric groups a module declares (table, Markdown or Weaver YAML)"
DESCRIPTION = """\
Import one or more modules (and call MODULE:CALLABLE when given), then list every
metric group registered with register_metric_group: its key, series name, kind, unit,
histogram buckets and description. --format yaml writes an OpenTelemetry Weaver semantic-convention
registry (one `type: metric` group per series) for `weaver registry check`.
"""
EPILOG = """\
examples:
  lens metrics --import my_framework.telemetry
  lens metrics --import my_framework.telemetry:declare_metrics --format markdown
  lens metrics --import my_framework.telemetry --format yaml > registry/metrics.yaml

exit status: 0 listed; 1 nothing is registered; 2 bad input (unknown format, a module
that cannot be imported or a callable that fails).
"""


# --- text and Markdown tables ---------------------------------------------------------

COLUMNS: Final = ("group", "key", "name", "kind", "unit", "buckets", "description")
# The columns a Markdown cell shows as code.
_CODE_COLUMNS: Final = frozenset({"group", "key", "name", "kind", "unit"})


def _short_number(bound: float) -> str:
    # The shortest text that reads back as the same float, without a trailing ".0".
    text = repr(bound)
    return text[:-2] if text.endswith(".0") else text


def buckets_cell(spec: MetricSpec) -> str:
    """The table cell for a spec's buckets: `1, 5, 10.5`, or empty when it has none."""
    return "" if spec.buckets is None else ", ".join(map(_short_number, spec.buckets))


def _rows(groups: Mapping[str, Sequence[MetricSpec]]) -> list[tuple[str, ...]]:
    return [
        (group, spec.key, spec.name, spec.kind, spec.unit, buckets_cell(spec), spec.description)
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
        cells = [
            _markdown_cell(cell, code=column in _CODE_COLUMNS)
            for column, cell in zip(COLUMNS, row, strict=True)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- the Weaver registry ------------------------------------------------------------------

#: lens kind -> Weaver `instrument` (the synchronous instrument names of the semconv syntax).
INSTRUMENT_BY_KIND: Final[dict[str, str]] = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "up_down_counter": "updowncounter",
}
#: A consumer's own series have made no stability promise.
STABILITY: Final = "development"

# YAML's short escapes for the characters that have one.
_SHORT_ESCAPES: Final[dict[str, str]] = {
    "\\": "\\\\",
    '"': '\\"',
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
}


def yaml_quote(text: str) -> str:
    """Return `text` as a YAML double-quoted scalar that uses printable ASCII only.

    Anything outside printable ASCII is escaped (`\\xXX`, `\\uXXXX` or `\\UXXXXXXXX`), so
    no character can end the scalar early or fall outside YAML's printable set.
    """
    parts = ['"']
    for char in text:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            parts.append(char)
        elif code <= 0xFF:
            parts.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)


def yaml_float(bound: float) -> str:
    """Return a finite float as a YAML scalar that YAML 1.1 and 1.2 parsers read as a float.

    `repr` is exact but may lack the `.` that YAML 1.1 (PyYAML) needs: `1e+20` would read
    back as a string, `1.0e+20` reads as the float.
    """
    text = repr(float(bound))
    mantissa, exponent_mark, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + exponent_mark + exponent


def render_weaver_registry(groups: Mapping[str, Sequence[MetricSpec]]) -> str:
    """Return the registry YAML for `groups` (group name -> its specs, in order).

    Each entry carries the Weaver fields (`id`, `type`, `metric_name`, `instrument`,
    `unit`, `brief`, `stability`) and an `annotations.lens` map with the lens group and key
    (and, for a histogram that declares buckets, `explicit_bucket_boundaries`, a list of
    floats), so the lens declaration can be rebuilt from the file.
    """
    lines = [
        "# OpenTelemetry Weaver semantic-convention registry, written by `lens metrics`.",
        "# One `type: metric` group per declared series; annotations.lens names its lens",
        "# metric group and the key passed to record_metrics, and (a lens extension: Weaver",
        "# has no bucket field) explicit_bucket_boundaries a histogram's declared buckets.",
    ]
    entries: list[str] = []
    for group, specs in groups.items():
        for spec in specs:
            entries += [
                f"  - id: {yaml_quote('metric.' + spec.name)}",
                "    type: metric",
                f"    metric_name: {yaml_quote(spec.name)}",
                f"    instrument: {INSTRUMENT_BY_KIND[spec.kind]}",
                f"    unit: {yaml_quote(spec.unit)}",
                f"    brief: {yaml_quote(spec.description)}",
                f"    stability: {STABILITY}",
                "    annotations:",
                "      lens:",
                f"        group: {yaml_quote(group)}",
                f"        key: {yaml_quote(spec.key)}",
            ]
            if spec.buckets is not None:
                bounds = ", ".join(map(yaml_float, spec.buckets))
                entries.append(f"        explicit_bucket_boundaries: [{bounds}]")
    if entries:
        lines.append("groups:")
        lines += entries
    else:
        lines.append("groups: []")
    return "\n".join(lines) + "\n"


RENDERERS: Final[dict[str, Callable[[Mapping[str, Sequence[MetricSpec]]], str]]] = {
    "table": render_table,
    "markdown": render_markdown,
    "yaml": render_weaver_registry,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `lens metrics`."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        required=True,
        type=import_target,
        metavar="MODULE[:CALLABLE]",
        help="module to import first, and optionally a function in it to call with no "
        "arguments; repeat for several modules",
    )
    parser.add_argument(
        "--format",
        choices=list(RENDERERS),
        default="table",
        help="output format (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    """Import the targets, then print the registered groups in the chosen format."""
    if not load_targets(args.imports, "lens metrics"):
        return EXIT_BAD_INPUT
    groups = registered_metric_groups()
    if not groups:
        imported = ", ".join(args.imports)
        print(
            f"lens metrics: no metric group is registered after importing {imported}; "
            "expected the module (or its CALLABLE) to call register_metric_group",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(RENDERERS[args.format](groups))
    return 0
