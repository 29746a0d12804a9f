"""Redaction at the export boundary of every signal a lens pipeline builds (issue 23, item 5).

The key rule (`nemo.lens._redaction.is_secret_key`) applies to what leaves the process,
whatever wrote it: span attributes set straight on a lens tracer's span, event and link
attributes, log record attributes (a record's `extra`), metric point attributes (pushed
over OTLP and pulled by Prometheus), the resource (setup's argument and
`OTEL_RESOURCE_ATTRIBUTES`), and `key=value` pairs with a secret key in the exception
texts recorded on a span. Each test goes through setup's real pipeline and a real
exporter: in memory, lens's console (OTLP/JSON) file, a real OTLP receiver on 127.0.0.1
or lens's Prometheus endpoint.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_children import free_port
from lens_receivers import OtlpReceiver

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    managed_span,
    record_metrics,
    register_metric_group,
    set_enabled_span_groups,
    setup_telemetry,
)
from nemo.lens.logging_bridge import setup_logging_bridge
from nemo.lens.testing import isolated_telemetry

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

SECRET = "s3cr3t-value"
# `nemo.lens._redaction.REDACTED`, spelled out so the tests also run on older trees.
REDACTED = "[REDACTED]"
LOGGER_NAME = "lens.tests.redaction_channels"


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    with isolated_telemetry(clear_span_registry=True):
        yield
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = True


def setup_in_memory(**kwargs: Any) -> tuple[TelemetryHandle, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, metrics_enabled=False),
        span_exporter=exporter,
        _allow_reinit=True,
        **kwargs,
    )
    return handle, exporter


def exported_spans(handle: TelemetryHandle, exporter: InMemorySpanExporter) -> dict[str, Any]:
    handle.force_flush()
    return {span.name: span for span in exporter.get_finished_spans()}


# --- spans ------------------------------------------------------------------------------------


def test_set_attribute_on_a_lens_tracers_span_is_redacted_at_export() -> None:
    """span.set_attribute("password", ...) on handle.tracer's span leaves as [REDACTED]."""
    handle, exporter = setup_in_memory()
    with handle.tracer.start_as_current_span("direct") as span:
        span.set_attribute("password", SECRET)
        span.set_attribute("api_key", SECRET)
        span.set_attribute("num_tokens", 7)
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    assert dict(spans["direct"].attributes) == {
        "password": REDACTED,
        "api_key": REDACTED,
        "num_tokens": 7,
    }


def test_event_and_link_attributes_are_redacted_at_export() -> None:
    """A span event's and a link's secret attributes leave as [REDACTED]; others unchanged."""
    handle, exporter = setup_in_memory()
    with handle.tracer.start_as_current_span("first") as first:
        linked = first.get_span_context()
    link = trace.Link(linked, {"Authorization": f"Bearer {SECRET}", "peer": "rank1"})
    with handle.tracer.start_as_current_span("evented", links=[link]) as span:
        span.add_event("login", {"token": SECRET, "step": 3})
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    evented = spans["evented"]
    (event,) = evented.events
    assert dict(event.attributes) == {"token": REDACTED, "step": 3}
    (exported_link,) = evented.links
    assert dict(exported_link.attributes) == {"Authorization": REDACTED, "peer": "rank1"}
    assert exported_link.context == linked


def test_an_exception_message_recorded_by_lens_has_its_secret_pairs_redacted() -> None:
    """managed_span's recorded exception: secret key=value pairs are hidden everywhere."""
    handle, exporter = setup_in_memory()
    set_enabled_span_groups(frozenset({"step"}))
    message = f"login failed: password={SECRET} Authorization: Bearer {SECRET}x user=ada"
    with pytest.raises(ValueError), managed_span("step", "failing", tracer=handle.tracer):
        raise ValueError(message)
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    failing = spans["failing"]
    (event,) = failing.events
    texts = [
        failing.status.description,
        event.attributes["exception.message"],
        event.attributes["exception.stacktrace"],
    ]
    for text in texts:
        assert SECRET not in text
        assert f"password={REDACTED}" in text
        assert f"Authorization: {REDACTED}" in text
        assert "user=ada" in text


def test_spans_and_points_without_secrets_are_handed_on_unchanged() -> None:
    """Export-time redaction returns a span or a collection with nothing secret as itself."""
    from nemo.lens._sdk._redacting import redacted_metrics, redacted_span

    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True),
        span_exporter=exporter,
        metric_reader=reader,
        _allow_reinit=True,
    )
    with handle.tracer.start_as_current_span("plain") as span:
        span.set_attribute("step", 1)
        span.add_event("tick", {"loss": 0.5})
    handle.meter.create_counter("plain.calls").add(1, {"phase": "train"})
    (exported,) = exported_spans(handle, exporter).values()
    data = reader.get_metrics_data()
    handle.shutdown()
    assert redacted_span(exported) is exported
    assert data is not None
    assert redacted_metrics(data) is data


