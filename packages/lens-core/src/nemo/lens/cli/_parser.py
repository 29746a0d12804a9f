"""The argument parser every `lens` command shares: bad input is one line and exit 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["EXIT_BAD_INPUT", "LensArgumentParser", "non_negative_float", "positive_int", "tcp_port"]

#: The exit status for input the command cannot act on (argparse's own convention).
EXIT_BAD_INPUT = 2


class LensArgumentParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line on stderr, then exit status 2.

    argparse prints the whole usage block before the message; a one-line error is easier
    to read in a job log, and `--help` still shows the usage.
    """

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line} (see '{self.prog} --help')\n")


def positive_int(text: str) -> int:
    """Parse an integer >= 1, for counts such as `--steps`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """Parse a finite number >= 0, for durations such as `--interval`."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def tcp_port(text: str) -> int:
    """Parse a TCP port number, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port from 1 to 65535, got {text!r}")
    return value
