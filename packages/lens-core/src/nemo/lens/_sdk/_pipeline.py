"""Building the SDK providers an exporting process records through.

The SDK is imported here, inside the functions, so `import nemo.lens` needs only the
API. A pipeline is built completely before anything global changes, so a failure
(a missing package, a port in use) leaves the process as it was.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nemo.lens import _inheritance, _otel_env, _resource
from nemo.lens._sdk import _exporters, _fork
from nemo.lens._sdk._ids import build_id_generator
from nemo.lens._sdk._open_spans import OpenSpanTracker, build_open_span_closer
from nemo.lens.config import NemoLensConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.util.types import AttributeValue


_logger = logging.getLogger(__name__)


@dataclass
class Pipeline:
    """What one exporting setup built; the handle flushes and shuts it down."""

    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    open_spans: OpenSpanTracker | None = None
    #: Run after the providers shut down (the Prometheus endpoint's stop).
    on_shutdown: list[Callable[[], None]] = field(default_factory=list)


def build_pipeline(
    config: NemoLensConfig,
    *,
    rank: int | None,
    world_size: int | None,
    resource_attributes: Mapping[str, object] | None,
    span_exporter: SpanExporter | None,
    metric_reader: MetricReader | None,
) -> Pipeline:
    """Build the resource and the SDK providers `config` asks for.

    Raises:
        ImportError: The SDK, or the exporter `config.exporter` needs, is not installed.
        ValueError: `OTEL_METRIC_EXPORT_INTERVAL` or the Prometheus port is malformed.
        OSError: The Prometheus endpoint cannot bind its address.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(
            "setup_telemetry: an exporting process needs the OpenTelemetry SDK; "
            f"{_otel_env.install_hint(_otel_env.SDK_EXTRA)} ({exc})"
        ) from exc

    owner_pid = os.getpid()
    attributes = _resource.resource_attributes(
        service_name=config.service_name,
        run_id=config.run_id,
        user=config.user,
        wandb_entity=config.wandb_entity,
        wandb_project=config.wandb_project,
        rank=rank,
        world_size=world_size,
        caller_attributes=resource_attributes,
        forked_child=_inheritance.inherited_a_pipeline(),
    )
    resource = build_resource(attributes)
    pipeline = Pipeline(tracer_provider=None, meter_provider=None)
    try:
        if config.metrics_enabled:
            reader = metric_reader
            if reader is None:
                reader = _exporters.build_metric_reader(
                    config.exporter,
                    _otel_env.metric_export_interval_ms(),
                    pipeline.on_shutdown,
                )
            pipeline.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
            _fork.gate_metric_reader(reader, owner_pid)
        if config.traces_enabled:
            exporter = span_exporter
            if exporter is None:
                exporter = _exporters.build_span_exporter(config.exporter)
            tracer_provider = TracerProvider(resource=resource, id_generator=build_id_generator())
            pipeline.tracer_provider = tracer_provider
            # Before the batch processor, so spans it ends at shutdown are still exported.
            pipeline.open_spans = OpenSpanTracker()
            tracer_provider.add_span_processor(build_open_span_closer(pipeline.open_spans))
            if exporter is not None:
                tracer_provider.add_span_processor(
                    BatchSpanProcessor(_fork.bind_span_exporter_to_process(exporter, owner_pid))
                )
    except BaseException:
        _discard(pipeline)
        raise
    _inheritance.note_pipeline_built(pipeline.meter_provider)
    return pipeline


def build_resource(attributes: Mapping[str, AttributeValue]) -> Resource:
    """Return an SDK `Resource` of `attributes` over the SDK's own detection."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create(dict(attributes))


def _discard(pipeline: Pipeline) -> None:
    """Shut down what a failed build had started, quietly."""
    for shutdown in (
        *(() if pipeline.tracer_provider is None else (pipeline.tracer_provider.shutdown,)),
        *(() if pipeline.meter_provider is None else (pipeline.meter_provider.shutdown,)),
        *pipeline.on_shutdown,
    ):
        try:
            shutdown()
        except Exception as exc:
            _logger.debug("cleanup after a failed setup raised %s: %s", type(exc).__name__, exc)
