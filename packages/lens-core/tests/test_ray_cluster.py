"""A real local Ray cluster: actor spans of every kind join the driver's trace.

The driver records its spans in memory; each tracing actor installs its own in-memory SDK
provider and hands back what it finished, as plain ids. One cluster serves the module,
and every wait on it is bounded.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from lens_integrations import require
from opentelemetry import trace
from opentelemetry.trace import Span

from nemo.lens.contrib.ray import ray_dispatch_with_context, traced_remote_call
from nemo.lens.testing import InMemorySpans, in_memory_spans

pytestmark = pytest.mark.integration

ray = require("ray")
pytest.importorskip("opentelemetry.sdk.trace")

#: Seconds any single wait on the cluster may take.
WAIT = 60


# --- what runs in the actors ------------------------------------------------------------------
# Ray ships these classes to its workers by value (see the `cluster` fixture), so they use
# only modules a worker can import: the standard library, OpenTelemetry and nemo.lens.


def _finished_spans(spans: InMemorySpans) -> list[dict[str, Any]]:
    """The actor's finished spans as plain values the driver can read."""
    return [
        {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent_id": span.parent.span_id if span.parent is not None else None,
            "status": span.status.status_code.name,
            "start": span.start_time,
            "end": span.end_time,
        }
        for span in spans.finished()
    ]


class SyncActor:
    """A synchronous actor that installs an in-memory tracer provider of its own."""

    def __init__(self) -> None:
        self.spans = in_memory_spans(install=True)

    @traced_remote_call
    def double(self, x: int) -> int:
        return 2 * x

    @traced_remote_call
    def fail(self) -> None:
        raise ValueError("boom in the actor")

    @traced_remote_call
    def count(self, n: int) -> Iterator[int]:
        for i in range(n):
            with trace.get_tracer("actor.body").start_as_current_span(f"item-{i}"):
                pass
            yield i

    def finished(self) -> list[dict[str, Any]]:
        return _finished_spans(self.spans)


