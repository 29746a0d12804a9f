"""The shared region and its readers, driven in one process (traced by coverage).

A forked child's side runs untraced in the fork tests (coverage cannot follow a fork), so
the region's writer and reader, the span encoding and the parent's merge of a child's
series are driven here on one region that this process both writes and reads, as a child
and its parent would. A region whose writer is this process counts as a child that ended
(this process is not its own child), so each collection folds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.status import StatusCode

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    _forked_children,
    _shared_region,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens._sdk import _children_spans
from nemo.lens._shared_region import InstrumentMeta
from nemo.lens.testing import isolated_telemetry

BOUNDS = (1.0, 10.0)


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


def kid_points(reader: InMemoryMetricReader) -> dict[str, Any]:
    """One collection's kid.* points, by metric name (one series each here)."""
    data = reader.get_metrics_data()
    return {
        metric.name: point
        for resource_metrics in (data.resource_metrics if data else ())
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name.startswith("kid.")
        for point in metric.data.data_points
    }


def meta(kind: str, name: str, token: int = 1, **fields: Any) -> InstrumentMeta:
    return InstrumentMeta(
        pipeline=token,
        scope=("test.scope", None, None),
        name=name,
        kind=kind,
        unit=fields.get("unit", ""),
        description="",
        bounds=fields.get("bounds"),
        gauge_mode=fields.get("mode"),
    )


def test_each_kind_reads_back_what_was_written() -> None:
    """Sums (int and float parts), gauges (int and float, with their time) and histograms
    (count, sum, min, max, the SDK's bucket rule) read back exactly, per series."""
    region = _shared_region.new_region(os.getpid())
    writer = _shared_region.RegionWriter(region)
    reader = _shared_region.RegionReader(region)
    add = writer.instrument(meta("counter", "c"))
    setter = writer.instrument(meta("gauge", "g", mode="max"))
    observe = writer.instrument(meta("histogram", "h", bounds=BOUNDS))
    for _ in range(3):
        add(2, {"a": 1})
    add(0.5, {"a": 1})
    add(7)
    setter(3, {"a": 1})
    setter(2.5, {"a": 1})
    for value in (1.0, 0.5, 10.0, 11.0):
        observe(value, {"a": 1})
    found = {}
    for slot in reader.refresh():
        snapshot = reader.read(slot)
        assert snapshot is not None
        found[slot.meta.name, tuple(sorted(slot.attributes.items()))] = snapshot
    assert found["c", (("a", 1),)] == (4, (6.5,))
    assert found["c", ()] == (1, (7,))
    updates, (value, set_at) = found["g", (("a", 1),)]
    assert (updates, value) == (2, 2.5)
    assert set_at > 0
    # 1.0 closes the first bucket, 10.0 the second (the SDK's rule); 11.0 overflows.
    assert found["h", (("a", 1),)] == (4, (4, 22.5, 0.5, 11.0, (2, 1, 1)))
    assert reader.writer_pid == os.getpid()
    assert reader.dropped_series == 0
    reader.release()


def region_contents(region: Any, since_ns: int) -> dict[tuple[str, tuple[Any, ...]], Any]:
    """Every series of `region`, read back: (name, attributes) -> its snapshot, a gauge's
    time as whether it was set at `since_ns` or later."""
    reader = _shared_region.RegionReader(region)
    found: dict[tuple[str, tuple[Any, ...]], Any] = {}
    for slot in reader.refresh():
        snapshot = reader.read(slot)
        assert snapshot is not None
        updates, fields = snapshot
        if slot.meta.kind == "gauge":
            fields = (fields[0], fields[1] >= since_ns)
        found[slot.meta.name, tuple(sorted(slot.attributes.items()))] = (updates, *fields)
    reader.release()
    return found


