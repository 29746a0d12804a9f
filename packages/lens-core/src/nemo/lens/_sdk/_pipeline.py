"""Building the SDK providers an exporting process records through, and how they end.

Traces and metrics always (unless their `*_enabled` flag is off); logs when
`logs_enabled` is on and the exporter has somewhere to send them.

Only setup imports this module (`import nemo.lens` needs only the API; setup turns a
missing SDK into an ImportError naming lens-core[sdk]). A pipeline is built completely
before anything global changes, so a failure (a missing package, a port in use) leaves
the process as it was.

The providers are built with `shutdown_on_exit=False`: the SDK's own exit handlers wait
on exporters without a bound (a dead collector held exit for 10-48 s), so lens shuts the
pipeline down itself, within a budget (`nemo.lens.handle`, `nemo.lens._shutdown`).

Spans and log records pass a `QueueGate` (`nemo.lens._sdk._span_queue`) on their way into
their batch processor, which keeps its queue from overflowing and counts every item it
refuses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from nemo.lens import (
    _forked_children,
    _inheritance,
    _otel_env,
    _otel_internals,
    _shutdown,
    _value_limits,
    resources,
)
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _children_metrics, _coalescing, _exporters, _fork, _redacting
from nemo.lens._sdk._ids import build_id_generator
from nemo.lens._sdk._open_spans import OpenSpanTracker, build_open_span_closer
from nemo.lens._sdk._sampling import build_sampler
from nemo.lens._sdk._span_queue import QueueGate, add_gated_batch_processor
from nemo.lens._sdk._value_limits import (
    TruncationCount,
    TruncationCountingSpanExporter,
    bound_truncation_records,
    build_span_limits,
)
from nemo.lens._sdk._views import histogram_views
from nemo.lens.config import NemoLensConfig, _is_default_service_name
from nemo.lens.instruments import _cardinality
from nemo.lens.semconv import SERVICE_NAME

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from nemo.lens._export_plan import ExportPlan, SignalPlan


_logger = logging.getLogger(__name__)


class Pipeline:
    """What one exporting setup built; the handle flushes and shuts it down.

    A plain class, not a dataclass: building one at import costs every process ~1 ms.
    """

    __slots__ = (
        "built",
        "joined_parent",
        "log_gate",
        "logger_provider",
        "meter_provider",
        "on_shutdown",
        "open_spans",
        "readers_to_flush",
        "span_gate",
        "tracer_provider",
        "truncations",
    )

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        #: The SDK `LoggerProvider` (`logs_enabled` and an exporter for logs), else None.
        self.logger_provider: Any = None
        self.open_spans: OpenSpanTracker | None = None
        #: Run after the providers shut down (the Prometheus endpoint's stop).
        self.on_shutdown: list[Callable[[], None]] = []
        #: Readers whose own shutdown does not export (not periodic): flushed before it.
        self.readers_to_flush: list[MetricReader] = []
        #: The gate in front of the batch span processor, if there is one.
        self.span_gate: QueueGate | None = None
        #: The gate in front of the batch log record processor, if there is one.
        self.log_gate: QueueGate | None = None
        #: In a forked child whose Prometheus address its parent serves: the parent's
        #: pipeline (its measurement consumer) that this setup's metrics report to instead.
        self.joined_parent: Any = None
        #: The values the value length limits cut (`nemo.lens._sdk._value_limits`).
        self.truncations = TruncationCount()
        #: The process that built it: a forked child must not call into its providers,
        #: whose locks a parent thread may have held at the fork.
        self.built = BuiltHere()

    def shutdown_lanes(self) -> list[_shutdown.Lane]:
        """Shutdown's work, one lane per signal (metrics, traces, logs); each exports once.

        The SDK's `MeterProvider.shutdown` makes a periodic reader collect and export one
        last time, and `TracerProvider.shutdown` and `LoggerProvider.shutdown` drain their
        batch queues (the tracer provider ends the open spans first), so none is flushed
        first (that would export twice). A reader that does not export at its own
        shutdown is flushed before it.
        """
        lanes: list[_shutdown.Lane] = []
        meter_provider = self.meter_provider
        if meter_provider is not None and _otel_internals.provider_is_shut_down(meter_provider):
            meter_provider = None  # shut down elsewhere (the SDK warns about a second time)
        metric_steps: list[_shutdown.Step] = []
        if meter_provider is not None:
            metric_steps += [
                ("metric reader.force_flush", _shutdown.with_budget(reader.force_flush))
                for reader in self.readers_to_flush
            ]
            metric_steps += _shutdown.provider_steps(
                meter_provider, "meter provider", flush=False, shut_down=True
            )
        metric_steps += [("endpoint stop", _ignore_budget(stop)) for stop in self.on_shutdown]
        if metric_steps:
            lanes.append(("metrics", metric_steps))
        if self.tracer_provider is not None:
            lanes.append(
                (
                    "traces",
                    _shutdown.provider_steps(
                        self.tracer_provider, "tracer provider", flush=False, shut_down=True
                    ),
                )
            )
        if self.logger_provider is not None:
            lanes.append(
                (
                    "logs",
                    _shutdown.provider_steps(
                        self.logger_provider, "logger provider", flush=False, shut_down=True
                    ),
                )
            )
        return lanes

    def flush_lanes(self) -> list[_shutdown.Lane]:
        """`force_flush`'s work, one lane per signal, metrics first."""
        lanes: list[_shutdown.Lane] = []
        for signal, provider, label in (
            ("metrics", self.meter_provider, "meter provider"),
            ("traces", self.tracer_provider, "tracer provider"),
            ("logs", self.logger_provider, "logger provider"),
        ):
            if provider is not None:
                lanes.append(
                    (signal, _shutdown.provider_steps(provider, label, flush=True, shut_down=False))
                )
        return lanes

    def report_dropped(self) -> int:
        """Log the number of spans and of log records dropped, once each (see
        `QueueGate.report`); return their sum. The values cut by the length limits get their
        own warning (`TruncationCount.report`), not counted in the sum."""
        self.truncations.report()
        return sum(gate.report() for gate in (self.span_gate, self.log_gate) if gate is not None)


