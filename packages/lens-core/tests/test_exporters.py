"""Exporter selection: OTLP transport, the console format, the Prometheus endpoint."""

from __future__ import annotations

import logging
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from lens_children import free_port
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry as lens_setup
from nemo.lens._export_plan import SignalPlan, plan_signal
from nemo.lens._otel_env import (
    metric_export_interval_ms,
    otlp_protocol,
    otlp_transports,
    prometheus_address,
)
from nemo.lens._sdk._exporters import build_metric_reader, build_span_exporter
from nemo.lens.errors import LensValueError
from nemo.lens.testing import isolated_telemetry


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


def test_protocol_defaults_to_grpc_and_signal_variable_wins() -> None:
    """grpc by default; the per-signal variable beats the general one."""
    assert otlp_protocol("traces", {}) == "grpc"
    environ = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": " GRPC ",
    }
    assert otlp_protocol("traces", environ) == "http/protobuf"
    assert otlp_protocol("metrics", environ) == "grpc"


@pytest.mark.parametrize(
    ("protocol", "transports"),
    [
        ("grpc", ("grpc", "http")),
        ("http/protobuf", ("http", "grpc")),
        (" HTTP/JSON ", ("http", "grpc")),
    ],
)
def test_each_specified_protocol_picks_its_transport(
    protocol: str, transports: tuple[str, str]
) -> None:
    """grpc, http/protobuf and http/json (any case) are the accepted protocols."""
    assert otlp_transports("logs", {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol}) == transports


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"]
)
@pytest.mark.parametrize("bad", ["http", "HTTP/2", "grpcs", "http/proto"])
def test_an_unknown_protocol_names_the_variable_and_the_accepted_values(
    variable: str, bad: str
) -> None:
    """An unknown protocol no longer means gRPC: a LensValueError names variable and values."""
    with pytest.raises(LensValueError) as raised:
        otlp_transports("metrics", {variable: bad})

    message = str(raised.value)
    assert f"{variable}: {bad!r}" in message
    assert "'grpc', 'http/protobuf', 'http/json'" in message


def test_a_valid_signal_protocol_is_used_even_when_the_general_one_is_bad() -> None:
    """The per-signal variable decides its signal; the bad general one fails the others."""
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}

    assert otlp_protocol("traces", environ) == "grpc"
    with pytest.raises(LensValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL: 'http'"):
        otlp_protocol("metrics", environ)


def signal_plan(signal: str, exporter: str) -> SignalPlan:
    """The plan setup would build for `signal` with `exporter`, from os.environ."""
    plan = plan_signal(signal, exporter, NemoLensConfig(enabled=True, exporter=exporter))
    assert plan is not None
    return plan


def test_an_unknown_protocol_fails_the_plan_before_any_exporter_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan raises the protocol error instead of falling back to gRPC."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http")

    with pytest.raises(LensValueError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        signal_plan("traces", "otlp")


def test_otlp_builds_grpc_by_default_and_http_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OTLP span exporter's transport follows the protocol variables."""
    grpc_exporter = build_span_exporter(signal_plan("traces", "otlp"))
    assert type(grpc_exporter).__module__.startswith("opentelemetry.exporter.otlp.proto.grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    http_exporter = build_span_exporter(signal_plan("traces", "otlp"))
    assert type(http_exporter).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    for exporter in (grpc_exporter, http_exporter):
        assert exporter is not None
        exporter.shutdown()


def test_otlp_falls_back_to_the_other_transport_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """When the preferred transport is not installed, the plan picks the other, says so in
    a warning that setup logs, and that transport's exporter is built."""
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    caplog.set_level(logging.WARNING, logger="nemo.lens._sdk._exporters")
    warnings: list[str] = []
    plan = plan_signal(
        "traces", "otlp", NemoLensConfig(enabled=True, exporter="otlp"), warnings=warnings
    )
    assert plan is not None
    assert plan.otlp is not None
    assert (plan.otlp.transport, plan.otlp.endpoint) == ("http", "http://localhost:4318")
    (warning,) = warnings
    assert "asked for the grpc exporter, which is not installed; exporting over http" in warning
    exporter = build_span_exporter(plan)
    assert exporter is not None
    assert type(exporter).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
    exporter.shutdown()
    handle = lens_setup(NemoLensConfig(enabled=True, exporter="otlp", metrics_enabled=False))
    handle.shutdown(timeout_ms=1000)
    assert "exporting over http instead" in caplog.text


def test_otlp_without_any_transport_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """With neither transport importable, ImportError names lens-core[sdk]."""
    for transport in ("grpc", "http"):
        monkeypatch.setitem(
            sys.modules, f"opentelemetry.exporter.otlp.proto.{transport}.metric_exporter", None
        )
    with pytest.raises(ImportError, match=r"lens-core\[sdk\]"):
        build_metric_reader(signal_plan("metrics", "otlp"), [])


def test_prometheus_exports_no_spans() -> None:
    """With exporter="prometheus" traces leave only through an injected span_exporter."""
    plan = signal_plan("traces", "prometheus")
    assert (plan.prometheus_address, plan.destination()) == (
        None,
        "nowhere (Prometheus serves metrics only)",
    )
    assert build_span_exporter(plan) is None


def test_missing_prometheus_exporter_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without opentelemetry-exporter-prometheus, ImportError names lens-core[prometheus]."""
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.prometheus", None)
    with pytest.raises(ImportError, match=r"lens-core\[prometheus\]"):
        lens_setup(NemoLensConfig(enabled=True, exporter="prometheus"))


@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "soon"])
def test_metric_interval_must_be_a_positive_integer(raw: str) -> None:
    """OTEL_METRIC_EXPORT_INTERVAL accepts only positive integers."""
    with pytest.raises(ValueError, match="OTEL_METRIC_EXPORT_INTERVAL"):
        metric_export_interval_ms({"OTEL_METRIC_EXPORT_INTERVAL": raw})
    assert metric_export_interval_ms({}) == 10000
    assert metric_export_interval_ms({"OTEL_METRIC_EXPORT_INTERVAL": " 250 "}) == 250


def test_prometheus_address_defaults_to_loopback() -> None:
    """127.0.0.1:9464 unless OTEL_EXPORTER_PROMETHEUS_HOST/PORT say otherwise."""
    assert prometheus_address({}) == ("127.0.0.1", 9464)
    assert prometheus_address(
        {"OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9000"}
    ) == ("0.0.0.0", 9000)
    for bad in ("http", "70000", "-1"):
        with pytest.raises(ValueError, match="OTEL_EXPORTER_PROMETHEUS_PORT"):
            prometheus_address({"OTEL_EXPORTER_PROMETHEUS_PORT": bad})


def test_prometheus_endpoint_serves_and_is_released_at_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """exporter="prometheus" serves /metrics on the configured port until shutdown."""
    port = free_port()
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(port))
    handle = lens_setup(
        NemoLensConfig(enabled=True, exporter="prometheus"), span_exporter=InMemorySpanExporter()
    )
    register_metric_group("pull", [MetricSpec("requests", "pull.requests", "counter")])
    record_metrics(handle.meter, "pull", requests=3)
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    assert any(
        line.startswith("pull_requests") and line.rstrip().endswith(" 3.0")
        for line in body.splitlines()
    )
    handle.shutdown()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_prometheus_port_in_use_fails_setup_before_anything_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A taken port raises OSError naming the variables; no global provider is installed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(taken.getsockname()[1]))
        with pytest.raises(OSError, match="OTEL_EXPORTER_PROMETHEUS_PORT"):
            lens_setup(NemoLensConfig(enabled=True, exporter="prometheus"))
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
