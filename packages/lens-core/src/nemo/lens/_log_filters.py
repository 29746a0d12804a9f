"""Installing lens's filters on OpenTelemetry's own loggers, each once per process.

Some OpenTelemetry code logs a record on the caller's thread every time a thing happens:
the W3C baggage propagator for every bad header it drops (`nemo.lens.propagation`), the
attribute cleaning for every value a length limit cuts (`nemo.lens._sdk._value_limits`).
lens bounds those with a `logging.Filter` on that logger; `install_once` is how each is
installed: once per (logger, filter), thread-safe, and `logging` called under no lens lock.
"""

from __future__ import annotations

import logging
import threading

_lock = threading.Lock()
#: The (logger name, filter) pairs installed in this process.
_installed: set[tuple[str, logging.Filter]] = set()


def install_once(logger_name: str, log_filter: logging.Filter) -> None:
    """Add `log_filter` to the logger `logger_name`, the first time only (thread-safe)."""
    key = (logger_name, log_filter)
    if key in _installed:
        return
    with _lock:
        install = key not in _installed
        _installed.add(key)
    if install:  # after the lock: lens calls into logging under none of its locks
        logging.getLogger(logger_name).addFilter(log_filter)