def _sampler_rank(
    rank: int | None, world_size: int | None, attributes: Mapping[str, object]
) -> tuple[int | None, int | None]:
    """The rank the sampler hashes: setup's, else the one the resource attributes give."""
    if rank is not None:
        return rank, world_size
    return resources._rank_from_attributes(attributes)


def _resource_attributes(
    config: NemoLensConfig,
    rank: int | None,
    world_size: int | None,
    caller_attributes: Mapping[str, object] | None,
) -> dict[str, AttributeValue]:
    """This process's resource attributes (`nemo.lens.resources._attributes_for_setup`), its
    service name resolved in OpenTelemetry's order when the config keeps the default."""
    service_name = config.service_name
    if _is_default_service_name(service_name):
        service_name = _otel_env.environment_service_name() or service_name
    return resources._attributes_for_setup(
        service_name=service_name,
        run_id=config.run_id,
        user=config.user,
        wandb_entity=config.wandb_entity,
        wandb_project=config.wandb_project,
        rank=rank,
        world_size=world_size,
        caller_attributes=caller_attributes,
        forked_child=_inheritance.inherited_a_pipeline(),
    )


def _ignore_budget(action: Callable[[], object]) -> Callable[[int], object]:
    return lambda remaining_ms: action()


def _log_parents_endpoint(plan: SignalPlan, joined: bool) -> None:
    host, port = plan.prometheus_address or ("", 0)
    if joined:
        _logger.info(
            "setup_telemetry: this process was forked from one serving Prometheus on "
            "%s:%d; its metrics reach that endpoint through the parent (it does not bind "
            "the port again)",
            host,
            port,
        )
        return
    _logger.warning(
        "setup_telemetry: this process was forked from one serving Prometheus on %s:%d, "
        "which it cannot bind again, and that process's pipeline does not take its values "
        "(only direct children of the process that set up report); this setup exports no "
        "metrics. Give such a process its own OTEL_EXPORTER_PROMETHEUS_PORT to serve its own.",
        host,
        port,
    )


def _build_metrics(
    pipeline: Pipeline,
    metrics_plan: SignalPlan | None,
    metric_reader: MetricReader | None,
    resource: Resource,
) -> MetricReader | None:
    """Build `pipeline`'s meter provider and its one reader (`metric_reader`, or the
    plan's) for `metrics_plan`; return the reader, or None where metrics are not exported
    from here."""
    if metrics_plan is None:
        return None
    if metrics_plan.prometheus_address is not None:
        # Imported here: its HTTP server modules cost a setup without Prometheus ~10 ms.
        from nemo.lens._sdk import _prometheus

        if _prometheus.parent_serves(metrics_plan.prometheus_address):
            # Binding it again would fail here (and a pool would respawn the worker).
            pipeline.joined_parent = _forked_children.parents_consumer()
            _log_parents_endpoint(metrics_plan, pipeline.joined_parent is not None)
            return None
    reader = metric_reader
    if reader is None:
        reader = _exporters.build_metric_reader(metrics_plan, pipeline.on_shutdown)
    # Before the provider reads them: metric_cardinality_limit is the one limit.
    _otel_internals.lift_sdk_cardinality_limits(reader, _cardinality.SDK_UNLIMITED)
    pipeline.meter_provider = MeterProvider(
        resource=resource,
        metric_readers=[reader],
        views=histogram_views(),
        shutdown_on_exit=False,
    )
    if not isinstance(reader, PeriodicExportingMetricReader):
        pipeline.readers_to_flush.append(reader)
    _coalescing.coalesce_recording(pipeline.meter_provider, [reader], pipeline.built)
    _children_metrics.merge_children(
        reader, pipeline.meter_provider, resource, pipeline.on_shutdown
    )
    _redacting.redact_collections(reader)  # last: what the children add is covered
    return reader


