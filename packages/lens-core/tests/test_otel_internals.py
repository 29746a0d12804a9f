"""The OpenTelemetry private names lens relies on exist in the installed release.

This runs in every cell of the OpenTelemetry matrix, so an upgrade that renames one fails
here, naming it, instead of silently disabling what lens built on it.
"""

from __future__ import annotations

import pytest
from opentelemetry import metrics, trace

from nemo.lens import _otel_internals
from nemo.lens.testing import in_memory_metrics, in_memory_spans, reset_otel_globals


def test_every_private_module_name_is_present() -> None:
    """missing_internals() is empty: each (module, attribute) lens reads or writes exists."""
    assert _otel_internals.missing_internals() == []


def test_a_metric_reader_has_the_collect_callback_lens_gates() -> None:
    """A reader attached to an SDK MeterProvider exposes the callback lens wraps at fork."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    pipeline = in_memory_metrics()
    try:
        assert _otel_internals.collect_callback(pipeline.reader) is not None
    finally:
        pipeline.shutdown()


def test_the_global_proxy_meter_forwards_through_the_target_lens_reads() -> None:
    """After an SDK provider is installed, a global proxy meter's target is its real meter."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    reset_otel_globals()
    try:
        proxy = metrics.get_meter("nemo.lens.tests")
        assert type(proxy) is _otel_internals.ProxyMeter
        assert _otel_internals.real_meter_of(proxy) is None
        pipeline = in_memory_metrics()
        metrics.set_meter_provider(pipeline.provider)
        assert type(_otel_internals.real_meter_of(proxy)).__module__.startswith(
            "opentelemetry.sdk.metrics"
        )
        pipeline.shutdown()
    finally:
        reset_otel_globals()


def test_forgetting_a_global_provider_lets_the_next_one_take_effect() -> None:
    """forget_global_meter_provider() undoes the API's set-once, so a new provider is used."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    reset_otel_globals()
    try:
        first = in_memory_metrics(install=True)
        assert metrics.get_meter_provider() is first.provider
        second = in_memory_metrics(install=True)
        assert metrics.get_meter_provider() is second.provider
        first.shutdown()
        second.shutdown()
    finally:
        reset_otel_globals()


def test_a_meter_shares_its_providers_measurement_consumer() -> None:
    """The fork rule tells a parent's meters apart by the consumer they share with their
    provider: both attributes exist, and they are the same object."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    pipeline = in_memory_metrics()
    try:
        consumer = _otel_internals.provider_consumer(pipeline.provider)
        assert consumer is not None
        assert _otel_internals.meter_consumer(pipeline.meter) is consumer
    finally:
        pipeline.shutdown()


def test_an_ended_spans_containers_hold_what_its_properties_copy() -> None:
    """span_containers() reads an ended span's own attributes, events and links (the
    names in SPAN_CONTAINERS), equal to the copies its public properties return, for a
    span with all three and for a bare one."""
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace import ReadableSpan

    pipeline = in_memory_spans()
    try:
        with pipeline.tracer.start_as_current_span("linked") as linked:
            pass
        links = [trace.Link(linked.get_span_context(), {"why": "retry"})]
        with pipeline.tracer.start_as_current_span("full", links=links) as span:
            span.set_attribute("api_key", "hidden")
            span.add_event("tick", {"token": "hidden"})
        bare, full = pipeline.finished()
    finally:
        pipeline.shutdown()
    assert type(full) is ReadableSpan
    for name in _otel_internals.SPAN_CONTAINERS:
        assert hasattr(full, name), name
    attributes, events, links_held = _otel_internals.span_containers(full, ReadableSpan)
    assert dict(attributes) == dict(full.attributes or {}) == {"api_key": "hidden"}
    assert tuple(events) == full.events
    assert [event.name for event in events] == ["tick"]
    assert tuple(links_held) == full.links
    assert len(full.links) == 1
    held = _otel_internals.span_containers(bare, ReadableSpan)
    assert [len(container or ()) for container in held] == [0, 0, 0]


def test_a_span_subclass_is_read_through_its_public_properties() -> None:
    """A span whose class is not exactly the SDK's ReadableSpan (its properties may say
    otherwise than its containers) is read through its properties."""
    pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace import ReadableSpan

    class Computed(ReadableSpan):
        @property
        def attributes(self) -> dict[str, str]:
            return {"api_key": "computed"}

    span = Computed(name="computed", attributes={})
    attributes, events, links = _otel_internals.span_containers(span, ReadableSpan)
    assert attributes == {"api_key": "computed"}
    assert (events, links) == ((), ())
