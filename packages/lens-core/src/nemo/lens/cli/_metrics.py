"""`lens metrics`: list every metric group a consumer's code declares, before it runs a job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from nemo.lens.cli._imports import import_target, load_targets
from nemo.lens.cli._parser import EXIT_BAD_INPUT
from nemo.lens.cli._table import render_markdown, render_table
from nemo.lens.cli._weaver import render_weaver_registry
from nemo.lens.instruments import MetricSpec, registered_metric_groups

__all__ = ["add_arguments", "run"]

HELP = "list the metric groups a module declares (table, Markdown or Weaver YAML)"
DESCRIPTION = """\
Import one or more modules (and call MODULE:CALLABLE when given), then list every
metric group registered with register_metric_group: its key, series name, kind, unit
and description. --format yaml writes an OpenTelemetry Weaver semantic-convention
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
