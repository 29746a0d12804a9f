"""Send Python `logging` records to OpenTelemetry's logs pipeline, when there is one.

Consumers call `setup_logging_bridge()` unconditionally when their `logs_enabled` flag is
on. Until an SDK `LoggerProvider` is the global logger provider there is nothing to
bridge to, and the call returns without doing anything.
"""

from __future__ import annotations

import logging
from typing import Final

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
        # The SDK side is imported only now: `import nemo.lens.logging_bridge` needs the API.
        from nemo.lens._sdk._logging import new_logging_handler, sdk_logger_provider
    except ImportError:
        return  # no SDK, so the global logger provider cannot be the SDK's
    try:
        provider = sdk_logger_provider()
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
        handler = new_logging_handler(level, provider)
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