def build_pipeline(
    config: NemoLensConfig,
    plan: ExportPlan,
    *,
    rank: int | None,
    world_size: int | None,
    resource_attributes: Mapping[str, object] | None,
    span_exporter: SpanExporter | None,
    metric_reader: MetricReader | None,
    instrumentation_scope: str,
) -> Pipeline:
    """Build the resource and the SDK providers for each signal `plan` exports.

    `plan` (built and checked by `setup_telemetry`) says each signal's exporter and its
    settings; a signal without a plan gets no provider. `span_exporter` and
    `metric_reader`, when given, are the plan's injected exporters.
    `instrumentation_scope` names the meter lens's own counter (`nemo.lens.spans.dropped`)
    is created on, with lens's version.

    Raises:
        ImportError: The exporter the plan names is not installed.
        OSError: The Prometheus endpoint cannot bind its address.
        ValueError: The console file cannot be opened.
    """
    attributes = _resource_attributes(config, rank, world_size, resource_attributes)
    resource = build_resource(attributes)
    _exporters.log_plan_findings(plan)
    pipeline = Pipeline(tracer_provider=None, meter_provider=None)
    reader = None
    try:
        reader = _build_metrics(pipeline, plan.get("metrics"), metric_reader, resource)
        traces_plan = plan.get("traces")
        if traces_plan is not None:
            exporter = span_exporter
            if exporter is None:
                exporter = _exporters.build_span_exporter(traces_plan)
            tracer_provider = TracerProvider(
                resource=resource,
                id_generator=build_id_generator(),
                # None leaves the SDK's own OTEL_TRACES_SAMPLER handling in place.
                sampler=build_sampler(config, *_sampler_rank(rank, world_size, attributes)),
                span_limits=_span_limits(traces_plan),
                shutdown_on_exit=False,
            )
            pipeline.tracer_provider = tracer_provider
            # Before the batch processor, so spans it ends at shutdown are still exported.
            pipeline.open_spans = OpenSpanTracker()
            tracer_provider.add_span_processor(build_open_span_closer(pipeline.open_spans))
            exporter = _count_cut_values(exporter, traces_plan, pipeline, instrumentation_scope)
            if exporter is not None and traces_plan.batch is not None:
                exporter = _redacting.RedactingSpanExporter(exporter)
                pipeline.span_gate = add_gated_batch_processor(
                    tracer_provider,
                    _fork.ProcessBoundSpanExporter(exporter, pipeline.built),
                    traces_plan.batch,
                    pipeline.built,
                    pipeline.meter_provider,
                    instrumentation_scope,
                )
        logs_plan = plan.get("logs")
        if logs_plan is not None:
            # Only a logs pipeline loads the SDK's logs modules (~7 ms).
            from nemo.lens._sdk import _logging

            pipeline.logger_provider, pipeline.log_gate = _logging.build_logger_provider(
                logs_plan,
                _exporters.build_log_exporter(logs_plan),
                resource,
                pipeline.built,
                pipeline.meter_provider,
                instrumentation_scope,
                truncations=pipeline.truncations,
            )
    except BaseException:
        _discard(pipeline)
        raise
    if pipeline.meter_provider is not None and reader is not None:
        # Only once the whole pipeline is built, so a failed setup leaves the process as
        # it was.
        _apply_cardinality_limit(config, pipeline.meter_provider, reader)
    _inheritance.note_pipeline_built(pipeline.meter_provider)
    return _with_value_limits_noted(plan, pipeline)


def _apply_cardinality_limit(
    config: NemoLensConfig, meter_provider: MeterProvider, reader: MetricReader
) -> None:
    """Make `metric_cardinality_limit` the limit `record_metrics` applies (lens applies it
    itself; the SDK's own, where there is one, was lifted on `reader`), counted per
    collection cycle for the kinds `reader` collects as delta where the SDK forgets delta
    series at each collection too (see `instruments._cardinality`)."""
    _cardinality.set_limit(config.metric_cardinality_limit)
    per_cycle = frozenset[str]()
    if _coalescing.sdk_forgets_delta_series():
        per_cycle = _otel_internals.delta_kinds(reader)
    _cardinality.count_per_collection(_otel_internals.provider_consumer(meter_provider), per_cycle)


