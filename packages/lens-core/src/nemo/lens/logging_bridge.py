"""Send Python `logging` records to OpenTelemetry's logs pipeline, when there is one.

Consumers call `setup_logging_bridge()` unconditionally when their `logs_enabled` flag is
on. Until an SDK `LoggerProvider` is the global logger provider there is nothing to
bridge to, and the call returns without doing anything.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Final

__all__ = ["setup_logging_bridge"]

_logger = logging.getLogger(__name__)

# Marks the handler lens attached, so a repeated call finds it instead of adding another.
_BRIDGE_MARK: Final = "_nemo_lens_logging_bridge"


def setup_logging_bridge(logger_name: str = "", level: int = logging.INFO) -> None:
    """Attach one OpenTelemetry logging handler to `logging.getLogger(logger_name)`.

    Does nothing unless the global logger provider is an SDK `LoggerProvider`. Calling
    it again attaches nothing more: it updates the level of the handler it attached, or
    replaces that handler if the global provider changed. Never raises.

    Args:
        logger_name: The logger to bridge; `""` is the root logger.
        level: The lowest level the handler forwards.
    """
    try:
        provider = _sdk_logger_provider()
        if provider is None:
            return
        target = logging.getLogger(logger_name)
        for existing in list(target.handlers):
            if not getattr(existing, _BRIDGE_MARK, False):
                continue
            if getattr(existing, _BRIDGE_MARK + "_provider", None) is provider:
                existing.setLevel(level)
                return
            target.removeHandler(existing)
        handler = _new_handler(level, provider)
        setattr(handler, _BRIDGE_MARK, True)
        setattr(handler, _BRIDGE_MARK + "_provider", provider)
        target.addHandler(handler)
    except Exception as exc:
        _logger.warning(
            "setup_logging_bridge(%r) failed (%s: %s); logs are not bridged",
            logger_name,
            type(exc).__name__,
            exc,
        )


def _sdk_logger_provider() -> Any:
    """The global logger provider if it is the SDK's, else None."""
    try:
        from opentelemetry._logs import get_logger_provider
        from opentelemetry.sdk._logs import LoggerProvider
    except ImportError:
        return None
    provider = get_logger_provider()
    return provider if isinstance(provider, LoggerProvider) else None


def _new_handler(level: int, provider: Any) -> logging.Handler:
    """The logging instrumentation's handler where installed, else the SDK's."""
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