def test_a_call_written_at_once_reads_back_as_each_value_written_by_its_method() -> None:
    """`RegionWriter.keep_call` (one lock a call) leaves what each value's record method
    leaves; it hands back what only that method may write: a series without its slot
    yet, a sum's int (its int64 guard), values outside the fast range, unknown keys."""
    kinds = {"c": "counter", "u": "up_down_counter", "g": "gauge", "h": "histogram"}
    calls: list[tuple[dict[str, Any], dict[str, object] | None]] = [
        ({"c": 1.5, "u": -2.0, "g": 3, "h": 0.5}, {"a": 1}),
        ({"c": 2.5, "u": 4.0, "g": 2.5, "h": 10.0, "x": 1.0}, {"a": 1}),
        ({"c": 7, "g": float("nan"), "h": -1.0}, {"a": 1}),
        ({"c": 0.25, "g": -0.0, "h": 11}, None),
        ({"c": 0.25, "g": 9, "h": 1.0}, None),
    ]
    regions = []
    for batched in (False, True):
        region = _shared_region.new_region(os.getpid())
        writer = _shared_region.RegionWriter(region)
        methods = {
            key: writer.instrument(meta(kind, key, bounds=BOUNDS if kind == "histogram" else None))
            for key, kind in kinds.items()
        }
        kept = {}
        for key, method in methods.items():
            keeper = _forked_children.keeper_of(method)
            assert keeper is not None
            assert keeper[0] is writer
            lowest = 0 if kinds[key] in ("counter", "histogram") else -(2**63)
            kept[key] = (keeper[1], lowest)
        handed_back = []
        for index, (values, attributes) in enumerate(calls):
            if index == len(calls) - 1:
                last_call_ns = _shared_region.monotonic_ns()
            rest = writer.keep_call(kept, values, attributes) if batched else values
            handed_back.append(sorted(rest))
            for key, value in rest.items():
                if key in methods and value == value and value >= kept[key][1]:
                    methods[key](value, attributes)
        regions.append((region_contents(region, last_call_ns), handed_back))
    (each_value, _), (batched_contents, batched_back) = regions
    assert batched_contents == each_value
    assert batched_contents["g", ()] == (2, 9, True)  # set again, at the last call
    assert batched_back == [
        ["c", "g", "h", "u"],  # every series' first value: its slot is made by the method
        ["x"],
        ["c", "g", "h"],  # the counter's int; NaN; a negative histogram value
        ["c", "g", "h"],  # new series (no attributes)
        [],
    ]


def test_a_full_region_drops_new_series_and_counts_them() -> None:
    region = _shared_region.new_region(os.getpid())
    writer = _shared_region.RegionWriter(region)
    reader = _shared_region.RegionReader(region)
    add = writer.instrument(meta("counter", "c"))
    for series in range(40_000):
        add(1, {"series": series})
    kept = len(reader.refresh())
    assert 10_000 < kept < 40_000
    assert reader.dropped_series == 40_000 - kept
    add(1, {"series": 39_999})  # a dropped series stays dropped, uncounted again
    assert reader.dropped_series == 40_000 - kept
    reader.release()


