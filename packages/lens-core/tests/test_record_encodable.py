"""Nothing record_metrics accepts can make an export fail to encode (OTLP or Prometheus).

One int outside int64 or one lone surrogate used to poison every later export of every
group; these tests encode what the SDK collected with the real OTLP encoder and the real
Prometheus text exposition.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from nemo.lens import MetricSpec, record_metrics, register_metric_group
from nemo.lens.testing import InMemoryMetrics

encoder = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.metrics_encoder")
np = pytest.importorskip("numpy")

SPECS = [
    MetricSpec("level", "enc.level", "gauge"),
    MetricSpec("tokens", "enc.tokens", "counter"),
    MetricSpec("queue", "enc.queue", "up_down_counter"),
    MetricSpec("latency", "enc.latency", "histogram", unit="ms"),
]


@pytest.fixture
def group(pipeline: InMemoryMetrics) -> InMemoryMetrics:
    register_metric_group("enc", SPECS)
    return pipeline


def collect_encoded(pipeline: InMemoryMetrics) -> dict[str, list[Any]]:
    """Collect once, encode that collection with the OTLP encoder the exporters use (which
    raises if it cannot), and return its points by series name.

    One collection serves both: older SDKs report a gauge only in the first collection
    after it was set.
    """
    data = pipeline.reader.get_metrics_data()
    assert data is not None
    encoder.encode_metrics(data)
    points: dict[str, list[Any]] = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


def point_value(points: dict[str, list[Any]], name: str) -> Any:
    (point,) = points[name]
    return point.value


@pytest.mark.parametrize(
    "value", [2**63, -(2**63) - 1, np.uint64(2**64 - 1), 10**30, -(10**30)], ids=repr
)
def test_a_gauge_int_outside_int64_is_recorded_as_a_float(
    group: InMemoryMetrics, value: object
) -> None:
    """An integer OTLP cannot carry as int64 arrives as the nearest float, and encodes."""
    record_metrics(group.meter, "enc", level=value)
    recorded = point_value(collect_encoded(group), "enc.level")
    assert type(recorded) is float
    assert recorded == float(int(value))  # type: ignore[call-overload]


def test_an_int_too_large_for_a_float_is_refused_with_one_warning(
    group: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """10**400 has no float either: it is skipped with one warning, the call's rest records."""
    for _ in range(3):
        record_metrics(group.meter, "enc", level=10**400, latency=5.0)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1
    assert "'level'" in messages[0]
    assert "too large for a float" in messages[0]
    points = collect_encoded(group)
    assert "enc.level" not in points
    assert points["enc.latency"][0].count == 3


@pytest.mark.parametrize("key", ["tokens", "queue"])
def test_a_sum_passing_int64_stays_exportable(
    group: InMemoryMetrics, caplog: pytest.LogCaptureFixture, key: str
) -> None:
    """A counter or up-down counter whose int sum would leave int64 switches to floats."""
    for _ in range(3):
        record_metrics(group.meter, "enc", {key: 2**62})
    record_metrics(group.meter, "enc", {key: 1})
    name = f"enc.{key}"
    assert point_value(collect_encoded(group), name) == pytest.approx(3 * 2**62 + 1)
    messages = [r.getMessage() for r in caplog.records if "would pass int64" in r.getMessage()]
    assert len(messages) == 1


def test_small_counter_ints_stay_ints(group: InMemoryMetrics) -> None:
    """Counters far from the limit keep exact integer sums (no needless floats)."""
    for step in range(100):
        record_metrics(group.meter, "enc", tokens=step, queue=-step)
    points = collect_encoded(group)
    assert point_value(points, "enc.tokens") == 4950
    assert type(point_value(points, "enc.tokens")) is int
    assert point_value(points, "enc.queue") == -4950


def test_numpy_scalars_record_as_python_numbers(group: InMemoryMetrics) -> None:
    """np.int64, np.float32 and np.uint8 arrive as Python int/float values."""
    record_metrics(group.meter, "enc", level=np.float32(0.5), tokens=np.int64(7))
    record_metrics(group.meter, "enc", queue=np.uint8(3))
    points = collect_encoded(group)
    assert point_value(points, "enc.level") == 0.5
    assert point_value(points, "enc.tokens") == 7
    assert point_value(points, "enc.queue") == 3


def undecodable_name() -> str:
    """What os.fsdecode gives for a file name that is not UTF-8: lone surrogates."""
    return os.fsdecode(b"shard-\xff\xfe.bin")


def test_a_surrogate_attribute_is_replaced_and_every_export_encodes(
    group: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A lone surrogate in an attribute key or value becomes U+FFFD, with one warning."""
    name = undecodable_name()
    for _ in range(2):
        record_metrics(group.meter, "enc", level=1.0, attributes={"file": name, name: "x"})
    record_metrics(group.meter, "enc", level=2.0, attributes={"file": "plain"})
    attribute_sets = [dict(point.attributes) for point in collect_encoded(group)["enc.level"]]
    assert {"file": "shard-\ufffd\ufffd.bin", "shard-\ufffd\ufffd.bin": "x"} in attribute_sets
    assert {"file": "plain"} in attribute_sets
    replaced = [r for r in caplog.records if "replaced by U+FFFD" in r.getMessage()]
    assert len(replaced) == 1


def test_an_int_attribute_outside_int64_is_dropped(
    group: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """An attribute int OTLP cannot carry is dropped (warned), the value still records."""
    record_metrics(group.meter, "enc", level=3.0, attributes={"step": 2**64, "rank": 1})
    (point,) = collect_encoded(group)["enc.level"]
    assert dict(point.attributes) == {"rank": 1}
    assert "'step'" in caplog.text


@pytest.fixture
def prometheus_provider() -> Iterator[Any]:
    """A real PrometheusMetricReader (on prometheus_client's default registry)."""
    prometheus = pytest.importorskip("opentelemetry.exporter.prometheus")
    from opentelemetry.sdk.metrics import MeterProvider

    provider = MeterProvider(
        metric_readers=[prometheus.PrometheusMetricReader()], shutdown_on_exit=False
    )
    register_metric_group("enc", SPECS)
    yield provider
    provider.shutdown()  # the reader unregisters its collector


def test_prometheus_scrapes_still_work_after_a_surrogate_attribute(
    prometheus_provider: Any,
) -> None:
    """The text exposition renders every series, the replaced one included."""
    from prometheus_client import REGISTRY, generate_latest

    meter = prometheus_provider.get_meter("enc-tests")
    record_metrics(meter, "enc", level=1.0, attributes={"file": undecodable_name()})
    record_metrics(meter, "enc", tokens=2**63 + 5)
    lines = generate_latest(REGISTRY).decode("utf-8").splitlines()
    (level,) = [line for line in lines if line.startswith("enc_level{")]
    assert 'file="shard-\ufffd\ufffd.bin"' in level
    assert level.endswith(" 1.0")
    (tokens,) = [line for line in lines if line.startswith("enc_tokens_total")]
    assert tokens.endswith(" 9.223372036854776e+18")