def _with_value_limits_noted(plan: ExportPlan, pipeline: Pipeline) -> Pipeline:
    """`pipeline`, built: the SDK's truncation records bounded when a signal has value
    limits, and its span limits noted for lens's exception recording."""
    if any(signal.value_limits is not None for signal in plan.signals.values()):
        bound_truncation_records()
    traces_plan = plan.get("traces")
    limits = None if traces_plan is None else traces_plan.value_limits
    if pipeline.tracer_provider is not None and limits is not None:
        _value_limits.note_in_force(pipeline.tracer_provider, limits)
    return pipeline


def _span_limits(plan: SignalPlan) -> Any:
    """The SDK `SpanLimits` of the plan's value limits (None: the SDK reads its variables)."""
    return None if plan.value_limits is None else build_span_limits(plan.value_limits)


def _count_cut_values(
    exporter: SpanExporter | None, plan: SignalPlan, pipeline: Pipeline, scope: str
) -> SpanExporter | None:
    """`exporter`, counting the span values the plan's limits cut in the pipeline's count
    (and its counter, on the meter `scope`)."""
    if exporter is None or plan.value_limits is None:
        return exporter
    pipeline.truncations.use(plan.value_limits, pipeline.meter_provider, scope)
    return TruncationCountingSpanExporter(exporter, plan.value_limits, pipeline.truncations)


class PipelineResource(Resource):
    """An SDK `Resource` whose hash is computed once, when first asked for.

    The OTLP span encoder groups a batch's spans by resource, hashing each span's, and
    the SDK's hash serializes every attribute to JSON on each call; a resource is
    immutable, so the first hash holds. Equal to (and hashing as) a plain `Resource` of
    the same attributes and schema URL.
    """

    #: The hash, once something asked for it (setup itself does not).
    _lens_hash: int | None = None

    def __hash__(self) -> int:
        found = self._lens_hash
        if found is None:  # two threads asking at once both compute the same value
            found = self._lens_hash = super().__hash__()
        return found


class _Detection(NamedTuple):
    """The SDK's resource detection in one process, and the environment it read."""

    pid: int
    inputs: tuple[str, ...]
    resource: Resource


#: The last detection (swapped whole, so another thread reads one or the other).
_last_detection: _Detection | None = None


def detected_resource() -> Resource:
    """The SDK's own resource, `Resource.create()` of no attributes: its defaults and its
    detectors' findings.

    That detection (about 0.2 ms; threads on 1.45, an entry-point scan on 1.23) gives
    the same resource in the same process for the same environment, so a setup after
    another reuses it; not where the environment names detectors of its own
    (`_otel_env.resource_inputs`), whose findings may change.
    """
    global _last_detection
    inputs = _otel_env.resource_inputs()
    last = _last_detection
    pid = os.getpid()
    if inputs is not None and last is not None and last.pid == pid and last.inputs == inputs:
        return last.resource
    resource = Resource.create()
    if inputs is not None:
        _last_detection = _Detection(pid, inputs, resource)
    return resource


def build_resource(attributes: Mapping[str, AttributeValue]) -> Resource:
    """Return an SDK `Resource` of `attributes` over the SDK's own detection, with every
    secret key's value redacted (`OTEL_RESOURCE_ATTRIBUTES`' too).

    What `Resource.create(attributes)` gives: the detection's attributes, then these
    (which are clean already). With an empty `service.name` it is that call itself, for
    the SDK's `unknown_service` fallback (the detection names a service of its own).
    """
    detected = detected_resource()
    merged = {**detected.attributes, **attributes}
    if not merged.get(SERVICE_NAME):
        detected = Resource.create(dict(attributes))
        merged = dict(detected.attributes)
    return _redacting.redacted_resource(PipelineResource(merged, detected.schema_url))


def _discard(pipeline: Pipeline) -> None:
    """Shut down what a failed build had started, quietly."""
    for shutdown in (
        *(() if pipeline.logger_provider is None else (pipeline.logger_provider.shutdown,)),
        *(() if pipeline.tracer_provider is None else (pipeline.tracer_provider.shutdown,)),
        *(() if pipeline.meter_provider is None else (pipeline.meter_provider.shutdown,)),
        *pipeline.on_shutdown,
    ):
        try:
            shutdown()
        except Exception as exc:
            _logger.debug("cleanup after a failed setup raised %s: %s", type(exc).__name__, exc)
