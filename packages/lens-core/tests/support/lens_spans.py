"""Span-side test support: an in-memory tracing pipeline and span-state resets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nemo.lens import helpers, propagation
from nemo.lens.groups import SpanRegistry
from nemo.lens.state import set_enabled_span_groups, set_pp_trace_carrier


class SpanPipeline:
    """A real SDK TracerProvider exporting synchronously to an InMemorySpanExporter."""

    def __init__(self, id_generator: Any = None) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        self.provider = (
            TracerProvider() if id_generator is None else TracerProvider(id_generator=id_generator)
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("lens-tests")

    def finished(self) -> list[Any]:
        """Finished spans, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        """Names of the finished spans, in the order they ended."""
        return [span.name for span in self.finished()]

    def one(self, name: str) -> Any:
        """The single finished span called `name`."""
        (span,) = [span for span in self.finished() if span.name == name]
        return span


def reset_span_state() -> None:
    """Every gate off, no stored spec, an empty registry, no carrier, no warning memory."""
    set_enabled_span_groups(frozenset())
    SpanRegistry.clear()
    set_pp_trace_carrier(None)
    helpers._warned.clear()
    propagation._warned.clear()


@contextmanager
def global_tracer_provider(provider: Any) -> Iterator[None]:
    """Install `provider` as the global tracer provider, and forget it afterwards."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    def forget() -> None:
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()

    forget()
    trace.set_tracer_provider(provider)
    try:
        yield
    finally:
        forget()
