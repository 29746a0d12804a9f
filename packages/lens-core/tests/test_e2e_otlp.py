"""End to end over OTLP: real receivers on 127.0.0.1 decode what lens exports.

The receivers are `lens_receivers.OtlpReceiver`: `http.server` in a thread for OTLP/HTTP,
a `grpcio` server with the collector services from `opentelemetry-proto` for gRPC. Each
decodes the protobuf payloads and the tests compare every value and resource attribute
that arrives.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from lens_env import clear_settings
from lens_receivers import OtlpReceiver, Received
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry
from nemo.lens.version import __version__

pytestmark = pytest.mark.e2e

SPECS = [
    MetricSpec("steps", "e2e.steps", "counter"),
    MetricSpec("loss", "e2e.loss", "gauge"),
    MetricSpec("inflight", "e2e.inflight", "up_down_counter"),
    MetricSpec("latency", "e2e.latency", "histogram", unit="s"),
]
CALLER_RESOURCE: dict[str, Any] = {
    "nv.dl.rank": 1,
    "nv.dl.world_size": 2,
    "tags": ["a", "b"],
    "cluster": "c9",
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The resource's deployment.environment comes from these two as well.
    clear_settings(monkeypatch, also_strip=("DEPLOYMENT_ENV", "ENVIRONMENT"))
    # Only shutdown's flush exports, so the receivers see a known number of exports.
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    with isolated_telemetry(clear_span_registry=True):
        yield


def python_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(python_value(item) for item in value.array_value.values)
    return getattr(value, kind) if kind else None


def as_dict(attributes: Any) -> dict[str, Any]:
    return {item.key: python_value(item.value) for item in attributes}


def record_workload(handle: TelemetryHandle) -> Any:
    """1,000 counter increments, a gauge, an up-down counter, a histogram, and spans; returns
    the span left open, which the caller keeps alive (lens tracks open spans weakly)."""
    register_metric_group("e2e", SPECS)
    for _ in range(1000):
        record_metrics(handle.meter, "e2e", steps=1, attributes={"phase": "train"})
    record_metrics(handle.meter, "e2e", loss=0.25)
    record_metrics(handle.meter, "e2e", inflight=5)
    record_metrics(handle.meter, "e2e", inflight=-2)
    for latency in (0.5, 1.5, 7.0):
        record_metrics(handle.meter, "e2e", latency=latency)
    tracer = handle.tracer
    with (
        tracer.start_as_current_span("job", attributes={"job.kind": "train"}),
        tracer.start_as_current_span("step") as step,
    ):
        step.set_attribute("dl.iteration", 3)
    return handle.tracer.start_span("still-open")


def check_everything_arrived(received: Received, run_id: str) -> None:
    metric_requests = received.metric_messages()
    trace_requests = received.trace_messages()
    assert metric_requests
    assert trace_requests

    last: dict[str, Any] = {}
    resources = []
    for request in metric_requests:
        for resource_metrics in request.resource_metrics:
            resources.append(as_dict(resource_metrics.resource.attributes))
            for scope in resource_metrics.scope_metrics:
                assert scope.scope.name == "nemo.lens"
                for metric in scope.metrics:
                    last[metric.name] = metric
    resource = resources[-1]
    assert resource["service.name"] == "e2e-service"
    assert resource["service.version"] == __version__
    assert resource["nemo.run.id"] == run_id
    assert resource["service.instance.id"] == f"{run_id}-rank1"
    assert resource["nemo.user.id"] == "alice"
    assert resource["wandb.project"] == "proj"
    assert resource["process.pid"] == os.getpid()
    assert resource["host.name"] == socket.gethostname()
    for key, value in CALLER_RESOURCE.items():
        assert resource[key] == (tuple(value) if isinstance(value, list) else value)

    steps = last["e2e.steps"].sum
    assert steps.is_monotonic
    assert len(steps.data_points) == 1
    point = steps.data_points[0]
    assert as_dict(point.attributes) == {"phase": "train"}
    assert getattr(point, point.WhichOneof("value")) == 1000
    loss = last["e2e.loss"].gauge.data_points[0]
    assert getattr(loss, loss.WhichOneof("value")) == 0.25
    inflight = last["e2e.inflight"].sum
    assert not inflight.is_monotonic
    assert getattr(inflight.data_points[0], inflight.data_points[0].WhichOneof("value")) == 3
    latency = last["e2e.latency"]
    assert latency.unit == "s"
    histogram = latency.histogram.data_points[0]
    assert histogram.count == 3
    assert histogram.sum == 9.0
    assert (histogram.min, histogram.max) == (0.5, 7.0)
    assert sum(histogram.bucket_counts) == 3

    spans = {
        span.name: span
        for request in trace_requests
        for resource_spans in request.resource_spans
        for scope in resource_spans.scope_spans
        for span in scope.spans
    }
    assert set(spans) == {"job", "step", "still-open"}
    assert as_dict(spans["job"].attributes) == {"job.kind": "train"}
    assert as_dict(spans["step"].attributes) == {"dl.iteration": 3}
    assert spans["step"].parent_span_id == spans["job"].span_id
    assert spans["step"].trace_id == spans["job"].trace_id
    assert as_dict(spans["still-open"].attributes) == {"nemo.span.truncated": True}
    assert [event.name for event in spans["still-open"].events] == ["nemo.span.truncated"]
    trace_resource = as_dict(trace_requests[-1].resource_spans[0].resource.attributes)
    assert trace_resource["service.instance.id"] == f"{run_id}-rank1"


def e2e_config(run_id: str) -> NemoLensConfig:
    return NemoLensConfig(
        enabled=True,
        service_name="e2e-service",
        export_strategy="all_ranks",
        run_id=run_id,
        user="alice",
        wandb_project="proj",
    )


@pytest.mark.parametrize(
    ("transport", "protocol", "run_id"),
    [
        pytest.param("http", "http/protobuf", "httprun", id="http"),
        # No protocol set: gRPC is the default transport.
        pytest.param("grpc", None, "grpcrun", id="grpc-default"),
    ],
)
def test_otlp_delivers_every_value_and_resource_attribute(
    transport: str, protocol: str | None, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTLP over HTTP and over gRPC (the default): metrics (1,000 increments exactly),
    spans and the resource arrive decoded at a real receiver."""
    with OtlpReceiver(transport) as receiver:
        if protocol is not None:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        if transport == "grpc":
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        handle = setup_telemetry(
            e2e_config(run_id), rank=1, world_size=2, resource_attributes=CALLER_RESOURCE
        )
        still_open = record_workload(handle)
        handle.shutdown(timeout_ms=20000)
        assert not still_open.is_recording()  # shutdown ended it
    check_everything_arrived(receiver.received, run_id)