class AsyncActor:
    """An asyncio actor (it has coroutine methods) with its own in-memory provider."""

    def __init__(self) -> None:
        self.spans = in_memory_spans(install=True)

    @traced_remote_call
    async def add_later(self, x: int) -> int:
        await asyncio.sleep(0.01)
        with trace.get_tracer("actor.body").start_as_current_span("after-await"):
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        return x + 1

    @traced_remote_call
    async def stream(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            await asyncio.sleep(0)
            with trace.get_tracer("actor.body").start_as_current_span(f"item-{i}"):
                pass
            yield i

    def finished(self) -> list[dict[str, Any]]:
        return _finished_spans(self.spans)


class BareActor:
    """An actor that never sets telemetry up: OpenTelemetry's API default applies."""

    @traced_remote_call
    def describe(self, x: int) -> tuple[int, bool, int]:
        span = trace.get_current_span()
        return x + 1, span.is_recording(), span.get_span_context().trace_id

    @traced_remote_call
    async def describe_later(self, x: int) -> tuple[int, bool]:
        await asyncio.sleep(0)
        return x + 1, trace.get_current_span().is_recording()


# --- the cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One local Ray instance for the module (1 CPU, no dashboard), shut down after it."""
    module = sys.modules[__name__]
    # pytest imports this file under a name Ray's workers cannot import, so its classes
    # travel by value.
    ray.cloudpickle.register_pickle_by_value(module)
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=80 * 1024 * 1024,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(module)


def _actor(cluster: Any, cls: type) -> Any:
    # Actors hold no CPU while they run, so all of them fit the 1-CPU cluster.
    handle = cluster.remote(cls).options(num_cpus=0).remote()
    cluster.get(handle.__ray_ready__.remote(), timeout=WAIT)
    return handle


@pytest.fixture(scope="module")
def sync_actor(cluster: Any) -> Any:
    return _actor(cluster, SyncActor)


@pytest.fixture(scope="module")
def async_actor(cluster: Any) -> Any:
    return _actor(cluster, AsyncActor)


@pytest.fixture(scope="module")
def bare_actor(cluster: Any) -> Any:
    return _actor(cluster, BareActor)


@pytest.fixture
def driver() -> Iterator[InMemorySpans]:
    """The driver's own in-memory pipeline (not installed globally)."""
    pipeline = in_memory_spans()
    yield pipeline
    pipeline.shutdown()


def _in_trace(actor: Any, root: Span) -> list[dict[str, Any]]:
    """The actor's finished spans that belong to `root`'s trace."""
    trace_id = root.get_span_context().trace_id
    return [s for s in ray.get(actor.finished.remote(), timeout=WAIT) if s["trace_id"] == trace_id]


def _drain(generator: Any, n: int) -> list[Any]:
    """The first `n` items of a Ray streaming generator, then wait for it to finish."""
    items = []
    for _ in range(n):
        ready, _ = ray.wait([generator], timeout=WAIT)
        assert ready, "the actor did not yield in time"
        items.append(ray.get(next(generator), timeout=WAIT))
    ray.get(generator.completed(), timeout=WAIT)
    return items


def _named(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (span,) = [s for s in spans if s["name"] == name]
    return span


# --- the tests --------------------------------------------------------------------------------


def test_sync_actor_span_is_a_child_of_the_driver_span(
    sync_actor: Any, driver: InMemorySpans
) -> None:
    """ray_dispatch_with_context to a traced method: the actor's span has the driver's as parent."""
    with driver.tracer.start_as_current_span("driver.step") as root:
        ref = ray_dispatch_with_context(sync_actor.double, 21)
    assert ray.get(ref, timeout=WAIT) == 42
    span = _named(_in_trace(sync_actor, root), "SyncActor.double")
    assert span["parent_id"] == root.get_span_context().span_id
    assert span["status"] == "UNSET"


def test_actor_exception_is_recorded_and_reaches_the_driver(
    sync_actor: Any, driver: InMemorySpans
) -> None:
    """The method's exception sets ERROR on the actor span and arrives as the Ray error."""
    with driver.tracer.start_as_current_span("driver.fail") as root:
        ref = ray_dispatch_with_context(sync_actor.fail)
    with pytest.raises(ValueError, match="boom in the actor"):
        ray.get(ref, timeout=WAIT)
    span = _named(_in_trace(sync_actor, root), "SyncActor.fail")
    assert span["status"] == "ERROR"
    assert span["parent_id"] == root.get_span_context().span_id


def test_sync_generator_method_streams_under_one_span(
    sync_actor: Any, driver: InMemorySpans
) -> None:
    """A generator method runs as a Ray streaming generator inside one span."""
    with driver.tracer.start_as_current_span("driver.count") as root:
        generator = ray_dispatch_with_context(sync_actor.count, 3)
    assert _drain(generator, 3) == [0, 1, 2]
    spans = _in_trace(sync_actor, root)
    outer = _named(spans, "SyncActor.count")
    assert outer["parent_id"] == root.get_span_context().span_id
    for i in range(3):
        assert _named(spans, f"item-{i}")["parent_id"] == outer["span_id"]


def test_async_actor_span_covers_the_awaited_body(async_actor: Any, driver: InMemorySpans) -> None:
    """A coroutine method's span is current after an await and ends after the body."""
    with driver.tracer.start_as_current_span("driver.add") as root:
        ref = ray_dispatch_with_context(async_actor.add_later, 1)
    assert ray.get(ref, timeout=WAIT) == 2
    spans = _in_trace(async_actor, root)
    outer = _named(spans, "AsyncActor.add_later")
    inner = _named(spans, "after-await")
    assert outer["parent_id"] == root.get_span_context().span_id
    assert inner["parent_id"] == outer["span_id"]
    assert outer["end"] >= inner["end"]


def test_async_generator_method_streams_under_one_span(
    async_actor: Any, driver: InMemorySpans
) -> None:
    """An async-generator method streams its items; one span covers the whole iteration."""
    with driver.tracer.start_as_current_span("driver.stream") as root:
        generator = ray_dispatch_with_context(async_actor.stream, 3)
    assert _drain(generator, 3) == [0, 1, 2]
    spans = _in_trace(async_actor, root)
    outer = _named(spans, "AsyncActor.stream")
    assert outer["parent_id"] == root.get_span_context().span_id
    items = [_named(spans, f"item-{i}") for i in range(3)]
    assert all(item["parent_id"] == outer["span_id"] for item in items)
    assert outer["end"] >= items[-1]["end"]


def test_actor_without_setup_runs_the_wrapped_methods(
    bare_actor: Any, driver: InMemorySpans
) -> None:
    """No setup in the actor: the calls work; the span is non-recording but in the trace."""
    with driver.tracer.start_as_current_span("driver.bare") as root:
        sync_ref = ray_dispatch_with_context(bare_actor.describe, 1)
        async_ref = ray_dispatch_with_context(bare_actor.describe_later, 2)
    value, recording, trace_id = ray.get(sync_ref, timeout=WAIT)
    assert (value, recording) == (2, False)
    assert trace_id == root.get_span_context().trace_id
    assert ray.get(async_ref, timeout=WAIT) == (3, False)


def test_a_plain_remote_call_without_a_carrier_still_works(bare_actor: Any) -> None:
    """Calling `.remote()` directly, without `_otel_carrier`, is an ordinary call."""
    value, recording, _ = ray.get(bare_actor.describe.remote(5), timeout=WAIT)
    assert (value, recording) == (6, False)
