"""The open-span tracker: it ends live open spans at shutdown and holds none alive itself."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import NemoLensConfig, TelemetryHandle, setup_telemetry
from nemo.lens._sdk._open_spans import OpenSpanTracker
from nemo.lens.testing import isolated_telemetry


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def handle(exporter: InMemorySpanExporter) -> Iterator[TelemetryHandle]:
    built = setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=exporter, metric_reader=InMemoryMetricReader()
    )
    yield built
    built.shutdown()


def live_sdk_spans(prefix: str) -> list[SdkSpan]:
    """Every SDK span object still alive whose name starts with `prefix`."""
    gc.collect()
    return [
        obj
        for obj in gc.get_objects()
        # type(), not isinstance(): isinstance reads `__class__`, which some objects of
        # other libraries (torch's deprecated aliases) answer with a warning.
        if issubclass(type(obj), SdkSpan) and str(obj.name).startswith(prefix)
    ]


def test_a_dropped_span_that_was_never_ended_is_freed(handle: TelemetryHandle) -> None:
    """A span started on handle.tracer and dropped unended is garbage: nothing of lens keeps it."""
    span = handle.tracer.start_span("forgotten")
    dropped = weakref.ref(span)
    del span
    gc.collect()
    assert dropped() is None


def test_ten_thousand_forgotten_spans_leave_nothing_behind(handle: TelemetryHandle) -> None:
    """Many started-and-dropped spans leave no SDK span object alive (they cost 2.9 KB each)."""
    for index in range(10_000):
        handle.tracer.start_span(f"leak-{index}")
    assert live_sdk_spans("leak-") == []


def test_live_open_spans_are_still_ended_at_shutdown_innermost_first(
    handle: TelemetryHandle, exporter: InMemorySpanExporter
) -> None:
    """Spans still referenced at shutdown end child-first, truncated; a dropped one is not."""
    job = handle.tracer.start_span("job")
    step = handle.tracer.start_span("step", context=trace.set_span_in_context(job))
    handle.tracer.start_span("dropped", context=trace.set_span_in_context(step))
    micro = handle.tracer.start_span("micro", context=trace.set_span_in_context(step))
    gc.collect()
    handle.shutdown()
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["micro", "step", "job"]
    for span in spans:
        assert span.attributes is not None
        assert span.attributes["nemo.span.truncated"] is True
    assert not micro.is_recording()


def test_a_span_kept_current_is_alive_and_ended_at_shutdown(
    handle: TelemetryHandle, exporter: InMemorySpanExporter
) -> None:
    """A span only the current context holds (use_span without a name) still ends truncated."""
    scope = trace.use_span(handle.tracer.start_span("current"), end_on_exit=False)
    scope.__enter__()
    try:
        gc.collect()
        handle.shutdown()
    finally:
        scope.__exit__(None, None, None)
    assert [span.name for span in exporter.get_finished_spans()] == ["current"]


def test_the_tracker_counts_only_live_spans(handle: TelemetryHandle) -> None:
    """OpenSpanTracker.open_count follows the spans alive and open, not every span started."""
    tracker = OpenSpanTracker()
    kept = [handle.tracer.start_span(f"kept-{index}") for index in range(3)]
    for span in kept:
        tracker.started(span)
    dropped = handle.tracer.start_span("dropped")
    tracker.started(dropped)
    del dropped
    gc.collect()
    assert tracker.open_count() == 3
    tracker.ended(kept[0])
    assert tracker.open_count() == 2
    assert tracker.end_all() == 2
    assert not kept[1].is_recording()


def test_dropped_spans_leave_no_entry_behind(handle: TelemetryHandle) -> None:
    """Spans started and dropped without an end (nothing can end them any more) do not
    grow the tracker: their dead entries are pruned as it grows, live ones stay."""
    tracker = OpenSpanTracker()
    kept = handle.tracer.start_span("kept")
    tracker.started(kept)
    for index in range(5_000):
        tracker.started(handle.tracer.start_span(f"dropped-{index}"))
    gc.collect()
    assert len(tracker._open) < 2_100  # the prune bound, far below the 5,001 started
    assert tracker.open_count() == 1
    assert tracker.end_all() == 1
    assert not kept.is_recording()
