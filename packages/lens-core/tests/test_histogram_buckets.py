"""Declared histogram buckets reach the exported points on every OpenTelemetry release.

On API releases with advisory boundaries (1.30 on) `record_metrics` passes them when it
creates the histogram; below SDK 1.32 `setup_telemetry` adds one SDK view per declared
histogram (`nemo.lens._sdk._views`). These tests run in both the newest and the floor
OpenTelemetry environments; each states which side it pins.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry as lens_setup_telemetry
from nemo.lens._sdk._views import ADVISORY_SUFFICES, bucket_views, histogram_views
from nemo.lens.instruments._record import API_HAS_BUCKET_ADVISORY
from nemo.lens.testing import isolated_telemetry

STEP_BUCKETS = (1.0, 5.0, 25.0, 100.0)
LATENCY_BUCKETS = (0.001, 0.01, 0.1)
# The SDK's default explicit boundaries, the same on every release lens supports.
SDK_DEFAULT_BOUNDS = (
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    7500.0, 10000.0,
)  # fmt: skip
TRAINER_SPECS = [
    # A mixed-case name: the SDK lower-cases instrument names, and views must follow.
    MetricSpec("step_ms", "trainer.Step.Duration", "histogram", unit="ms", buckets=STEP_BUCKETS),
    MetricSpec("latency_s", "trainer.latency", "histogram", unit="s", buckets=[0.001, 0.01, 0.1]),
    MetricSpec("plain_ms", "trainer.plain", "histogram", unit="ms"),
]
VALUES = {"step_ms": 7, "latency_s": 0.05, "plain_ms": 7}
EXPECTED_BOUNDS = {
    "trainer.step.duration": STEP_BUCKETS,
    "trainer.latency": LATENCY_BUCKETS,
    "trainer.plain": SDK_DEFAULT_BOUNDS,
}


def release(distribution: str) -> tuple[int, int]:
    """The (major, minor) release of an installed distribution."""
    major, minor = importlib.metadata.version(distribution).split(".")[:2]
    return int(major), int(minor)


def exported(reader: InMemoryMetricReader) -> dict[tuple[str, str], Any]:
    """Collect now; return (scope name, metric name) -> the SDK metric."""
    data = reader.get_metrics_data()
    found: dict[tuple[str, str], Any] = {}
    if data is not None:
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[scope_metrics.scope.name, metric.name] = metric
    return found


def bounds(reader: InMemoryMetricReader) -> dict[str, tuple[float, ...]]:
    """Collect now; return histogram name -> its (single) point's explicit bounds."""
    result: dict[str, tuple[float, ...]] = {}
    for (_, name), metric in exported(reader).items():
        (point,) = metric.data.data_points
        result[name] = tuple(point.explicit_bounds)
    return result


@pytest.fixture
def provider_and_reader() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    """A real SDK MeterProvider with histogram_views() over an InMemoryMetricReader."""
    register_metric_group("trainer", TRAINER_SPECS)
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        views=histogram_views(), metric_readers=[reader], shutdown_on_exit=False
    )
    yield provider, reader
    provider.shutdown()


def test_the_advisory_keyword_is_detected_from_the_api_release() -> None:
    """lens passes advisory boundaries exactly on opentelemetry-api 1.30 and later."""
    api_has_advisory = release("opentelemetry-api") >= (1, 30)
    assert api_has_advisory is API_HAS_BUCKET_ADVISORY


def test_views_are_built_exactly_where_the_advisory_is_not_enough() -> None:
    """histogram_views() is [] only on API >= 1.30 with SDK >= 1.32; else one per series."""
    register_metric_group("trainer", TRAINER_SPECS)
    sdk_honours = release("opentelemetry-sdk") >= (1, 32)
    advisory_suffices = API_HAS_BUCKET_ADVISORY and sdk_honours
    assert advisory_suffices is ADVISORY_SUFFICES
    views = histogram_views()
    assert len(views) == (0 if ADVISORY_SUFFICES else 2)


def test_histogram_views_and_record_metrics_export_the_declared_buckets(
    provider_and_reader: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """With histogram_views() in the provider, each histogram exports its declared buckets."""
    provider, reader = provider_and_reader
    record_metrics(provider.get_meter("trainer"), "trainer", VALUES)
    assert bounds(reader) == EXPECTED_BOUNDS


def test_histogram_views_give_an_otlp_style_reader_each_histograms_buckets() -> None:
    """With histogram_views(), an OTLP-style reader gets each histogram's buckets on any SDK."""
    register_metric_group("trainer", TRAINER_SPECS)
    reader = InMemoryMetricReader(
        preferred_aggregation={Histogram: ExplicitBucketHistogramAggregation()}
    )
    provider = MeterProvider(
        views=histogram_views(), metric_readers=[reader], shutdown_on_exit=False
    )
    record_metrics(provider.get_meter("trainer"), "trainer", VALUES)
    assert bounds(reader) == EXPECTED_BOUNDS
    provider.shutdown()


def test_bucket_views_alone_set_the_boundaries_of_a_plain_histogram() -> None:
    """bucket_views() applies the buckets to a histogram created without any advisory."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        views=bucket_views({"trainer": TRAINER_SPECS}),
        metric_readers=[reader],
        shutdown_on_exit=False,
    )
    meter = provider.get_meter("raw")
    for spec in TRAINER_SPECS:
        meter.create_histogram(spec.name, unit=spec.unit).record(VALUES[spec.key])
    assert bounds(reader) == EXPECTED_BOUNDS
    provider.shutdown()


def test_a_bucket_view_leaves_a_same_named_counter_alone() -> None:
    """A view selects histograms only: a counter sharing the series name stays a sum."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        views=bucket_views({"trainer": TRAINER_SPECS}),
        metric_readers=[reader],
        shutdown_on_exit=False,
    )
    provider.get_meter("histograms").create_histogram("trainer.latency").record(0.05)
    provider.get_meter("counters").create_counter("trainer.latency").add(3)
    metrics = exported(reader)
    assert tuple(metrics["histograms", "trainer.latency"].data.data_points[0].explicit_bounds) == (
        LATENCY_BUCKETS
    )
    (point,) = metrics["counters", "trainer.latency"].data.data_points
    assert point.value == 3
    assert not hasattr(point, "explicit_bounds")
    provider.shutdown()


