"""What every `lens` command shares: the parser, argument types, `--import`, printing a
report to a pipe, network probes.

Bad input is one line on stderr and exit status 2; the environment rules themselves (which
endpoint, which port) live in `nemo.lens._otel_env`, so the commands test exactly what a
job would use.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any, Final, NoReturn, TypeVar

from nemo.lens._otel_env import MAX_DURATION_S

_N = TypeVar("_N", int, float)

#: The exit status for input the command cannot act on (argparse's own convention).
EXIT_BAD_INPUT: Final = 2


class LensArgumentParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line on stderr, then exit status 2.

    argparse prints the whole usage block before the message; a one-line error is easier
    to read in a job log, and `--help` still shows the usage.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Command name -> its parser, for the `lens` parser's commands.
        self.sub_parsers: dict[str, LensArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line} (see '{self.prog} --help')\n")


def _parsed(
    text: str, parse: Callable[[str], _N], accept: Callable[[_N], bool], expected: str
) -> _N:
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """Parse an integer >= 1, for counts such as `--steps`."""
    return _parsed(text, int, lambda value: value >= 1, "a whole number >= 1")


def non_negative_float(text: str) -> float:
    """Parse a number of seconds in [0, `MAX_DURATION_S`], for durations such as
    `--interval` and `--timeout` (a longer wait overflows a socket's or a sleep's clock)."""
    return _parsed(
        text,
        float,
        lambda value: 0 <= value <= MAX_DURATION_S,
        f"a number of seconds >= 0 and <= {MAX_DURATION_S}",
    )


def tcp_port(text: str) -> int:
    """Parse a TCP port number, 1 to 65535."""
    return _parsed(text, int, lambda value: 1 <= value <= 65535, "a TCP port from 1 to 65535")


# --- --import MODULE[:CALLABLE] ------------------------------------------------------------

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET_PATTERN: Final = re.compile(rf"(?P<module>{_DOTTED})(?::(?P<attribute>{_DOTTED}))?")
_EXPECTED: Final = (
    "expected MODULE[:CALLABLE], for example 'my_framework.telemetry:declare_metrics'"
)


class ImportTargetError(Exception):
    """A `--import` target could not be imported or called; the message is one line."""


def import_target(text: str) -> str:
    """argparse type: check the `MODULE[:CALLABLE]` shape before anything is imported."""
    if _TARGET_PATTERN.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{_EXPECTED}, got {text!r}")
    return text


def _one_line(exc: BaseException) -> str:
    detail = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def load_target(target: str) -> None:
    """Import `MODULE` and, when `:CALLABLE` is given, call it with no arguments.

    A framework declares its metric groups (and span groups, export strategies) when its
    module is imported, or in a function it calls at start-up; the commands that inspect
    those declarations run that code first. The working directory goes on `sys.path`
    first, as `python -m` does, so a project's own modules import from its checkout.

    Raises:
        ImportTargetError: The module cannot be imported, the attribute is missing or not
            callable, or the import or the call raised (an `Exception` or `SystemExit`).
    """
    match = _TARGET_PATTERN.fullmatch(target)
    if match is None:
        raise ImportTargetError(f"{_EXPECTED}, got {target!r}")
    module_name, attribute_path = match["module"], match["attribute"]
    working_directory = os.getcwd()
    if working_directory not in sys.path:
        sys.path.insert(0, working_directory)
    # SystemExit too: a module or callable that calls sys.exit() is a target that failed,
    # not the command's own exit status.
    try:
        importlib.import_module(module_name)
        found = None if attribute_path is None else pkgutil.resolve_name(target)
    except AttributeError as exc:
        if module_name in sys.modules and exc.name in attribute_path.split("."):
            raise ImportTargetError(
                f"module {module_name!r} has no attribute {attribute_path!r}; expected "
                "MODULE:CALLABLE naming a function in that module"
            ) from exc
        raise ImportTargetError(_cannot_import(module_name, exc)) from exc
    except (Exception, SystemExit) as exc:
        raise ImportTargetError(_cannot_import(module_name, exc)) from exc
    if attribute_path is None:
        return
    if not callable(found):
        raise ImportTargetError(
            f"{module_name}:{attribute_path} is a {type(found).__name__}, not callable; "
            "expected a function that takes no arguments"
        )
    try:
        found()
    except (Exception, SystemExit) as exc:
        raise ImportTargetError(
            f"{module_name}:{attribute_path}() raised {_one_line(exc)}"
        ) from exc


def _cannot_import(module_name: str, exc: BaseException) -> str:
    return (
        f"cannot import module {module_name!r} ({_one_line(exc)}); expected an importable "
        "module on sys.path or in the working directory"
    )


def load_targets(targets: Iterable[str], command: str) -> bool:
    """Load each target in order; on the first failure print one error line and stop.

    Args:
        targets: The `--import` values, already checked by `import_target`.
        command: The command name the error line starts with, such as "lens metrics".

    Returns:
        True when every target loaded; False after printing why one did not.
    """
    for target in targets:
        try:
            load_target(target)
        except ImportTargetError as exc:
            print(f"{command}: error: {exc}", file=sys.stderr)
            return False
    return True


# --- standard output -----------------------------------------------------------------------


def print_report(text: str) -> bool:
    """Print `text` and flush; False, quietly, when the reader closed the pipe.

    `lens doctor | head -1` closes the pipe early. As other command-line tools do, the
    command then stops without a traceback: stdout is pointed at /dev/null so the
    interpreter's final flush of what is still buffered cannot fail again.
    """
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
    return True


# --- what to install -----------------------------------------------------------------------


def distribution_of(module: str) -> str:
    """The distribution that installs `module`, for each module in EXPORTER_REQUIREMENTS.

    Each of them is named after its top module with `.` and `_` spelled `-`
    (`opentelemetry.sdk` -> `opentelemetry-sdk`, `prometheus_client` -> `prometheus-client`).
    """
    return module.replace(".", "-").replace("_", "-")


# --- network probes -------------------------------------------------------------------------


def connect_problem(host: str, port: int, timeout: float) -> str | None:
    """Open and close one TCP connection; return None on success, else why it failed."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def bind_problem(host: str, port: int) -> str | None:
    """Try to bind (host, port) as an HTTP server would; None if it can, else why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # HTTP servers set SO_REUSEADDR, so a port in TIME_WAIT is free for them too.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
