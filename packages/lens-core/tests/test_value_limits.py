"""Attribute values and log bodies are bounded, so one oversized value cannot cost a batch.

A real gRPC OTLP receiver on 127.0.0.1 with gRPC's default 4 MiB receive limit (what a
Collector keeps by default) answers RESOURCE_EXHAUSTED to a larger request, and the whole
batch is lost. lens bounds span attribute values through the SDK's `SpanLimits`, and log
bodies and log attribute values itself before export; `OTEL_*_LIMIT` variables, when set,
choose the limits instead, and each cut value is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from lens_receivers import GRPC_DEFAULT_MAX_RECEIVE_BYTES, OtlpReceiver
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

try:  # the newer name; SDK 1.23 has only InMemoryLogExporter
    from opentelemetry.sdk._logs.export import (  # type: ignore[attr-defined,unused-ignore]
        InMemoryLogRecordExporter,
    )
except ImportError:
    from opentelemetry.sdk._logs.export import (  # type: ignore[assignment,unused-ignore]
        InMemoryLogExporter as InMemoryLogRecordExporter,
    )

from nemo.lens import NemoLensConfig, TelemetryHandle, _otel_env, _value_limits, setup_telemetry
from nemo.lens._export_plan import build_export_plan
from nemo.lens.errors import LensValueError
from nemo.lens.logging_bridge import setup_logging_bridge
from nemo.lens.testing import isolated_telemetry

LOGGER_NAME = "lens.tests.value_limits"
FIVE_MIB = 5 * 1024 * 1024
RECORDS = 100
DEFAULT_LENGTH = _value_limits.DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT
DEFAULT_BODY = _value_limits.DEFAULT_LOG_BODY_LENGTH_LIMIT


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the 5 MiB message must not reach pytest's capture
    with isolated_telemetry(clear_span_registry=True):
        yield
    logger.propagate = True
    for handler in list(logger.handlers):
        if getattr(handler, "_nemo_lens_logging_bridge", False):
            logger.removeHandler(handler)


def grpc_setup(
    monkeypatch: pytest.MonkeyPatch,
    receiver: OtlpReceiver,
    *,
    logs: bool = False,
    metric_reader: InMemoryMetricReader | None = None,
) -> TelemetryHandle:
    """An OTLP/gRPC setup exporting traces (and logs) to `receiver`; exports retry 2 s."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    config = NemoLensConfig(
        enabled=True,
        exporter="otlp",
        logs_enabled=logs,
        metrics_enabled=metric_reader is not None,
    )
    handle = setup_telemetry(config, metric_reader=metric_reader, _allow_reinit=True)
    if logs:
        setup_logging_bridge(LOGGER_NAME)
    return handle


def record_spans(handle: TelemetryHandle, big: str) -> None:
    """`RECORDS` spans, the tenth carrying `big` in attribute `payload`."""
    for index in range(RECORDS):
        with handle.tracer.start_as_current_span(f"span-{index}") as span:
            span.set_attribute("payload", big if index == 10 else "small")


def received_payloads(receiver: OtlpReceiver) -> dict[str, str]:
    """Span name -> its `payload` attribute, over every trace request received."""
    payloads: dict[str, str] = {}
    for request in receiver.received.trace_messages():
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    for item in span.attributes:
                        if item.key == "payload":
                            payloads[span.name] = item.value.string_value
    return payloads


def log_records(handle: TelemetryHandle, big: str) -> None:
    """`RECORDS` log records, the tenth with the message `big`."""
    logger = logging.getLogger(LOGGER_NAME)
    for index in range(RECORDS):
        logger.info("%s", big if index == 10 else f"record {index}")