def test_conflicting_buckets_keep_the_first_group_and_log_the_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two groups giving one series (any case) different buckets: one view, the first's, logged."""
    groups = {
        "first": [MetricSpec("t", "shared.duration", "histogram", buckets=(1, 2))],
        "second": [MetricSpec("t", "Shared.Duration", "histogram", buckets=(5, 10))],
    }
    with caplog.at_level(logging.WARNING, logger="nemo.lens"):
        views = bucket_views(groups)
    assert len(views) == 1
    reader = InMemoryMetricReader()
    provider = MeterProvider(views=views, metric_readers=[reader], shutdown_on_exit=False)
    provider.get_meter("m").create_histogram("shared.duration").record(1.5)
    assert bounds(reader) == {"shared.duration": (1.0, 2.0)}
    provider.shutdown()
    (message,) = [record.getMessage() for record in caplog.records]
    assert "'Shared.Duration'" in message
    assert "'second'" in message
    assert "'first'" in message
    assert "[5.0, 10.0]" in message
    assert "[1.0, 2.0]" in message


def test_the_same_buckets_in_two_groups_make_one_view_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Repeating a series with identical buckets is no conflict: one view, nothing logged."""
    spec = MetricSpec("t", "shared.duration", "histogram", buckets=(1, 2))
    with caplog.at_level(logging.WARNING, logger="nemo.lens"):
        views = bucket_views({"first": [spec], "second": [spec]})
    assert len(views) == 1
    assert caplog.records == []


def test_specs_without_buckets_make_no_view() -> None:
    """Groups that declare no buckets give no view, so the provider keeps its defaults."""
    specs = [MetricSpec("t", "a.duration", "histogram"), MetricSpec("g", "a.gauge")]
    assert bucket_views({"a": specs}) == []


@pytest.mark.skipif(not API_HAS_BUCKET_ADVISORY, reason="the API has no advisory boundaries")
def test_the_advisory_alone_gives_the_buckets_without_views() -> None:
    """On API >= 1.30, record_metrics's histogram carries its buckets with no view at all."""
    register_metric_group("trainer", TRAINER_SPECS)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    record_metrics(provider.get_meter("trainer"), "trainer", VALUES)
    assert bounds(reader) == EXPECTED_BOUNDS
    provider.shutdown()


@pytest.mark.skipif(not ADVISORY_SUFFICES, reason="SDK < 1.32 mishandles the advisory here")
def test_a_reader_asking_for_explicit_buckets_keeps_each_histograms_advisory() -> None:
    """A reader preferring explicit buckets (as OTLP's does) honours each histogram's advisory."""
    register_metric_group("trainer", TRAINER_SPECS)
    reader = InMemoryMetricReader(
        preferred_aggregation={Histogram: ExplicitBucketHistogramAggregation()}
    )
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    record_metrics(provider.get_meter("trainer"), "trainer", VALUES)
    assert bounds(reader) == EXPECTED_BOUNDS
    provider.shutdown()


@pytest.fixture
def setup_telemetry(clean_environ: pytest.MonkeyPatch) -> Iterator[Any]:
    """setup_telemetry with in-memory exporters, every lens global reset around the test."""
    handles: list[Any] = []

    def setup(reader: InMemoryMetricReader) -> Any:
        handle = lens_setup_telemetry(
            NemoLensConfig(enabled=True),
            span_exporter=InMemorySpanExporter(),
            metric_reader=reader,
        )
        handles.append(handle)
        return handle

    with isolated_telemetry():
        yield setup
        for handle in handles:
            handle.shutdown()


def test_setup_telemetry_exports_the_declared_buckets(setup_telemetry: Any) -> None:
    """Through setup_telemetry's pipeline, a group registered first exports its buckets."""
    register_metric_group("trainer", TRAINER_SPECS)
    reader = InMemoryMetricReader()
    handle = setup_telemetry(reader)
    record_metrics(handle.meter, "trainer", VALUES)
    assert {
        name: found for name, found in bounds(reader).items() if name.startswith("trainer.")
    } == (EXPECTED_BOUNDS)


def test_a_group_registered_after_setup_gets_buckets_only_through_the_advisory(
    setup_telemetry: Any,
) -> None:
    """Views are fixed at setup: a later group gets buckets only via the advisory (API >= 1.30)."""
    reader = InMemoryMetricReader()
    handle = setup_telemetry(reader)
    register_metric_group("trainer", TRAINER_SPECS)
    record_metrics(handle.meter, "trainer", VALUES)
    found = bounds(reader)
    expected_step = STEP_BUCKETS if API_HAS_BUCKET_ADVISORY else SDK_DEFAULT_BOUNDS
    assert found["trainer.step.duration"] == expected_step
    assert found["trainer.plain"] == SDK_DEFAULT_BOUNDS
