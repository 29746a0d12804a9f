"""setup_logging_bridge: a no-op without an SDK logger provider, one handler with one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

from nemo.lens.logging_bridge import setup_logging_bridge
from nemo.lens.testing import isolated_telemetry

LOGGER_NAME = "lens.tests.bridge"


def bridge_handlers(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if getattr(h, "_nemo_lens_logging_bridge", False)]


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    with isolated_telemetry():
        yield
    for handler in bridge_handlers(logger):
        logger.removeHandler(handler)


def in_memory_log_exporter() -> Any:
    try:  # the newer name; older SDK releases only have InMemoryLogExporter
        from opentelemetry.sdk._logs.export import (  # type: ignore[attr-defined,unused-ignore]
            InMemoryLogRecordExporter as Exporter,
        )
    except ImportError:
        from opentelemetry.sdk._logs.export import InMemoryLogExporter as Exporter
    return Exporter()  # type: ignore[no-untyped-call,unused-ignore]


def install_logger_provider() -> Any:
    exporter = in_memory_log_exporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    set_logger_provider(provider)
    return exporter


def test_without_a_logger_provider_the_call_does_nothing() -> None:
    """With no SDK logger provider the no-argument call returns and adds no handler."""
    root_before = list(logging.getLogger().handlers)
    setup_logging_bridge()
    setup_logging_bridge(LOGGER_NAME)
    assert logging.getLogger().handlers == root_before
    assert bridge_handlers(logging.getLogger(LOGGER_NAME)) == []


def test_with_a_logger_provider_records_reach_it() -> None:
    """An SDK provider gets one handler at `level`; records at or above it are exported."""
    exporter = install_logger_provider()
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.DEBUG)
    setup_logging_bridge(LOGGER_NAME, level=logging.WARNING)
    logger.info("too quiet")
    logger.warning("bridged %s", "record")
    bodies = [data.log_record.body for data in exporter.get_finished_logs()]
    assert bodies == ["bridged record"]


def test_repeated_calls_attach_one_handler_and_update_its_level() -> None:
    """Calling again adds no handler; the existing one takes the new level."""
    install_logger_provider()
    logger = logging.getLogger(LOGGER_NAME)
    setup_logging_bridge(LOGGER_NAME)
    setup_logging_bridge(LOGGER_NAME, level=logging.ERROR)
    handlers = bridge_handlers(logger)
    assert len(handlers) == 1
    assert handlers[0].level == logging.ERROR


def test_a_new_provider_replaces_the_handler() -> None:
    """After the global provider changes, the bridge re-targets instead of duplicating."""
    first = install_logger_provider()
    logger = logging.getLogger(LOGGER_NAME)
    setup_logging_bridge(LOGGER_NAME)
    from nemo.lens.testing import reset_otel_globals

    reset_otel_globals()
    second = install_logger_provider()
    setup_logging_bridge(LOGGER_NAME)
    assert len(bridge_handlers(logger)) == 1
    logger.warning("to the second provider")
    assert [d.log_record.body for d in second.get_finished_logs()] == ["to the second provider"]
    assert first.get_finished_logs() == ()