def test_the_span_ring_wraps_without_losing_or_garbling_a_record() -> None:
    """Records of every size, written and taken in turns until the ring wrapped several
    times (headers landing on its last bytes included), come back exactly, in order; a
    record that does not fit the room left is refused and counted."""
    region = _shared_region.new_region(os.getpid())
    writer = _shared_region.RegionWriter(region)
    reader = _shared_region.RegionReader(region)
    ring = _shared_region.SPAN_RING_BYTES
    sent: list[bytes] = []
    received: list[tuple[int, bytes]] = []
    size, written = 1, 0
    while written < 3 * ring:
        payload = bytes([len(sent) % 251]) * size
        assert writer.append_record(7, payload)
        sent.append(payload)
        written += 16 + -(-size // 16) * 16
        size = size * 7 % 9_973 + 1  # sizes 1..9,973, no pattern the ring lines up with
        if len(sent) % 5 == 0:
            received += reader.take_records()
    received += reader.take_records()
    assert received == [(7, payload) for payload in sent]
    # A record whose header starts on the ring's last 16 bytes.
    words = memoryview(region).cast("q")
    start = (written // ring + 1) * ring - 16
    words[5] = words[6] = start  # written, taken
    assert writer.append_record(9, b"wraps")
    assert reader.take_records() == [(9, b"wraps")]
    words.release()
    assert not writer.append_record(9, b"x" * (ring + 1))
    assert reader.dropped_span_records == 1
    reader.release()


def test_a_span_survives_encoding_whole() -> None:
    """Every field the parent exports comes back from a child's record, with the child's
    pid as process.pid and the parent's resource."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("child.scope", "1.2")
    with (
        tracer.start_as_current_span("outer") as outer,
        tracer.start_as_current_span(
            "inner",
            kind=SpanKind.CLIENT,
            attributes={"n": 1, "pair": (1, 2), "f": 0.5},
            links=[Link(outer.get_span_context(), {"why": "because"})],
        ) as inner,
    ):
        inner.add_event("step", {"i": 3})
        inner.set_status(StatusCode.ERROR, "bad")
    span = next(s for s in exporter.get_finished_spans() if s.name == "inner")
    resource = provider.resource
    decoded = _children_spans.decode_span(_children_spans.encode_span(span, 4242), resource)
    assert decoded.name == "inner"
    assert decoded.context == span.context
    assert decoded.parent == span.parent
    assert decoded.kind is SpanKind.CLIENT
    assert (decoded.start_time, decoded.end_time) == (span.start_time, span.end_time)
    assert dict(decoded.attributes or {}) == {"n": 1, "pair": (1, 2), "f": 0.5, "process.pid": 4242}
    assert [(e.name, dict(e.attributes or {}), e.timestamp) for e in decoded.events] == [
        (e.name, dict(e.attributes or {}), e.timestamp) for e in span.events
    ]
    assert [link.context for link in decoded.links] == [outer.get_span_context()]
    assert (decoded.status.status_code, decoded.status.description) == (StatusCode.ERROR, "bad")
    assert decoded.instrumentation_scope is not None
    assert (decoded.instrumentation_scope.name, decoded.instrumentation_scope.version) == (
        "child.scope",
        "1.2",
    )
    assert decoded.resource is resource
    provider.shutdown()


def test_the_parent_merges_and_folds_a_childs_region() -> None:
    """A region the parent's pipeline reads (written here, as a child would): its series
    join the collection, its span records reach the exporter, and the region is folded
    and released; later collections show the folded totals once."""
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console"), metric_reader=reader, span_exporter=spans
    )
    metrics_token = max(_forked_children._pipelines)
    spans_token = max(_forked_children._span_sinks)
    region = _shared_region.new_region(os.getpid())
    writer = _shared_region.RegionWriter(region)
    with _forked_children._lock:
        _forked_children._children.append(
            _forked_children._Child(_shared_region.RegionReader(region))
        )
    scope = ("nemo.lens", None, None)
    add = writer.instrument(
        InstrumentMeta(metrics_token, scope, "kid.adds", "counter", "", "", None, None)
    )
    observe = writer.instrument(
        InstrumentMeta(metrics_token, scope, "kid.lat", "histogram", "ms", "", BOUNDS, None)
    )
    setter = writer.instrument(
        InstrumentMeta(metrics_token, scope, "kid.depth", "gauge", "", "", None, "sum")
    )
    add(5, {"k": 1})
    observe(3.0, {"k": 1})
    setter(4, {"k": 1})
    tracer_provider = TracerProvider()
    exporter = InMemorySpanExporter()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tracer_provider.get_tracer("kid").start_as_current_span("kid.span"):
        pass
    (ended,) = exporter.get_finished_spans()
    assert writer.append_record(spans_token, _children_spans.encode_span(ended, 999))
    tracer_provider.shutdown()

    first = kid_points(reader)
    assert first["kid.adds"].value == 5
    assert (first["kid.lat"].count, list(first["kid.lat"].bucket_counts)) == (1, [0, 1, 0])
    assert first["kid.depth"].value == 4
    assert _forked_children._children == []  # folded: its writer (this process) ended
    again = kid_points(reader)
    assert again["kid.adds"].value == 5  # the folded total, once
    assert handle.force_flush()
    kid_spans = [span for span in spans.get_finished_spans() if span.name == "kid.span"]
    assert len(kid_spans) == 1
    assert dict(kid_spans[0].attributes or {})["process.pid"] == 999
    handle.shutdown()


def test_a_parent_pipeline_meter_in_a_child_records_into_the_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a forked child's recorder does, set up in one process: a child of the
    pipeline's process records `handle.meter`'s instrument into its region."""
    register_metric_group("kid", [MetricSpec("n", "kid.n", "counter")])
    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=reader,
    )
    region = _shared_region.new_region(os.getpid())
    monkeypatch.setattr(_forked_children, "_writer", _shared_region.RegionWriter(region))
    monkeypatch.setattr(_forked_children, "_reader_pid", os.getpid())
    consumer = _forked_children.parents_consumer()
    assert consumer is not None
    assert _forked_children.reports_to_parent(consumer)
    record = _forked_children.child_recorder(
        consumer, handle.meter, MetricSpec("n", "kid.n", "counter")
    )
    assert record is not None
    record(3, None)
    snapshot_reader = _shared_region.RegionReader(region)
    (slot,) = snapshot_reader.refresh()
    assert (slot.meta.name, snapshot_reader.read(slot)) == ("kid.n", (1, (3,)))
    snapshot_reader.release()
    handle.shutdown()


@pytest.mark.parametrize("temporality", ["cumulative", "delta"])
def test_a_childs_series_add_into_the_parents_own(temporality: str) -> None:
    """Where the parent records the same series, the child's values add into its points:
    sums add, histograms merge, a "sum" gauge adds the two latest values and a "last"
    gauge takes the parent's value when the parent changed it. Under delta temporality a
    second collection carries nothing of the child's again."""
    from nemo.lens import record_metrics

    register_metric_group(
        "kid",
        [
            MetricSpec("adds", "kid.adds", "counter"),
            MetricSpec("lat", "kid.lat", "histogram", unit="ms", buckets=BOUNDS),
            MetricSpec("depth", "kid.depth", "gauge", multiprocess="sum"),
            MetricSpec("last", "kid.last", "gauge"),
        ],
    )
    options: dict[str, Any] = {}
    if temporality == "delta":
        from opentelemetry.sdk.metrics import Counter, Histogram
        from opentelemetry.sdk.metrics.export import AggregationTemporality

        options["preferred_temporality"] = dict.fromkeys(
            [Counter, Histogram], AggregationTemporality.DELTA
        )
    reader = InMemoryMetricReader(**options)
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=reader,
    )
    attributes = {"k": 1}
    record_metrics(handle.meter, "kid", adds=2, lat=0.5, depth=10, last=1, attributes=attributes)
    token = max(_forked_children._pipelines)
    region = _shared_region.new_region(os.getpid())
    writer = _shared_region.RegionWriter(region)
    with _forked_children._lock:
        _forked_children._children.append(
            _forked_children._Child(_shared_region.RegionReader(region))
        )
    scope = (handle.meter.name, handle.meter.version, None)
    writer.instrument(InstrumentMeta(token, scope, "kid.adds", "counter", "", "", None, None))(
        5, attributes
    )
    writer.instrument(InstrumentMeta(token, scope, "kid.lat", "histogram", "ms", "", BOUNDS, None))(
        20.0, attributes
    )
    writer.instrument(InstrumentMeta(token, scope, "kid.depth", "gauge", "", "", None, "sum"))(
        4, attributes
    )
    writer.instrument(InstrumentMeta(token, scope, "kid.last", "gauge", "", "", None, "last"))(
        7, attributes
    )

    first = kid_points(reader)
    assert first["kid.adds"].value == 7
    lat = first["kid.lat"]
    assert (lat.count, lat.sum, lat.min, lat.max) == (2, 20.5, 0.5, 20.0)
    assert list(lat.bucket_counts) == [1, 0, 1]
    assert first["kid.depth"].value == 14
    assert first["kid.last"].value == 1  # the parent set it in this interval
    second = kid_points(reader)
    if temporality == "delta":
        assert "kid.adds" not in second  # nothing new from either side
    else:
        assert second["kid.adds"].value == 7
    handle.shutdown()
