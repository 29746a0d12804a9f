"""The SDK side of the logging bridge: the global SDK logger provider and its handler."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from opentelemetry._logs import get_logger_provider
from opentelemetry.sdk._logs import LoggerProvider


def sdk_logger_provider() -> LoggerProvider | None:
    """The global logger provider if it is the SDK's, else None."""
    provider = get_logger_provider()
    return provider if isinstance(provider, LoggerProvider) else None


def new_logging_handler(level: int, provider: Any) -> logging.Handler:
    """The logging instrumentation's handler where installed, else the SDK's."""
    # Looked for here, not at the top: the instrumentation package is the user's choice,
    # not a lens dependency, and the SDK's own handler stands in for it.
    try:
        from opentelemetry.instrumentation.logging.handler import (  # type: ignore[import-not-found]
            LoggingHandler,
        )
    except ImportError:
        from opentelemetry.sdk._logs import LoggingHandler
    with warnings.catch_warnings():
        # SDK 1.40+ deprecates its handler in favour of the instrumentation package's; the
        # two take the same arguments, and which one is installed is the user's choice.
        warnings.simplefilter("ignore", DeprecationWarning)
        handler: logging.Handler = LoggingHandler(level=level, logger_provider=provider)
    return handler
