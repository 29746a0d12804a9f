"""`lens view`: a self-contained HTML report of OTLP/JSON-lines files, no backend needed.

The files are what `lens demo` and lens's console exporter write, or what the
OpenTelemetry Collector's file exporter writes; several files (ranks) make one report.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from nemo.lens import _otel_env
from nemo.lens.cli._common import EXIT_BAD_INPUT

HELP = "write a self-contained HTML report of OTLP/JSON-lines files (no backend needed)"
DESCRIPTION = """\
Read OTLP/JSON lines (what `lens demo` and lens's console exporter write, and what the
OpenTelemetry Collector's file exporter writes: metrics, spans and logs of one or many
processes) and write one HTML file that opens offline in a browser: a chart per metric,
where the spans' time goes with a timeline of the slowest traces, and the logs.
Malformed lines are counted and skipped. Needs the view extra: pip install 'lens-core[view]'.
"""
EPILOG = """\
examples:
  lens view lens-demo.jsonl
  lens view rank0.jsonl rank1.jsonl -o run.html

exit status: 0 the report was written; 1 it cannot be written (the view extra missing, a
disk full); 2 bad input (a file that does not exist or cannot be read).
"""
#: The charting library `lens view` needs, and the module that tells it is installed.
CHARTING_MODULE: Final = "plotly"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `lens view`."""
    parser.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="OTLP/JSON-lines files to read"
    )
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        metavar="REPORT",
        help="the HTML file to write (default: the first FILE with the suffix .html)",
    )


def default_out(first: Path) -> Path:
    """`run.jsonl` -> `run.html`, beside it."""
    return (
        first.with_suffix(".html")
        if first.suffix != ".html"
        else first.with_name(first.name + ".html")
    )


def _files_problem(files: Sequence[Path]) -> str | None:
    for path in files:
        if not path.exists():
            return f"FILE {str(path)!r} does not exist"
        if path.is_dir():
            return f"FILE {str(path)!r} is a directory; give an OTLP/JSON-lines file"
        try:
            path.open("rb").close()
        except OSError as exc:
            return f"FILE {str(path)!r} cannot be read: {exc.strerror or exc}"
    return None


def _out_problem(files: Sequence[Path], out: Path) -> str | None:
    if out.is_dir():
        return f"--out {str(out)!r} is a directory; give the path of a file to write"
    if not out.resolve().parent.is_dir():
        return f"--out {str(out)!r}: the directory {str(out.resolve().parent)!r} does not exist"
    if any(out.resolve() == path.resolve() for path in files):
        return f"--out {str(out)!r} is one of the files to read; choose another path"
    return None


def run(args: argparse.Namespace) -> int:
    """Write the report; print its path and what it holds."""
    files: list[Path] = args.files
    problem = _files_problem(files)
    if problem is None:
        out: Path = args.out if args.out is not None else default_out(files[0])
        problem = _out_problem(files, out)
    if problem is not None:
        print(f"lens view: error: {problem} (see 'lens view --help')", file=sys.stderr)
        return EXIT_BAD_INPUT
    return write_report(files, out)


def write_report(files: Sequence[Path], out: Path) -> int:
    """Read `files`, write the report to `out`, print where; 0, or 1 when it cannot be
    written (`lens demo --view` calls this too)."""
    if not _otel_env.is_importable(CHARTING_MODULE):
        print(
            f"lens view: the charting library ({CHARTING_MODULE}) is not installed; "
            f"{_otel_env.install_hint(_otel_env.VIEW_EXTRA)}",
            file=sys.stderr,
        )
        return 1
    from nemo.lens._view._page import write_page
    from nemo.lens._view._report import build_report

    try:
        report = build_report(files)
        size = write_page(report, ", ".join(path.name for path in files), out)
    except OSError as exc:
        print(f"lens view: cannot write {str(out)!r}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    counts = report.counts
    print(
        f"lens view: {counts['points']} metric points, {counts['spans']} spans, "
        f"{counts['logs']} logs from {len(files)} file{'s' if len(files) != 1 else ''}"
        f" ({counts['skippedLines']} malformed lines skipped)"
    )
    print(f"lens view: wrote {out} ({size / 1e6:.1f} MB); open it in a browser")
    return 0