def test_remembered_plain_point_keys_never_let_a_secret_or_an_exception_text_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Metric redaction remembers the point keys that hide nothing (one set comparison per
    point); a point with a secret key or an exception text is still redacted after many
    plain collections, and once the memory is full, new keys are still tested."""
    from opentelemetry.sdk.metrics import MeterProvider

    from nemo.lens._sdk import _redacting

    monkeypatch.setattr(_redacting, "_plain_point_keys", set())
    monkeypatch.setattr(_redacting, "_PLAIN_POINT_KEYS_MAX", 3)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    counter = provider.get_meter("plain-keys").create_counter("plain.keys")

    def collect_redacted(attributes: dict[str, Any]) -> dict[str, Any]:
        counter.add(1, attributes)
        data = reader.get_metrics_data()
        assert data is not None
        redacted = _redacting.redacted_metrics(data)
        [point] = [
            point
            for resource in redacted.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
            if point.attributes and set(point.attributes) == set(attributes)
        ]
        return dict(point.attributes or {})

    plain = {"phase": "train", "rank": 0}
    for _ in range(3):
        assert collect_redacted(plain) == plain
    assert _redacting._plain_point_keys == {"phase", "rank"}
    assert collect_redacted({"phase": "eval", "api_key": SECRET}) == {
        "phase": "eval",
        "api_key": REDACTED,
    }
    hidden = collect_redacted({"rank": 1, "exception.message": f"password={SECRET}"})
    assert hidden == {"rank": 1, "exception.message": f"password={REDACTED}"}
    # Full after one more plain key: later keys are tested each time, never remembered.
    assert collect_redacted({"stage": "a"}) == {"stage": "a"}
    assert collect_redacted({"shard": "b"}) == {"shard": "b"}
    assert _redacting._plain_point_keys == {"phase", "rank", "stage"}
    assert collect_redacted({"shard": "c", "password": SECRET}) == {
        "shard": "c",
        "password": REDACTED,
    }
    provider.shutdown()


def test_a_span_subclass_with_computed_attributes_is_redacted() -> None:
    """A span object whose class computes its attributes (not the SDK's own ReadableSpan)
    is redacted by what its properties return, not by the containers it holds."""
    from opentelemetry.sdk.trace import ReadableSpan

    from nemo.lens._sdk._redacting import redacted_span

    class Computed(ReadableSpan):
        @property
        def attributes(self) -> dict[str, str]:
            return {"api_key": SECRET, "step": "3"}

    hidden = redacted_span(Computed(name="computed"))
    assert dict(hidden.attributes or {}) == {"api_key": REDACTED, "step": "3"}


def test_a_redacted_span_keeps_its_dropped_counts() -> None:
    """Redacting a span's copy keeps the attribute count the SDK's limit dropped."""
    handle, exporter = setup_in_memory()
    with handle.tracer.start_as_current_span("crowded") as span:
        for index in range(130):  # the SDK keeps 128 by default: 3 of 131 are dropped
            span.set_attribute(f"a{index}", index)
        span.set_attribute("secret", SECRET)
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    crowded = spans["crowded"]
    assert crowded.attributes["secret"] == REDACTED
    assert crowded.dropped_attributes == 3


# --- resources --------------------------------------------------------------------------------


def test_resource_attributes_from_setup_and_the_environment_are_redacted(
    clean_environ: pytest.MonkeyPatch,
) -> None:
    """Secret resource keys from resource_attributes and OTEL_RESOURCE_ATTRIBUTES leave hidden."""
    clean_environ.setenv("OTEL_RESOURCE_ATTRIBUTES", f"db.password={SECRET},deployment.region=eu")
    handle, exporter = setup_in_memory(resource_attributes={"hf_token": SECRET, "team": "rl"})
    with handle.tracer.start_as_current_span("s"):
        pass
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    resource = dict(spans["s"].resource.attributes)
    assert resource["db.password"] == REDACTED
    assert resource["hf_token"] == REDACTED
    assert resource["deployment.region"] == "eu"
    assert resource["team"] == "rl"
    assert resource["service.name"] == "nemo"


# --- logs -------------------------------------------------------------------------------------


def test_a_log_records_extra_is_redacted_at_export(tmp_path: Path) -> None:
    """logger.info(..., extra={"api_key": ...}) reaches lens's log exporter as [REDACTED]."""
    out = tmp_path / "telemetry.jsonl"
    handle = setup_telemetry(
        NemoLensConfig(
            enabled=True,
            exporter="console",
            console_path=str(out),
            logs_enabled=True,
            metrics_enabled=False,
        ),
        _allow_reinit=True,
    )
    setup_logging_bridge(LOGGER_NAME)
    logger = logging.getLogger(LOGGER_NAME)
    logger.info("calling the API", extra={"api_key": SECRET, "endpoint": "/v1"})
    try:
        raise RuntimeError(f"refused: token={SECRET}")
    except RuntimeError:
        logger.exception("the call failed")
    handle.shutdown(timeout_ms=10000)
    text = out.read_text()
    assert SECRET not in text
    records = [
        record
        for line in text.splitlines()
        for resource_logs in json.loads(line).get("resourceLogs", [])
        for scope_logs in resource_logs["scopeLogs"]
        for record in scope_logs["logRecords"]
    ]
    by_body = {record["body"]["stringValue"]: record for record in records}
    attributes = {
        item["key"]: item["value"].get("stringValue")
        for item in by_body["calling the API"]["attributes"]
    }
    assert attributes["api_key"] == REDACTED
    assert attributes["endpoint"] == "/v1"
    failed = {
        item["key"]: item["value"].get("stringValue")
        for item in by_body["the call failed"]["attributes"]
    }
    assert failed["exception.message"] == f"refused: token={REDACTED}"


# --- metrics ----------------------------------------------------------------------------------

SPECS = [
    MetricSpec("calls", "redact.calls", "counter"),
    MetricSpec("load", "redact.load", "gauge"),
    MetricSpec("latency", "redact.latency", "histogram", unit="s"),
    # A metric of its own: the Prometheus exporter of OTel 1.23 mislabels points of one
    # metric whose attribute keys differ.
    MetricSpec("sizes", "redact.sizes", "counter"),
]


def record_secret_series(handle: TelemetryHandle) -> None:
    register_metric_group("redact", SPECS)
    for secret in (SECRET, SECRET + "-other"):  # two series that become one
        record_metrics(
            handle.meter,
            "redact",
            calls=2,
            load=0.5,
            latency=0.25,
            attributes={"token": secret, "phase": "train"},
        )
    record_metrics(handle.meter, "redact", sizes=1, attributes={"token_count": 9})


def test_metric_attributes_are_redacted_for_an_injected_reader() -> None:
    """Points collected by any reader carry [REDACTED]; colliding series are merged into one."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, traces_enabled=False),
        metric_reader=reader,
        _allow_reinit=True,
    )
    record_secret_series(handle)
    data = reader.get_metrics_data()
    handle.shutdown()
    assert data is not None
    points: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    points.setdefault(metric.name, []).append((dict(point.attributes or {}), point))
    hidden = {"token": REDACTED, "phase": "train"}
    [(calls_attrs, calls)] = points["redact.calls"]
    assert calls_attrs == hidden
    assert calls.value == 4
    [(sizes_attrs, sizes)] = points["redact.sizes"]
    assert sizes_attrs == {"token_count": 9}
    assert sizes.value == 1
    [(load_attrs, load)] = points["redact.load"]
    assert load_attrs == hidden
    assert load.value == 0.5
    [(latency_attrs, latency)] = points["redact.latency"]
    assert latency_attrs == hidden
    assert latency.count == 2
    assert latency.sum == 0.5


def test_metric_attributes_are_redacted_over_otlp(clean_environ: pytest.MonkeyPatch) -> None:
    """Metric points pushed to a real OTLP receiver carry [REDACTED], never the secret."""
    with OtlpReceiver("http") as receiver:
        clean_environ.setenv(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.signal_endpoint("metrics")
        )
        clean_environ.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False), _allow_reinit=True
        )
        record_secret_series(handle)
        handle.shutdown(timeout_ms=10000)
        messages = receiver.received.metric_messages()
    assert messages
    assert SECRET not in "".join(str(message) for message in messages)
    tokens = {
        attribute.value.string_value
        for message in messages
        for resource_metrics in message.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "redact.calls"
        for point in metric.sum.data_points
        for attribute in point.attributes
        if attribute.key == "token"
    }
    assert tokens == {REDACTED}
    assert receiver.received.values("redact.calls") == [4]


def test_metric_attributes_are_redacted_in_the_prometheus_text(
    clean_environ: pytest.MonkeyPatch,
) -> None:
    """A scrape of lens's Prometheus endpoint shows token="[REDACTED]", one series, summed."""
    port = free_port()
    clean_environ.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="prometheus"), _allow_reinit=True
    )
    try:
        record_secret_series(handle)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        handle.shutdown()
    assert SECRET not in text
    calls = [line for line in text.splitlines() if line.startswith("redact_calls_total{")]
    secret_line = [line for line in calls if 'token="[REDACTED]"' in line]
    assert len(secret_line) == 1
    assert secret_line[0].endswith(" 4.0")


