"""What every exporter wrapper of lens's pipeline shares: it forwards `shutdown` and
`force_flush` to the exporter it wraps, and does its own work in `export` only.

A mixin, placed before the signal's SDK exporter base (`class X(Forwarding, SpanExporter)`),
so the wrappers of spans and of logs (whose base comes from the installed release) read
alike.
"""

from __future__ import annotations

from typing import Any


class Forwarding:
    """Holds `exporter` and forwards `shutdown` and `force_flush` to it."""

    def __init__(self, exporter: Any) -> None:
        super().__init__()
        self._exporter = exporter

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        flush = getattr(self._exporter, "force_flush", None)  # absent from SDK 1.23's log base
        return True if flush is None else bool(flush(timeout_millis))
