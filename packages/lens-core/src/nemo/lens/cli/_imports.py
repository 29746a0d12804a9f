"""Import a consumer's module named on the command line, as `MODULE[:CALLABLE]`.

A framework declares its metric groups (and span groups, export strategies) when its
module is imported, or in a function it calls at start-up; the commands that inspect a
consumer's declarations run that code first.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Iterable

__all__ = ["ImportTargetError", "import_target", "load_target", "load_targets"]

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_TARGET_PATTERN = re.compile(rf"(?P<module>{_DOTTED})(?::(?P<attribute>{_DOTTED}))?")
_EXPECTED = "expected MODULE[:CALLABLE], for example 'my_framework.telemetry:declare_metrics'"


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

    The working directory goes on `sys.path` first, as `python -m` does, so a project's
    own modules import from its checkout.

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
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise ImportTargetError(
            f"cannot import module {module_name!r} ({_one_line(exc)}); expected an importable "
            "module on sys.path or in the working directory"
        ) from exc
    if attribute_path is None:
        return
    found: object = module
    for part in attribute_path.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise ImportTargetError(
                f"module {module_name!r} has no attribute {attribute_path!r}; expected "
                "MODULE:CALLABLE naming a function in that module"
            ) from exc
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