# --- the text rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token=abc", f"token={REDACTED}"),
        ("password = hunter2, user=ada", f"password = {REDACTED}, user=ada"),
        ("Authorization: Bearer abc.def", f"Authorization: {REDACTED}"),
        ("{'api_key': 'sk-1', 'step': 3}", f"{{'api_key': {REDACTED}, 'step': 3}}"),
        ('{"client_secret": "x y"}', f'{{"client_secret": {REDACTED}}}'),
        ("GET /v1?token=abc&page=2", f"GET /v1?token={REDACTED}&page=2"),
        ("AWS_SECRET_ACCESS_KEY=AKIA/xyz", f"AWS_SECRET_ACCESS_KEY={REDACTED}"),
        ("token_count=5 num_tokens: 7", "token_count=5 num_tokens: 7"),
        ("No such file: /tmp/x", "No such file: /tmp/x"),
        ("step=3 loss: 0.5", "step=3 loss: 0.5"),
        ("ValueError: token=abc", f"ValueError: token={REDACTED}"),
    ],
)
def test_the_text_rule_hides_values_of_secret_pairs(text: str, expected: str) -> None:
    """redact_text hides the value of each key=value / key: value pair whose key is secret."""
    from nemo.lens._redaction import redact_text

    assert redact_text(text) == expected


