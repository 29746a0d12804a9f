"""Spans ended in forked children reach the parent's trace pipeline, once, however they end.

Every test forks for real: children end spans on the parent's tracer (no setup of their
own), nested under the span that was current at the fork, and leave through `os._exit`
or are SIGKILLed right after their last span ended.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from lens_fork import wait_for_child
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import (
    NemoLensConfig,
    TelemetryHandle,
    _forked_children,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

CHILDREN = 8
SPANS_PER_CHILD = 100
KILLED = (3, 4)
WAIT_S = 30.0


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    clean_environ.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with isolated_telemetry(clear_span_registry=True):
        yield


def traced_setup(**reader: object) -> tuple[TelemetryHandle, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console"),
        span_exporter=exporter,
        **reader,  # type: ignore[arg-type]
    )
    return handle, exporter


def fork_span_child(handle: TelemetryHandle, child: int, spans: int, end: str) -> int:
    """A child that ends `spans` spans under the current span, reports through a pipe,
    then ends as `end` says ("os._exit", "killed" or "wait": until the parent kills it)."""
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(done_read)
            for index in range(spans):
                with handle.tracer.start_as_current_span(
                    f"child-{child}", attributes={"index": index, "pair": (child, index)}
                ) as span:
                    span.add_event("step", {"index": index})
            os.write(done_write, b"1")
            if end == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            if end == "wait":
                signal.pause()
        finally:
            os._exit(0)
    os.close(done_write)
    ready, _, _ = select.select([done_read], [], [], WAIT_S)
    assert ready, f"child {child} did not end its spans"
    assert os.read(done_read, 1) == b"1"
    os.close(done_read)
    return pid


def reap(pid: int) -> int:
    return wait_for_child(pid, WAIT_S)


def child_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith("child-")]


def test_every_childs_spans_reach_the_parent_nested_once() -> None:
    """8 children x 100 spans under the parent's current span (2 children SIGKILLed right
    after their last span): all 800 reach the parent's exporter, each once, under that
    span, with its child's pid as process.pid, attributes and events intact."""
    handle, exporter = traced_setup()
    pids: dict[int, int] = {}
    with handle.tracer.start_as_current_span("step") as step:
        for child in range(CHILDREN):
            end = "killed" if child in KILLED else "os._exit"
            pids[child] = fork_span_child(handle, child, SPANS_PER_CHILD, end)
    outcomes = sorted(reap(pid) for pid in pids.values())
    assert outcomes == sorted([0] * (CHILDREN - len(KILLED)) + [-signal.SIGKILL] * len(KILLED))
    assert handle.force_flush()
    spans = child_spans(exporter)
    assert len(spans) == CHILDREN * SPANS_PER_CHILD
    assert len({span.context.span_id for span in spans}) == len(spans)  # none twice
    step_context = step.get_span_context()
    assert {span.parent.span_id for span in spans if span.parent} == {step_context.span_id}
    assert {span.context.trace_id for span in spans} == {step_context.trace_id}
    for child, pid in pids.items():
        mine = [span for span in spans if span.name == f"child-{child}"]
        assert len(mine) == SPANS_PER_CHILD
        attributes = [dict(span.attributes or {}) for span in mine]
        assert {found["process.pid"] for found in attributes} == {pid}
        indexes = sorted(int(str(found["index"])) for found in attributes)
        assert indexes == list(range(SPANS_PER_CHILD))
        assert all(found["pair"] == (child, found["index"]) for found in attributes)
        assert all(
            span.events[0].attributes == {"index": found["index"]}
            for span, found in zip(mine, attributes, strict=True)
        )
    handle.shutdown()
    assert len(child_spans(exporter)) == CHILDREN * SPANS_PER_CHILD  # shutdown added none


def test_a_live_childs_spans_are_exported_without_a_flush() -> None:
    """The parent takes a running child's spans on its own (every half second)."""
    handle, exporter = traced_setup()
    pid = fork_span_child(handle, 0, 10, "wait")
    try:
        deadline = time.monotonic() + WAIT_S
        while len(child_spans(exporter)) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(child_spans(exporter)) == 10
    finally:
        os.kill(pid, signal.SIGKILL)
        reap(pid)
    handle.shutdown()
    assert len(child_spans(exporter)) == 10


def test_spans_beyond_a_full_ring_are_counted_as_dropped() -> None:
    """A child that ends more span bytes than its ring holds before the parent takes them:
    every span is either exported or counted in nemo.lens.spans.dropped."""
    reader = InMemoryMetricReader()
    handle, exporter = traced_setup(metric_reader=reader)
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            writer = _forked_children._writer
            assert writer is not None
            ended = 0
            # Until the ring has dropped 10 (bounded: the parent takes records meanwhile).
            while writer._words[7] < 10 and ended < 50_000:
                with handle.tracer.start_as_current_span("child-big", attributes={"i": ended}):
                    trace.get_current_span().set_attribute("blob", "x" * 2_000)
                ended += 1
            os.write(done_write, ended.to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.close(done_write)
    ready, _, _ = select.select([done_read], [], [], WAIT_S)
    assert ready
    total = int.from_bytes(os.read(done_read, 8), "little")
    os.close(done_read)
    assert reap(pid) == 0
    assert handle.force_flush()
    exported = len(child_spans(exporter))
    data = reader.get_metrics_data()
    assert data is not None
    dropped = sum(
        getattr(point, "value", 0)
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name == "nemo.lens.spans.dropped"
        for point in metric.data.data_points
    )
    assert dropped > 0
    assert exported + dropped == total
    handle.shutdown()


def test_a_span_started_in_the_child_under_no_span_is_a_root_of_its_own() -> None:
    """With no span current at the fork, a child's span is a root span (no parent)."""
    handle, exporter = traced_setup()
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert reap(fork_span_child(handle, 0, 3, "os._exit")) == 0
    assert handle.force_flush()
    spans = child_spans(exporter)
    assert len(spans) == 3
    assert all(span.parent is None for span in spans)
    handle.shutdown()


def test_the_drain_thread_ends_with_the_pipeline() -> None:
    """The parent's thread that takes children's spans stops at shutdown."""
    handle, exporter = traced_setup()
    pid = fork_span_child(handle, 0, 1, "wait")
    try:
        assert any(t.name == "nemo-lens-children-spans" for t in threading.enumerate())
    finally:
        os.kill(pid, signal.SIGKILL)
        reap(pid)
    handle.shutdown()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name == "nemo-lens-children-spans" for t in threading.enumerate()
    ):
        time.sleep(0.05)
    assert not any(t.name == "nemo-lens-children-spans" for t in threading.enumerate())
    assert len(child_spans(exporter)) == 1
