"""The `lens` command: `lens demo`, `lens doctor`, `lens metrics` and `lens view`.

Installed as a console script by lens-core and runnable as `python -m nemo.lens.cli`.
`import nemo.lens` never imports this package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from nemo.lens.cli import _demo, _doctor, _metrics, _view
from nemo.lens.cli._common import EXIT_BAD_INPUT, LensArgumentParser
from nemo.lens.version import __version__

__all__ = ["build_parser", "main", "run"]

_COMMANDS = {"demo": _demo, "doctor": _doctor, "metrics": _metrics, "view": _view}


def build_parser() -> LensArgumentParser:
    """Return the `lens` parser with one sub-parser per command (its `sub_parsers`)."""
    parser = LensArgumentParser(
        prog="lens",
        description="OpenTelemetry traces and metrics for ML training loops.",
    )
    parser.add_argument("--version", action="version", version=f"lens {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, module in _COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=module.HELP,
            description=module.DESCRIPTION,
            epilog=module.EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        command: Callable[[argparse.Namespace], int] = module.run
        sub.set_defaults(run=command)
        parser.sub_parsers[name] = sub
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `lens` command and return its exit status.

    Args:
        argv: The arguments after the program name; `sys.argv[1:]` when None.

    Returns:
        0 on success, 1 when the command found a problem, 2 for bad input, 130 when a
        demo run was interrupted with Ctrl-C.
    """
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if args.command is None:
            expected = "expected a command: demo, doctor, metrics or view"
            parser.error(f"unrecognized arguments: {' '.join(unknown)}" if unknown else expected)
        if unknown:
            # The command's own parser reports them, with its name and its --help.
            command_parser = parser.sub_parsers[args.command]
            command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:
        # argparse exits for --help, --version and bad input; hand back the status instead.
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    with _environment_kept():
        result: int = args.run(args)
    return result


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """Put back every environment variable a command set or removed (`lens demo` points
    the exporters at its destination through them), so `main()` called in-process leaves
    `os.environ` as it found it."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in [name for name in os.environ if name not in before]:
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def run() -> NoReturn:
    """The console-script entry point: exit with the status `main()` returns."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left early (`lens doctor | head`): stop quietly, as other tools do,
        # and point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)