def test_a_5_mib_span_attribute_is_cut_and_its_batch_of_100_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of 100 spans in one batch, one with a 5 MiB attribute, all 100 reach a 4 MiB receiver."""
    with OtlpReceiver("grpc", max_receive_bytes=GRPC_DEFAULT_MAX_RECEIVE_BYTES) as receiver:
        handle = grpc_setup(monkeypatch, receiver)
        record_spans(handle, "x" * FIVE_MIB)
        handle.shutdown(timeout_ms=10000)
        payloads = received_payloads(receiver)
    assert receiver.received.span_count() == RECORDS
    limit = _value_limits.DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT
    assert payloads["span-10"] == "x" * limit
    assert payloads["span-11"] == "small"


def test_a_5_mib_log_message_is_cut_and_its_batch_of_100_arrives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of 100 log records in one batch, one of 5 MiB, all 100 reach a 4 MiB receiver."""
    with OtlpReceiver("grpc", max_receive_bytes=GRPC_DEFAULT_MAX_RECEIVE_BYTES) as receiver:
        handle = grpc_setup(monkeypatch, receiver, logs=True)
        log_records(handle, "y" * FIVE_MIB)
        handle.shutdown(timeout_ms=10000)
        bodies = [log.body for log in receiver.received.logs()]
    assert len(bodies) == RECORDS
    limit = _value_limits.DEFAULT_LOG_BODY_LENGTH_LIMIT
    assert ("y" * limit) in bodies
    assert "record 11" in bodies
    assert max(len(body) for body in bodies) == limit


def test_otel_attribute_value_length_limit_is_respected_for_spans_and_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=100 cuts span attributes, log attributes and bodies."""
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100")
    with OtlpReceiver("grpc", max_receive_bytes=GRPC_DEFAULT_MAX_RECEIVE_BYTES) as receiver:
        handle = grpc_setup(monkeypatch, receiver, logs=True)
        record_spans(handle, "x" * 1000)
        logging.getLogger(LOGGER_NAME).info("z" * 1000, extra={"detail": "d" * 1000})
        handle.shutdown(timeout_ms=10000)
        payloads = received_payloads(receiver)
        bodies = [log.body for log in receiver.received.logs()]
        details = [
            item.value.string_value for item in _log_attributes(receiver) if item.key == "detail"
        ]
    assert payloads["span-10"] == "x" * 100
    assert bodies == ["z" * 100]
    assert details == ["d" * 100]


def _log_attributes(receiver: OtlpReceiver) -> list[Any]:
    return [
        item
        for request in receiver.received.log_messages()
        for resource_logs in request.resource_logs
        for scope_logs in resource_logs.scope_logs
        for record in scope_logs.log_records
        for item in record.attributes
    ]


def test_the_signal_specific_limit_variables_win_over_the_general_one() -> None:
    """The span and log-record variables win over OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT."""
    limits = _value_limits.value_limits(
        {
            "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "300",
            "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "200",
            "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT": "50",
        }
    )
    assert (limits.span_attribute, limits.attribute) == (200, 300)
    assert (limits.log_attribute, limits.log_body) == (50, 50)
    defaults = _value_limits.value_limits({})
    assert defaults.span_attribute == defaults.attribute == defaults.log_attribute == 1024
    assert defaults.log_body == _value_limits.DEFAULT_LOG_BODY_LENGTH_LIMIT
    unbounded = _value_limits.value_limits({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "unset"})
    assert unbounded.span_attribute is unbounded.log_body is None


@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
        "OTEL_ATTRIBUTE_COUNT_LIMIT",
    ],
)
def test_a_bad_limit_variable_fails_the_export_plan_naming_it(variable: str) -> None:
    """A limit that is not a non-negative integer fails building the plan, named with its value."""
    config = NemoLensConfig(enabled=True, exporter="otlp", logs_enabled=True)
    with pytest.raises(LensValueError, match=rf"{variable}: '-3'.*non-negative integer"):
        build_export_plan(config, environ={variable: "-3"})


def test_cut_values_are_counted_in_a_counter_and_one_shutdown_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each cut span attribute and log body adds 1 to nemo.lens.values.truncated and the warning."""
    reader = InMemoryMetricReader()
    with OtlpReceiver("grpc", max_receive_bytes=GRPC_DEFAULT_MAX_RECEIVE_BYTES) as receiver:
        handle = grpc_setup(monkeypatch, receiver, logs=True, metric_reader=reader)
        record_spans(handle, "x" * 5000)
        log_records(handle, "y" * 5000)
        handle.force_flush(timeout_ms=10000)
        data = reader.get_metrics_data()
        with caplog.at_level(logging.WARNING, logger="nemo.lens"):
            handle.shutdown(timeout_ms=10000)
    assert data is not None
    points = [
        getattr(point, "value", None)
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "nemo.lens.values.truncated"
        for point in metric.data.data_points
    ]
    assert points == [2]
    warnings = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("2 value(s) were truncated")


