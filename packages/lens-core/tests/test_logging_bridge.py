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


class StrRaises:
    """An object whose str() raises, as a broken __str__ in user code does."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def log_bad_format(logger: logging.Logger) -> None:
    logger.info("step %d", "x")


def log_unprintable(logger: logging.Logger) -> None:
    logger.info(StrRaises())


def log_bad_exception_arguments(logger: logging.Logger) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed %s and %s", "only one")


@pytest.mark.parametrize("bad_call", [log_bad_format, log_unprintable, log_bad_exception_arguments])
@pytest.mark.parametrize("raise_exceptions", [True, False])
def test_a_bad_logging_call_never_raises_through_the_bridge(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bad_call: Any,
    raise_exceptions: bool,
) -> None:
    """A record that cannot be formatted is handled as logging.Handler.handleError does:
    no exception, one "--- Logging error ---" on stderr unless raiseExceptions is off."""
    exporter = install_logger_provider()
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    # pytest's own capture handler on the root raises on a bad record: keep it out.
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logging, "raiseExceptions", raise_exceptions)
    setup_logging_bridge(LOGGER_NAME)
    bad_call(logger)
    logger.warning("still bridged")
    err = capsys.readouterr().err
    assert err.count("--- Logging error ---") == (1 if raise_exceptions else 0), err
    bodies = [data.log_record.body for data in exporter.get_finished_logs()]
    assert bodies == ["still bridged"]


@pytest.mark.parametrize(
    "name", ["opentelemetry", "opentelemetry.sdk._logs", "nemo.lens", "nemo.lens._sdk.x"]
)
def test_records_of_opentelemetry_and_lens_loggers_are_not_bridged(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A bridge on the root never forwards records of `opentelemetry*` or `nemo.lens*`
    loggers (the exporter's own failures would feed the pipeline); others pass."""
    exporter = install_logger_provider()
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.INFO)
    setup_logging_bridge("")
    try:
        logging.getLogger(name).warning("internal")
        for neighbour in ("opentelemetryx", "nemo.lensx", "app"):
            logging.getLogger(neighbour).warning(neighbour)
    finally:
        for handler in bridge_handlers(root):
            root.removeHandler(handler)
    bodies = [data.log_record.body for data in exporter.get_finished_logs()]
    assert bodies == ["opentelemetryx", "nemo.lensx", "app"]
