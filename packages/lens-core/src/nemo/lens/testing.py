"""Support for test suites of code that uses lens.

lens keeps some state process-global, as OpenTelemetry does: the metric registry, the
span-group gate, the export-strategy registry, the one-setup-per-process guard, and the
OpenTelemetry API's set-once providers. The resets here put each back to its import-time
state, so a consumer's fixture needs no private names::

    import pytest
    from nemo.lens.testing import in_memory_metrics, isolated_telemetry

    @pytest.fixture(autouse=True)
    def _fresh_telemetry():
        with isolated_telemetry():
            yield

    def test_records_loss():
        metrics = in_memory_metrics()
        train_one_step(meter=metrics.meter)
        assert metrics.points("trainer.loss")[0].value == 0.5

`nemo.lens` never imports this module. The in-memory builders import the SDK when
called and raise `ImportError` naming `lens-core[sdk]` without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, propagate, trace

from nemo.lens import (
    _otel_internals,
    _shutdown,
    _span_lifecycle,
    _warn_once,
    handle,
    propagation,
    state,
    strategies,
)
from nemo.lens.groups import SpanRegistry
from nemo.lens.instruments import _cardinality, _registry

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "InMemoryMetrics",
    "InMemorySpans",
    "in_memory_metrics",
    "in_memory_spans",
    "isolated_telemetry",
    "reset_all",
    "reset_export_strategies",
    "reset_init_guard",
    "reset_metric_registry",
    "reset_otel_globals",
    "reset_span_state",
    "reset_warning_memory",
]

#: How long `reset_otel_globals` lets the old providers' shutdown run.
_RESET_SHUTDOWN_TIMEOUT_MS = 5000
_SDK_HINT = "nemo.lens.testing needs the OpenTelemetry SDK; pip install 'lens-core[sdk]'"


def reset_metric_registry() -> None:
    """Unregister every metric group, lens's own included, with caches and warning memory,
    and lift the cardinality limit a setup set (with the attribute sets each instrument
    had seen, which its caches held)."""
    _registry.clear()
    _cardinality.set_limit(0)
    _cardinality.count_per_collection(None, frozenset())


def reset_span_state(*, clear_registry: bool = False) -> None:
    """Turn every span group off and clear the pipeline-parallel carrier.

    The enabled set is pinned empty, which also drops any stored spec and pending set.

    Args:
        clear_registry: Also clear `SpanRegistry`. By default registrations made when a
            consumer's modules were imported survive.
    """
    state.set_enabled_span_groups(frozenset())
    state.set_pp_trace_carrier(None)
    if clear_registry:
        SpanRegistry.clear()


def reset_export_strategies() -> None:
    """Leave only the four built-in export strategies, as originally defined."""
    strategies._reset_to_builtins()


def reset_init_guard() -> None:
    """Allow another enabled `setup_telemetry` in this process, while a setup is live.

    Outside tests it is not needed: shutting the live setup's handle down
    (`handle.shutdown()`) allows the next setup by itself.
    """
    handle._INITIALIZED = False
    handle._live_handle = None


def reset_otel_globals() -> None:
    """Shut down and forget OpenTelemetry's global providers; restore the default propagator.

    The tracer, meter and logger providers are shut down on a best-effort basis (within
    `_RESET_SHUTDOWN_TIMEOUT_MS`), then forgotten, so the next `set_*_provider` call takes
    effect. The text-map propagator becomes the one the API builds by default (from
    `OTEL_PROPAGATORS`, else W3C trace context plus baggage).
    """
    steps: list[_shutdown.Step] = []
    for provider, label in _otel_internals.installed_global_providers():
        # The SDK's MeterProvider logs a warning when shut down twice; skip one already down.
        if provider is not None and not _otel_internals.provider_is_shut_down(provider):
            steps += _shutdown.provider_steps(provider, label, flush=False, shut_down=True)
    if steps:
        _shutdown.run_within("reset_otel_globals", steps, _RESET_SHUTDOWN_TIMEOUT_MS)
    _otel_internals.forget_global_tracer_provider()
    _span_lifecycle.forget_default_tracers()
    _otel_internals.forget_global_meter_provider()
    _otel_internals.forget_global_logger_provider()
    propagate.set_global_textmap(propagation._environment_propagator())


def reset_warning_memory() -> None:
    """Forget every warning lens logged once, so each is logged again on its next occurrence."""
    _warn_once.clear_all()


def reset_all(*, clear_span_registry: bool = False) -> None:
    """Run every reset above: registry, span state, strategies, init guard, OTel globals,
    and the warn-once memory of every recording path."""
    reset_otel_globals()
    reset_metric_registry()
    reset_span_state(clear_registry=clear_span_registry)
    reset_export_strategies()
    reset_init_guard()
    reset_warning_memory()


@contextmanager
def isolated_telemetry(*, clear_span_registry: bool = False) -> Iterator[None]:
    """Run `reset_all` on entry and on exit; wrap a test (or a fixture's yield) in it."""
    reset_all(clear_span_registry=clear_span_registry)
    try:
        yield
    finally:
        reset_all(clear_span_registry=clear_span_registry)


class InMemoryMetrics:
    """A real SDK `MeterProvider` over an `InMemoryMetricReader`.

    Attributes:
        provider: The `MeterProvider`.
        reader: Its `InMemoryMetricReader`.
        meter: A meter from `provider`, to pass to `record_metrics`.
    """

    def __init__(self, provider: MeterProvider, reader: InMemoryMetricReader) -> None:
        self.provider = provider
        self.reader = reader
        self.meter = provider.get_meter("nemo.lens.testing")
        # Older SDKs omit a gauge with no new value from the next collection; remembering
        # the last metric per name makes repeated look-ups agree on every SDK release.
        self._latest: dict[str, Any] = {}

    def metrics(self) -> dict[str, Any]:
        """Collect now; return metric name -> its latest SDK `Metric` (the last scope wins)."""
        data = self.reader.get_metrics_data()
        if data is not None:
            for resource_metrics in data.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        self._latest[metric.name] = metric
        return dict(self._latest)

    def points(self, name: str) -> list[Any]:
        """Collect now; return the data points of series `name` (`[]` if it has none)."""
        metric = self.metrics().get(name)
        return [] if metric is None else list(metric.data.data_points)

    def names(self) -> set[str]:
        """Collect now; return the names of every series with data."""
        return set(self.metrics())

    def shutdown(self) -> None:
        """Shut the provider down."""
        self.provider.shutdown()


class InMemorySpans:
    """A real SDK `TracerProvider` exporting synchronously to an `InMemorySpanExporter`.

    Attributes:
        provider: The `TracerProvider`.
        exporter: Its `InMemorySpanExporter`.
        tracer: A tracer from `provider`.
    """

    def __init__(self, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
        self.provider = provider
        self.exporter = exporter
        self.tracer = provider.get_tracer("nemo.lens.testing")

    def finished(self) -> list[ReadableSpan]:
        """The ended spans, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        """The ended spans' names, in the order they ended."""
        return [span.name for span in self.exporter.get_finished_spans()]

    def clear(self) -> None:
        """Forget the spans ended so far."""
        self.exporter.clear()

    def shutdown(self) -> None:
        """Shut the provider down."""
        self.provider.shutdown()


def in_memory_metrics(*, install: bool = False) -> InMemoryMetrics:
    """Build an in-memory metrics pipeline.

    Declared histogram buckets apply as in `setup_telemetry`'s pipeline: through the API's
    advisory boundaries, or, on releases that ignore them, through views for the groups
    registered before this call.

    Args:
        install: Also make its provider OpenTelemetry's global meter provider, replacing
            (without shutting down) whichever was installed.

    Raises:
        ImportError: The OpenTelemetry SDK is not installed.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from nemo.lens._sdk._views import histogram_views
    except ImportError as exc:
        raise ImportError(f"{_SDK_HINT} ({exc})") from exc
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader], views=histogram_views(), shutdown_on_exit=False
    )
    if install:
        _otel_internals.forget_global_meter_provider()
        metrics.set_meter_provider(provider)
    return InMemoryMetrics(provider, reader)


def in_memory_spans(*, install: bool = False) -> InMemorySpans:
    """Build an in-memory tracing pipeline with a synchronous span processor.

    Args:
        install: Also make its provider OpenTelemetry's global tracer provider, replacing
            (without shutting down) whichever was installed.

    Raises:
        ImportError: The OpenTelemetry SDK is not installed.
    """
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError as exc:
        raise ImportError(f"{_SDK_HINT} ({exc})") from exc
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if install:
        _otel_internals.forget_global_tracer_provider()
        trace.set_tracer_provider(provider)
    return InMemorySpans(provider, exporter)