def test_a_default_batch_at_the_default_limits_encodes_under_grpcs_4_mib() -> None:
    """2048 spans and 512 log records, each at the default limits, encode under 4 MiB."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from nemo.lens._sdk import _value_limits as _sdk_value_limits
    from nemo.lens._sdk._logging import LimitingLogExporter, new_logging_handler

    limits = _value_limits.value_limits({})
    spans = InMemorySpanExporter()
    provider = TracerProvider(span_limits=_sdk_value_limits.build_span_limits(limits))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("lens.tests")
    for index in range(_otel_env.DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE):
        with tracer.start_as_current_span(f"train.step.{index}") as span:
            span.set_attribute("payload", "x" * 2 * DEFAULT_LENGTH)
            span.set_attribute("step", index)
    finished = spans.get_finished_spans()
    assert len(finished) == _otel_env.DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE
    assert len(str((finished[0].attributes or {})["payload"])) == DEFAULT_LENGTH
    assert encode_spans(finished).ByteSize() < GRPC_DEFAULT_MAX_RECEIVE_BYTES

    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call,unused-ignore]
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(
            LimitingLogExporter(exporter, limits, _sdk_value_limits.TruncationCount())
        )
    )
    logger = logging.getLogger(f"{LOGGER_NAME}.arithmetic")
    handler = new_logging_handler(logging.INFO, logger_provider)
    logger.addHandler(handler)
    try:
        for _ in range(_otel_env.DEFAULT_BLRP.max_export_batch_size):
            logger.warning("y" * 2 * DEFAULT_BODY, extra={"detail": "d" * 2 * DEFAULT_LENGTH})
    finally:
        logger.removeHandler(handler)
    records = exporter.get_finished_logs()
    assert len(records) == _otel_env.DEFAULT_BLRP.max_export_batch_size
    assert len(str(records[0].log_record.body)) == DEFAULT_BODY
    assert encode_logs(records).ByteSize() < GRPC_DEFAULT_MAX_RECEIVE_BYTES


def inmemory_setup() -> tuple[TelemetryHandle, Any]:
    """A lens setup (default limits) exporting spans to a real SDK in-memory exporter."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    config = NemoLensConfig(enabled=True, exporter="otlp", metrics_enabled=False)
    return setup_telemetry(config, span_exporter=exporter, _allow_reinit=True), exporter


def test_100_cut_span_attributes_log_at_most_one_sdk_record_and_count_100(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """100 spans cutting a 5000-char value: <= 1 opentelemetry.attributes record, 100 counted."""
    handle, _ = inmemory_setup()
    with caplog.at_level(logging.WARNING, logger="opentelemetry.attributes"):
        for index in range(RECORDS):
            with handle.tracer.start_as_current_span(f"step-{index}") as span:
                span.set_attribute("payload", "x" * 5000)
    sdk_records = [r for r in caplog.records if r.name == "opentelemetry.attributes"]
    handle.force_flush(timeout_ms=10000)
    pipeline = handle._pipeline
    assert pipeline is not None
    count = pipeline.truncations.count
    handle.shutdown(timeout_ms=10000)
    assert len(sdk_records) <= 1
    assert count == RECORDS


def _raise_deep(depth: int) -> None:
    """Raise a KeyError `depth` frames down, alternating with `_deeper` (no frame collapses)."""
    if depth == 0:
        raise KeyError("shard-7")
    _deeper(depth - 1)


def _deeper(depth: int) -> None:
    _raise_deep(depth)


def test_an_exception_30_frames_deep_exports_its_stacktrace_tail_within_the_limit() -> None:
    """managed_span's exception.stacktrace keeps the traceback's last line, within the limit."""
    from nemo.lens import managed_span, set_enabled_span_groups

    handle, exporter = inmemory_setup()
    set_enabled_span_groups(frozenset({"step"}))
    with pytest.raises(KeyError), managed_span("step", "deep"):
        _raise_deep(30)
    handle.shutdown(timeout_ms=10000)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "deep"]
    (event,) = [e for e in span.events if e.name == "exception"]
    stack = str((event.attributes or {})["exception.stacktrace"])
    assert len(stack) <= DEFAULT_LENGTH
    # The message itself is redacted at export (`KeyError: [REDACTED]`): match the line's head.
    assert stack.rstrip("\n").splitlines()[-1].startswith("KeyError: ")
    assert stack.startswith("...\n")
