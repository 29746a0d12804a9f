"""The demo's terminal view: a progress bar and a table of the latest values.

On a terminal it redraws in place with plain ANSI escapes; anywhere else (a pipe, a
file, `TERM=dumb`) it prints one plain line per step, so logs stay readable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Final, TextIO

__all__ = ["LiveView", "is_live_terminal"]

_BAR_WIDTH: Final = 30
_CLEAR_LINE: Final = "\x1b[2K"


def is_live_terminal(stream: TextIO) -> bool:
    """True when `stream` is a terminal that understands cursor movement."""
    try:
        is_tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return is_tty and os.environ.get("TERM", "") != "dumb"


class LiveView:
    """Shows the progress of a run of `total` steps on `stream`.

    Args:
        stream: Where to draw, usually `sys.stdout`.
        total: The number of steps the run will make.
        live: Redraw in place (a terminal) instead of printing one line per step.
    """

    def __init__(self, stream: TextIO, total: int, *, live: bool) -> None:
        self._stream = stream
        self._total = total
        self._live = live
        self._drawn_lines = 0
        self._started = time.monotonic()

    def update(self, done: int, rows: Sequence[tuple[str, str, str]]) -> None:
        """Show that `done` steps finished; `rows` are (series, latest value, unit)."""
        if self._live:
            self._redraw(self._live_lines(done, rows))
        else:
            values = "  ".join(f"{series}={value}" for series, value, _ in rows)
            self._stream.write(f"step {done}/{self._total}  {values}\n")
        self._stream.flush()

    def _live_lines(self, done: int, rows: Sequence[tuple[str, str, str]]) -> list[str]:
        filled = _BAR_WIDTH * done // max(self._total, 1)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        elapsed = max(time.monotonic() - self._started, 1e-9)
        lines = [
            f"step {done}/{self._total} [{bar}] {100 * done // max(self._total, 1):3d}%  "
            f"{done / elapsed:.1f} steps/s"
        ]
        width = max((len(series) for series, _, _ in rows), default=6)
        lines.append(f"  {'series':<{width}}  {'latest':>12}  unit")
        lines += [
            f"  {series:<{width}}  {value:>12}  {unit}".rstrip() for series, value, unit in rows
        ]
        return lines

    def _redraw(self, lines: list[str]) -> None:
        if self._drawn_lines:
            # Move to the start of the first line drawn last time, then overwrite.
            self._stream.write(f"\x1b[{self._drawn_lines}F")
        self._stream.write("".join(f"{_CLEAR_LINE}{line}\n" for line in lines))
        self._drawn_lines = len(lines)

    def message(self, text: str) -> None:
        """Print a line below the view; the next update draws a fresh view under it."""
        self._stream.write(f"{text}\n")
        self._stream.flush()
        self._drawn_lines = 0