@given(st.text(max_size=60))
def test_the_text_rule_never_raises(text: str) -> None:
    """redact_text answers a str for any text, and leaves text without a pair alone."""
    from nemo.lens._redaction import redact_text

    hidden = redact_text(text)
    assert isinstance(hidden, str)
    if "=" not in text and ":" not in text:
        assert hidden == text


# --- nested log attributes (review of item 5, defect 1) -----------------------------------------


def console_log_records(path: Path) -> dict[str, dict[str, Any]]:
    """The records of lens's console log file by body, each attribute as its OTLP/JSON value."""
    records = [
        record
        for line in path.read_text().splitlines()
        for resource_logs in json.loads(line).get("resourceLogs", [])
        for scope_logs in resource_logs["scopeLogs"]
        for record in scope_logs["logRecords"]
    ]
    return {
        record["body"]["stringValue"]: {
            item["key"]: item["value"] for item in record.get("attributes", [])
        }
        for record in records
    }


def plain(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as the Python value it encodes."""
    if "kvlistValue" in value:
        return {
            item["key"]: plain(item["value"]) for item in value["kvlistValue"].get("values", [])
        }
    if "arrayValue" in value:
        return [plain(item) for item in value["arrayValue"].get("values", [])]
    (kind,) = value
    return int(value[kind]) if kind == "intValue" else value[kind]


def test_secrets_nested_in_a_log_records_extra_are_redacted_at_export(tmp_path: Path) -> None:
    """A secret key inside a mapping or list in `extra` leaves as [REDACTED]; the rest as given."""
    out = tmp_path / "telemetry.jsonl"
    handle = setup_telemetry(
        NemoLensConfig(
            enabled=True,
            exporter="console",
            console_path=str(out),
            logs_enabled=True,
            metrics_enabled=False,
        ),
        _allow_reinit=True,
    )
    setup_logging_bridge(LOGGER_NAME)
    logger = logging.getLogger(LOGGER_NAME)
    config = {"api_key": SECRET, "lr": "0.1", "db": {"password": SECRET, "host": "h"}}
    logger.info("cfg", extra={"cfg": config, "peers": [{"token": SECRET, "rank": 1}]})
    handle.shutdown(timeout_ms=10000)
    assert SECRET not in out.read_text()
    attributes = console_log_records(out)["cfg"]
    if "cfg" not in attributes:
        # Releases before extended log attributes (1.23) drop a mapping value whole, with
        # the SDK's warning: nothing of it leaves, which the assertion above checks.
        assert "peers" not in attributes
        return
    assert plain(attributes["cfg"]) == {
        "api_key": REDACTED,
        "lr": "0.1",
        "db": {"password": REDACTED, "host": "h"},
    }
    assert plain(attributes["peers"]) == [{"token": REDACTED, "rank": 1}]


def test_nested_redaction_hides_what_lies_past_its_depth_cap() -> None:
    """A container nested deeper than the cap is hidden whole; shallower values are kept."""
    from nemo.lens._redaction import MAX_DEPTH, redacted_mapping

    deep: Any = {"password": SECRET}
    for _ in range(MAX_DEPTH + 2):
        deep = {"level": deep}
    hidden = redacted_mapping({"deep": deep, "step": 3}, nested=True)
    assert hidden is not None
    assert SECRET not in repr(hidden)
    assert hidden["step"] == 3
    assert redacted_mapping({"cfg": {"lr": 0.1}, "ids": [1, 2]}, nested=True) is None


# --- texts that are not pairs (review of item 5, defect 2) --------------------------------------


class _Tokenizer:
    def decode(self, ids: object) -> str:
        raise KeyError("input_ids")


def _decode(ids: object) -> str:
    tokenizer = _Tokenizer()
    text = tokenizer.decode(ids)
    return text.strip()


def _check_prompt(count: int) -> None:
    assert count == 3, f"prompt: expected 3, got {count}"


def _traceback_of(function: Any, *args: Any) -> str:
    import traceback

    try:
        function(*args)
    except Exception as exc:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    raise AssertionError("the function did not raise")


UNCHANGED_TEXTS = [
    "KeyError: 'input_ids'",
    "'input_ids'",
    "AssertionError: prompt: expected 3",
    "builtins.KeyError: 'token'",
    "TokenError: bad header",
    "SystemExit: 2",
    "KeyboardInterrupt: key pressed",
    "RuntimeWarning: text: truncated",
    "text: too long for the model",
    "input_text=hello",
    'File "/w/train.py", line 12, in step\n    text = tokenizer.decode(ids)\n',
    'File "/w/train.py", line 3, in f\n    key = cfg["token"]\n    ^^^^^^^^^^^^^^^^^^\n',
    "step=3 loss: 0.5",
]


@pytest.mark.parametrize("text", UNCHANGED_TEXTS)
def test_the_text_rule_leaves_class_names_source_lines_and_prose_alone(text: str) -> None:
    """Exception class names, traceback source lines and content labels are not pairs."""
    from nemo.lens._redaction import redact_text

    assert redact_text(text) == text


@pytest.mark.parametrize(
    "function", [_decode, _check_prompt], ids=["KeyError-in-decode", "AssertionError"]
)
def test_real_tracebacks_of_ordinary_errors_pass_the_text_rule_unchanged(function: Any) -> None:
    """A real KeyError/AssertionError traceback (source lines with `text =`) stays as it was."""
    from nemo.lens._redaction import redact_text

    text = _traceback_of(function, 1)
    assert "text = tokenizer.decode(ids)" in text or "prompt: expected 3" in text
    assert redact_text(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=s3cret", f"password={REDACTED}"),
        ("Authorization: Bearer abc", f"Authorization: {REDACTED}"),
        ("api_key='x'", f"api_key={REDACTED}"),
        ("secret=a,b", f"secret={REDACTED}"),
        ("secret=a,b next", f"secret={REDACTED} next"),
        ("secret=a,b,user=ada", f"secret={REDACTED},user=ada"),
        (
            "{token: abc}, 'x,Authorization=Bearer y'",
            f"{{token: {REDACTED}}}, 'x,Authorization={REDACTED}'",
        ),
        ("KeyError: password=a,b", f"KeyError: password={REDACTED}"),
        ("refused: token=a;b(c)", f"refused: token={REDACTED}"),
        ("ValueError: bad\n    password=hunter2", f"ValueError: bad\n    password={REDACTED}"),
    ],
)
def test_the_text_rule_hides_a_secret_value_up_to_the_next_whitespace(
    text: str, expected: str
) -> None:
    """A secret pair's value runs to the next whitespace, outside traceback source lines too."""
    from nemo.lens._redaction import redact_text

    assert redact_text(text) == expected


def test_a_recorded_keyerror_traceback_is_exported_unchanged() -> None:
    """managed_span's KeyError from `text = tokenizer.decode(ids)` keeps its message and line."""
    handle, exporter = setup_in_memory()
    set_enabled_span_groups(frozenset({"step"}))
    with pytest.raises(KeyError), managed_span("step", "decoding", tracer=handle.tracer):
        _decode([1, 2])
    spans = exported_spans(handle, exporter)
    handle.shutdown()
    decoding = spans["decoding"]
    (event,) = decoding.events
    assert event.attributes["exception.message"] == "'input_ids'"
    stacktrace = event.attributes["exception.stacktrace"]
    assert "    text = tokenizer.decode(ids)\n" in stacktrace
    assert "KeyError: 'input_ids'" in stacktrace
    assert REDACTED not in stacktrace
    assert REDACTED not in (decoding.status.description or "")
