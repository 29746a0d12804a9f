"""The console exporters write OTLP/JSON: one export request per line, parseable back."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from lens_children import run_python
from lens_fork import in_child
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens._sdk import _console
from nemo.lens._sdk._console import (
    JsonLinesFile,
    console_log_exporter,
    console_metric_exporter,
    console_metric_reader,
    console_output,
    console_span_exporter,
)
from nemo.lens._sdk._logging import new_logging_handler
from nemo.lens.testing import isolated_telemetry

RESOURCE = Resource.create({"service.name": "console-test"})
ENCODER_MODULES = (
    "opentelemetry.exporter.otlp.proto.common._log_encoder",
    "opentelemetry.exporter.otlp.proto.common.metrics_encoder",
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
)


def lines_of(path: Path) -> list[str]:
    """The file's lines; fails unless it ends with a whole line."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text.splitlines()


def ids_as_base64(node: Any) -> Any:
    """A copy of an OTLP/JSON document with its hex ids in protobuf JSON's base64."""
    if isinstance(node, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in _console.ID_FIELDS
            else ids_as_base64(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [ids_as_base64(item) for item in node]
    return node


def parse(line: str, message: Any) -> Any:
    """Parse one OTLP/JSON line into `message` with protobuf's own JSON parser."""
    json_format.ParseDict(ids_as_base64(json.loads(line)), message)
    return message


def attributes(key_values: Any) -> dict[str, Any]:
    """A protobuf KeyValue list as {key: python value}."""
    found: dict[str, Any] = {}
    for key_value in key_values:
        kind = key_value.value.WhichOneof("value")
        found[key_value.key] = getattr(key_value.value, kind)
    return found


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[JsonLinesFile]:
    """A fresh JSON-lines file, closed after the test."""
    out = JsonLinesFile(tmp_path / "console.jsonl")
    yield out
    out.close()


def export_spans(out: Any) -> tuple[Any, Any]:
    """Export a parent and an error child span through the console exporter; return both."""
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(console_span_exporter(out)))
    tracer = provider.get_tracer("lens.test", "1.2.3")
    with (
        tracer.start_as_current_span("step", attributes={"dl.iteration": 7}) as parent,
        tracer.start_as_current_span("generate", kind=SpanKind.CLIENT) as child,
    ):
        child.set_attribute("rl.backend", "vllm")
        child.set_attribute("ratio", 0.5)
        child.add_event("sampled", {"count": 3})
        child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    return parent, child


def test_each_span_batch_is_one_trace_request_line_that_parses_back(
    sink: JsonLinesFile,
) -> None:
    """A span batch is one ExportTraceServiceRequest line; names, ids, attributes survive."""
    parent, child = export_spans(sink)
    lines = lines_of(sink.path)
    assert len(lines) == 2  # the simple processor exports each span as its own batch
    requests = [parse(line, ExportTraceServiceRequest()) for line in lines]
    found = {
        span.name: (span, scope_spans.scope, resource_spans.resource)
        for request in requests
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    }
    step, scope, resource = found["step"]
    generate, _, _ = found["generate"]
    assert (scope.name, scope.version) == ("lens.test", "1.2.3")
    assert attributes(resource.attributes)["service.name"] == "console-test"
    assert attributes(step.attributes) == {"dl.iteration": 7}
    assert step.trace_id == parent.get_span_context().trace_id.to_bytes(16, "big")
    assert step.span_id == parent.get_span_context().span_id.to_bytes(8, "big")
    assert generate.parent_span_id == step.span_id
    assert generate.span_id == child.get_span_context().span_id.to_bytes(8, "big")
    assert attributes(generate.attributes) == {"rl.backend": "vllm", "ratio": 0.5}
    assert [event.name for event in generate.events] == ["sampled"]
    assert (generate.status.code, generate.status.message) == (2, "boom")
    assert generate.kind == 3  # SPAN_KIND_CLIENT


def test_span_lines_use_the_otlp_json_spelling(sink: JsonLinesFile) -> None:
    """Compact lines, lowerCamelCase, hex ids, int64 as decimal strings, enums as numbers."""
    parent, child = export_spans(sink)
    lines = lines_of(sink.path)
    assert all(", " not in line and '": ' not in line for line in lines)
    documents = [json.loads(line) for line in lines]
    spans = {
        span["name"]: span
        for document in documents
        for resource_spans in document["resourceSpans"]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    }
    step, generate = spans["step"], spans["generate"]
    assert step["traceId"] == f"{parent.get_span_context().trace_id:032x}"
    assert step["spanId"] == f"{parent.get_span_context().span_id:016x}"
    assert generate["spanId"] == f"{child.get_span_context().span_id:016x}"
    assert generate["parentSpanId"] == step["spanId"]
    assert step["attributes"] == [{"key": "dl.iteration", "value": {"intValue": "7"}}]
    assert isinstance(step["startTimeUnixNano"], str)
    assert int(step["endTimeUnixNano"]) >= int(step["startTimeUnixNano"])
    assert (generate["kind"], generate["status"]["code"]) == (3, 2)


def test_a_metric_collection_is_one_metrics_request_line_that_parses_back(
    sink: JsonLinesFile,
) -> None:
    """One collection is one ExportMetricsServiceRequest line; each series' values survive."""
    reader = console_metric_reader(sink)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    meter = provider.get_meter("trainer")
    meter.create_counter("trainer.tokens", unit="{token}").add(5, {"rank": 0})
    histogram = meter.create_histogram("trainer.duration", unit="ms")
    for value in (3.0, 30.0, 300.0):
        histogram.record(value)
    meter.create_up_down_counter("trainer.buffer").add(-2)
    provider.shutdown()
    lines = lines_of(sink.path)
    assert len(lines) == 1
    (resource_metrics,) = parse(lines[0], ExportMetricsServiceRequest()).resource_metrics
    assert attributes(resource_metrics.resource.attributes)["service.name"] == "console-test"
    (scope_metrics,) = resource_metrics.scope_metrics
    assert scope_metrics.scope.name == "trainer"
    metrics = {metric.name: metric for metric in scope_metrics.metrics}
    (tokens,) = metrics["trainer.tokens"].sum.data_points
    assert (tokens.as_int, attributes(tokens.attributes)) == (5, {"rank": 0})
    assert metrics["trainer.tokens"].unit == "{token}"
    assert metrics["trainer.tokens"].sum.is_monotonic
    (duration,) = metrics["trainer.duration"].histogram.data_points
    assert (duration.count, duration.sum) == (3, 333.0)
    assert sum(duration.bucket_counts) == 3
    (buffer,) = metrics["trainer.buffer"].sum.data_points
    assert buffer.as_int == -2
    document = json.loads(lines[0])
    sums = document["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]
    assert sums["aggregationTemporality"] == 2  # cumulative, as a number
    assert sums["dataPoints"][0]["asInt"] == "5"


def test_an_export_without_points_writes_no_line(sink: JsonLinesFile) -> None:
    """Metrics data with no resource (nothing to report) succeeds and writes no empty line."""
    exporter = console_metric_exporter(sink)
    assert exporter.export(MetricsData(resource_metrics=[])) == MetricExportResult.SUCCESS
    assert sink.path.read_text(encoding="utf-8") == ""


def test_log_records_are_one_logs_request_line_that_parses_back(sink: JsonLinesFile) -> None:
    """A log batch is one ExportLogsServiceRequest line; body, severity and ids survive."""
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(console_log_exporter(sink)))
    logger = logging.getLogger("tests.console_otlp_json")
    handler = new_logging_handler(logging.INFO, provider)
    logger.addHandler(handler)
    logger.propagate = False
    tracer_provider = TracerProvider(resource=RESOURCE)
    try:
        with tracer_provider.get_tracer("t").start_as_current_span("step") as span:
            logger.error("step %d failed", 4)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        provider.shutdown()
        tracer_provider.shutdown()
    lines = lines_of(sink.path)
    assert len(lines) == 1
    (resource_logs,) = parse(lines[0], ExportLogsServiceRequest()).resource_logs
    (scope_logs,) = resource_logs.scope_logs
    (record,) = scope_logs.log_records
    assert record.body.string_value == "step 4 failed"
    assert (record.severity_text, record.severity_number) == ("ERROR", 17)
    assert record.trace_id == span.get_span_context().trace_id.to_bytes(16, "big")
    document = json.loads(lines[0])
    written = document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert written["traceId"] == f"{span.get_span_context().trace_id:032x}"
    assert written["spanId"] == f"{span.get_span_context().span_id:016x}"
    assert written["severityNumber"] == 17


def test_a_failing_stream_fails_the_export_without_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stream that cannot be written makes export return FAILURE and log once, not raise."""
    closed = io.StringIO()
    closed.close()
    exporter = console_span_exporter(closed)
    provider = TracerProvider(resource=RESOURCE)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("lost") as first:
        pass
    with tracer.start_as_current_span("lost too") as second:
        pass
    with caplog.at_level(logging.WARNING, logger="nemo.lens._sdk._console"):
        results = [exporter.export([span]) for span in (first, second)]  # type: ignore[list-item]
    provider.shutdown()
    assert results == [SpanExportResult.FAILURE] * 2
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert "cannot write spans as OTLP/JSON (ValueError" in warnings[0]


@pytest.mark.parametrize(
    "factory", [console_span_exporter, console_log_exporter, console_metric_reader]
)
def test_without_the_otlp_encoder_the_console_factories_name_the_extra(
    monkeypatch: pytest.MonkeyPatch, factory: Any
) -> None:
    """Without opentelemetry-exporter-otlp-proto-common each factory's ImportError names
    lens-core[sdk]."""
    for module in ENCODER_MODULES:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=r"pip install 'lens-core\[sdk\]'") as raised:
        factory(io.StringIO())
    assert "opentelemetry-exporter-otlp-proto-common" in str(raised.value)


def test_setup_with_the_console_exporter_fails_naming_the_extra_without_the_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """setup_telemetry(exporter="console") without the OTLP encoder raises an ImportError
    naming lens-core[sdk], instead of exporting in another format."""
    for module in ENCODER_MODULES:
        monkeypatch.setitem(sys.modules, module, None)
    with isolated_telemetry(), pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        setup_telemetry(NemoLensConfig(enabled=True, exporter="console"))


def test_console_output_without_a_path_follows_the_current_stdout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """console_output(None) and ("") write to whatever sys.stdout is at write time."""
    outputs = [console_output(None), console_output("")]
    replaced = io.StringIO()
    monkeypatch.setattr(sys, "stdout", replaced)
    for number, output in enumerate(outputs):
        output.write(f"line {number}\n")
    assert replaced.getvalue() == "line 0\nline 1\n"


def test_the_stdout_view_is_finalised_quietly_when_sys_is_torn_down() -> None:
    """At interpreter exit IOBase's finaliser closes the view after the module's `sys` may
    be gone; in development mode (and on the soak runs' Python 3.13) a flush there printed
    "Exception ignored ... AttributeError". Closing the view touches nothing."""
    result = run_python(
        "-X", "dev", "-c",
        "import sys\n"
        "from nemo.lens._sdk import _console\n"
        "view = _console.console_output(None)\n"
        "view.close()\n"
        "assert not sys.stdout.closed\n"
        "view = _console.console_output(None)\n"
        "_console.sys = None  # as module teardown leaves it\n"
        "del view\n"
        "print('finalised')\n",
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "finalised\n", "")


def test_console_output_shares_one_appending_file_per_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same path (relative or absolute) gives one object that appends to what is there."""
    target = tmp_path / "run.jsonl"
    target.write_text("kept\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    first = console_output("run.jsonl")
    try:
        assert console_output(str(target)) is first
        assert isinstance(first, JsonLinesFile)
        first.write("added\n")
        assert target.read_text(encoding="utf-8") == "kept\nadded\n"
        created = console_output(str(tmp_path / "new.jsonl"))
        assert created is not first
        assert (tmp_path / "new.jsonl").exists()
    finally:
        first.close()
    assert console_output(str(target)) is not first  # a closed file is reopened


def test_two_exporters_on_one_console_path_interleave_whole_lines(tmp_path: Path) -> None:
    """Spans and logs exported from several threads into one console_output file: every
    line is one whole request."""
    path = tmp_path / "shared.jsonl"
    output = console_output(str(path))
    tracer_provider = TracerProvider(resource=RESOURCE)
    tracer_provider.add_span_processor(SimpleSpanProcessor(console_span_exporter(output)))
    logger_provider = LoggerProvider(resource=RESOURCE)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(console_log_exporter(console_output(str(path))))
    )
    logger = logging.getLogger("tests.console_otlp_json.shared")
    handler = new_logging_handler(logging.INFO, logger_provider)
    logger.addHandler(handler)
    logger.propagate = False
    # Long attribute values make each line larger than a pipe or stdio buffer.
    padding = "x" * 20_000

    def emit(worker: int) -> None:
        tracer = tracer_provider.get_tracer("t")
        for index in range(25):
            with tracer.start_as_current_span(f"span-{worker}-{index}", attributes={"p": padding}):
                logger.warning("log-%d-%d %s", worker, index, padding)

    threads = [threading.Thread(target=emit, args=(worker,)) for worker in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        tracer_provider.shutdown()
        logger_provider.shutdown()
        assert isinstance(output, JsonLinesFile)
        output.close()
    lines = lines_of(path)
    assert len(lines) == 200
    span_names, log_bodies = set(), set()
    for line in lines:
        document = json.loads(line)
        if "resourceSpans" in document:
            request = parse(line, ExportTraceServiceRequest())
            span_names.add(request.resource_spans[0].scope_spans[0].spans[0].name)
        else:
            request = parse(line, ExportLogsServiceRequest())
            body = request.resource_logs[0].scope_logs[0].log_records[0].body.string_value
            log_bodies.add(body.split()[0])
    expected = {(worker, index) for worker in range(4) for index in range(25)}
    assert span_names == {f"span-{worker}-{index}" for worker, index in expected}
    assert log_bodies == {f"log-{worker}-{index}" for worker, index in expected}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")
def test_a_forked_child_gets_its_own_console_file_and_lock(tmp_path: Path) -> None:
    """In a forked child the same path gives a fresh file object, so a lock a parent's
    exporter thread held at fork() cannot block the child's own writes."""
    path = tmp_path / "forked.jsonl"
    parent = console_output(str(path))
    assert isinstance(parent, JsonLinesFile)
    parent.write("parent\n")

    def write_in_child() -> bool:
        child = console_output(str(path))
        child.write("child\n")
        return child is not parent

    try:
        with parent._lock:  # as if an exporter thread were mid-write at fork()
            assert in_child(write_in_child, timeout_s=20.0) is True
        parent.write("parent again\n")
    finally:
        parent.close()
    assert lines_of(path) == ["parent", "child", "parent again"]


def test_non_ascii_text_survives_a_stdout_that_is_not_utf8() -> None:
    """A span named in any script is written as JSON escapes, so a stdout encoded as ASCII
    (PYTHONIOENCODING=ascii, some consoles) still gets the whole batch."""
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii", errors="strict", write_through=True)
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(console_span_exporter(ascii_out)))
    with provider.get_tracer("lens.test").start_as_current_span("étape-步"):
        pass
    provider.shutdown()

    (line,) = raw.getvalue().decode("ascii").splitlines()
    request = parse(line, ExportTraceServiceRequest())
    assert request.resource_spans[0].scope_spans[0].spans[0].name == "étape-步"
