"""`setup_telemetry` and the `TelemetryHandle` it returns.

One call per process decides whether the process exports (the export strategy), builds
the SDK pipeline if it does, and hands back the tracer and meter to record through.
`handle.tracer` and `handle.meter` come from the providers that call built, so whatever
OpenTelemetry's set-once globals already hold, everything recorded through the handle
reaches this setup's exporters. The globals are set too, for code that uses
`nemo.lens.get_meter()`.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import metrics, trace

from nemo.lens import _fork_hooks, _inheritance, _otel_env, _otel_internals, _shutdown, state
from nemo.lens._export_plan import ExportPlan, build_export_plan
from nemo.lens._otel_internals import ProxyMeterProvider
from nemo.lens._process import BuiltHere
from nemo.lens.config import NemoLensConfig, _check_cardinality_limit, _check_console_path
from nemo.lens.errors import LensTypeError, LensValueError
from nemo.lens.groups import SpanGroup, _resolve_configured, _strict_resolver_for
from nemo.lens.propagation import _install_w3c_propagator
from nemo.lens.strategies import ExportStrategy, _exports_once_per_node, get_export_strategy
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry._logs import LoggerProvider as ApiLoggerProvider
    from opentelemetry.util.types import AttributeValue

    from nemo.lens._sdk import MetricReader, SpanExporter
    from nemo.lens._sdk._pipeline import Pipeline

__all__ = ["TelemetryHandle", "setup_telemetry"]

_logger = logging.getLogger(__name__)

#: The scope name of `handle.tracer` and `handle.meter` (their scope version is lens's).
_INSTRUMENTATION_SCOPE = "nemo.lens"

# Private, but consumer tests reset it to allow another setup; read at each call.
_INITIALIZED: bool = False
# The handle of the enabled setup that set `_INITIALIZED`; its shutdown frees the guard.
_live_handle: TelemetryHandle | None = None
# Every global provider a setup of this process installed (the API's no-op ones included).
# OpenTelemetry's globals are set once; a setup that follows a finished one forgets these,
# so its own providers become the globals that the span helpers and get_meter() use.
# Weak: a provider forgotten elsewhere (`reset_otel_globals`) must not stay alive here,
# with its processors' at-fork handlers restarting threads in every later fork.
_lens_globals: weakref.WeakSet[object] = weakref.WeakSet()
# How long a shutdown waits for a setup running on another thread before it leaves the
# setup guard set (it then shuts down all the same).
_GUARD_RELEASE_WAIT_S = 1.0
# Re-entrant, so a custom export strategy that calls back into lens cannot deadlock.
_setup_lock = threading.RLock()


class _ShutdownOwner(NamedTuple):
    """The call that shut a handle down: its thread, its budget (ms), its process."""

    thread: int
    budget: int
    built: BuiltHere


class TelemetryHandle:
    """What `setup_telemetry` returns: the tracer and meter to record through.

    Args:
        tracer: Read back as `handle.tracer`.
        meter: Read back as `handle.meter`.
        is_exporting: Whether this process exports (a plain attribute).
    """

    def __init__(
        self, tracer: trace.Tracer, meter: metrics.Meter, is_exporting: bool = False
    ) -> None:
        self._tracer = tracer
        self._meter = meter
        self.is_exporting = is_exporting
        # Named by consumers; set once the shutdown work is about to start (never before
        # its budget was read), so a second call only waits for it.
        self._shutdown_done = False
        # "owner": the call that shuts down (its thread, budget, process); "run": its work
        # once built. Each is claimed by one `dict.setdefault`, a single step a signal
        # handler cannot land inside: whoever finds the claim taken finds its owner too.
        self._shutdown_claim: dict[str, Any] = {}
        # The providers an exporting setup built; None for a handle built by hand.
        self._pipeline: Pipeline | None = None
        # A no-op setup built nothing, so its flush and shutdown touch nothing.
        self._owns_nothing = False

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer to start spans with."""
        return self._tracer

    @property
    def meter(self) -> metrics.Meter:
        """The meter to pass to `record_metrics` or create instruments on."""
        return self._meter

    def get_meter(self, name: str, version: str | None = None) -> metrics.Meter:
        """A meter of this setup's provider under the caller's own scope; never raises.

        A framework passes its own name and version, so its series carry its scope
        rather than lens's. A no-op setup's handle gives a no-op meter, and so does the
        handle a forked child inherited (it never calls into its parent's providers); a
        handle built by hand, the global provider's.

        Args:
            name: The instrumentation scope, e.g. `"megatron.core"`.
            version: The scope's version, e.g. the framework's `__version__`.
        """
        try:
            if self._owns_nothing:
                return metrics.NoOpMeter(name, version=version)
            pipeline = self._pipeline
            if pipeline is not None and not pipeline.built.here():
                # A forked child: the parent's provider may hold a lock for good here, so
                # record_metrics reports to the parent instead (a ParentsMeter).
                return _parents_meter(pipeline, name, version)
            provider = None if pipeline is None else pipeline.meter_provider
            if provider is not None:
                return provider.get_meter(name, version)
            if pipeline is not None and pipeline.joined_parent is not None:
                return _inheritance.ParentsMeter(name, pipeline.joined_parent, version)
            instead = _inheritance.meter_instead_of_global(name, version)
            return metrics.get_meter(name, version or "") if instead is None else instead
        except Exception as exc:
            _logger.warning("get_meter(%r) failed: %s: %s", name, type(exc).__name__, exc)
            return metrics.NoOpMeter(name, version=version)

    def get_tracer(self, name: str, version: str | None = None) -> trace.Tracer:
        """A tracer of this setup's provider under the caller's own scope; never raises.

        As `get_meter`: a no-op setup's handle gives a no-op tracer; a handle built by
        hand, the global provider's.

        Args:
            name: The instrumentation scope, e.g. `"nemo_rl.algorithms"`.
            version: The scope's version.
        """
        try:
            if self._owns_nothing:
                return trace.NoOpTracer()
            pipeline = self._pipeline
            if pipeline is not None and not pipeline.built.here():
                return trace.NoOpTracer()  # a forked child, as in get_meter
            provider = None if pipeline is None else pipeline.tracer_provider
            if provider is not None:
                return provider.get_tracer(name, version)
            return trace.get_tracer(name, version)
        except Exception as exc:
            _logger.warning("get_tracer(%r) failed: %s: %s", name, type(exc).__name__, exc)
            return trace.NoOpTracer()

    def force_flush(self, timeout_ms: float | None = _shutdown.DEFAULT_TIMEOUT_MS) -> bool:
        """Export everything recorded so far, waiting at most about `timeout_ms`; never raises.

        Each signal flushes on its own thread against the same deadline. `timeout_ms` is
        read as `shutdown` reads it.

        Returns:
            True when every provider flushed in time; False otherwise, or after shutdown.
        """
        try:
            if self._shutdown_done:
                return False
            budget = _shutdown.budget_ms("force_flush", timeout_ms)
            return _shutdown.run_lanes("force_flush", self._lanes(shut_down=False), budget)
        except Exception as exc:
            _logger.warning("force_flush failed: %s: %s", type(exc).__name__, exc)
            return False

    def shutdown(self, timeout_ms: float | None = _shutdown.DEFAULT_TIMEOUT_MS) -> None:
        """Export what is left once, then shut down, within about `timeout_ms`; never raises.

        For a handle from an exporting setup these are the providers that setup built;
        a no-op setup's handle has none; a handle built by hand uses the current global
        providers. Spans still open are ended first, marked `nemo.span.truncated`.

        Each signal gets the whole budget on a thread of its own (metrics, then traces,
        then logs, where threads cannot start), so a traces collector that is down cannot
        starve the metrics export, and each exports once: the SDK's provider shutdown
        makes the last export itself. Whatever is unfinished at the deadline is abandoned
        with a warning on a daemon thread; after this returns, the process exits without
        waiting on any exporter (lens builds its providers with `shutdown_on_exit=False`).
        Once it has run, this process may call `setup_telemetry` again.

        `timeout_ms` is a number of milliseconds: None means the default (5000); a
        negative number means 0; anything above the maximum of 600000 (10 minutes),
        infinity included, means that maximum; NaN or a non-number means the default,
        with one warning. Once a call has claimed the shutdown, a later call (from another
        thread, or from a signal handler that interrupted this one) runs nothing twice:
        it starts the claimed work if that has not started yet, then waits for it to
        finish, at most its own `timeout_ms` and never past the running one's deadline.
        If the process exits while the shutdown runs (a SIGTERM handler calling
        `sys.exit`), exit waits for it, up to that shutdown's deadline.

        An exporting setup that is never shut down is shut down at interpreter exit by
        lens's own `atexit` hook, within 5000 ms: a forgotten `shutdown()` delays exit by
        at most about 5 seconds, whatever the collectors do.
        """
        try:
            budget = _shutdown.budget_ms("shutdown", timeout_ms)
            owner = _ShutdownOwner(threading.get_ident(), budget, BuiltHere())
            if self._shutdown_done or self._shutdown_claim.setdefault("owner", owner) is not owner:
                self._join_shutdown(budget)
                return
            self._shutdown_done = True
            self._mark_meters_finished()
            running = self._start_shutdown(budget)
            _shutdown.forget_at_exit(self)
            _release_init_guard(self)
            running.wait()
            if self._pipeline is not None:
                self._pipeline.report_dropped()
        except Exception as exc:
            _logger.warning("shutdown failed: %s: %s", type(exc).__name__, exc)

    def _mark_meters_finished(self) -> None:
        """From now on, recording on this setup's meters warns (once) that it is lost."""
        provider = None if self._pipeline is None else self._pipeline.meter_provider
        if provider is not None and self._pipeline is not None and self._pipeline.built.here():
            # Loaded already: the pipeline's build imported the metric registry.
            from nemo.lens.instruments import _finished

            _finished.mark_finished(provider)

    def _start_shutdown(self, budget: int) -> _shutdown.LaneRuns:
        """Start the shutdown work once, and have exit wait for it while it runs.

        Called by the call that claimed the shutdown, and by any later call that finds
        the work not built yet (a signal handler that interrupted the claiming call on its
        own thread, which cannot go on until the handler returns, or another thread): the
        first work stored is the one run, and starting it twice starts each lane once.
        """
        running: _shutdown.LaneRuns | None = self._shutdown_claim.get("run")
        if running is None:
            built = _shutdown.LaneRuns(
                "shutdown", self._lanes(shut_down=True), budget, exit_key=self
            )
            running = self._shutdown_claim.setdefault("run", built)
        # Again by every caller: a handler may have cut its builder short before this.
        _shutdown.wait_at_exit(running)
        running.start()
        return running

    def _join_shutdown(self, budget: int) -> None:
        """Wait for the running shutdown, at most `budget` ms and never past its deadline;
        takes no lock.

        Whoever claimed it may not have built its work yet (this call is a signal handler
        that interrupted it, or it is between two statements on another thread): then
        this call starts the work, with the claiming call's budget. A forked child never
        waits for, nor starts, its parent's shutdown.
        """
        owner: _ShutdownOwner | None = self._shutdown_claim.get("owner")
        if owner is None or not owner.built.here():
            return  # nobody is shutting this handle down (in this process)
        self._start_shutdown(owner.budget).join(budget)

    def _lanes(self, *, shut_down: bool) -> list[_shutdown.Lane]:
        pipeline = self._pipeline
        if pipeline is not None:
            return pipeline.shutdown_lanes() if shut_down else pipeline.flush_lanes()
        lanes: list[_shutdown.Lane] = []
        for provider, label, signal in self._providers():
            if shut_down:
                lanes.append((signal, _shutdown.final_export_steps(provider, label)))
            else:
                steps = _shutdown.provider_steps(provider, label, flush=True, shut_down=False)
                lanes.append((signal, steps))
        return lanes

    def _providers(self) -> list[tuple[object, str, str]]:
        """The global providers a hand-built handle acts on: (provider, label, signal)."""
        if self._owns_nothing:
            return []
        return [
            (metrics.get_meter_provider(), "meter provider", "metrics"),
            (trace.get_tracer_provider(), "tracer provider", "traces"),
        ]


#: Where the run id a process drew is handed to every process it starts (forked or not),
#: so the ranks and workers of one job outside Slurm and torchrun share `nemo.run.id`.
_JOB_RUN_ID_VARIABLE = "NEMO_LENS_JOB_RUN_ID"


def _job_run_id() -> str:
    """This job's run id: Slurm's job id, else torchrun's run id, else the one a parent
    process drew, else a new one (then handed to this process's children)."""
    for variable in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", _JOB_RUN_ID_VARIABLE):
        value = os.environ.get(variable, "").strip()
        # torchrun sets "none" when no rendezvous id was given: not a job's id.
        if value and not (variable == "TORCHELASTIC_RUN_ID" and value == "none"):
            return value
    drawn = uuid.uuid4().hex[:12]
    os.environ[_JOB_RUN_ID_VARIABLE] = drawn
    return drawn


def setup_telemetry(
    config: NemoLensConfig,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    resource_attributes: Mapping[str, AttributeValue] | None = None,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
    export_strategy: ExportStrategy | None = None,
    _allow_reinit: bool = False,
) -> TelemetryHandle:
    """Set up telemetry for this process and return the handle to record through.

    Args:
        config: What to set up; usually `NemoLensConfig.from_env(...)`.
        rank: This process's rank, given together with `world_size` or not at all.
            Omitted, the export strategy sees rank 0 of 1 and no `dl.rank` is written.
        world_size: The number of ranks.
        resource_attributes: Merged last into the resource, so they arrive unchanged.
        span_exporter: Replaces the configured span exporter (behind a batch processor).
        metric_reader: Replaces the configured metric reader.
        export_strategy: A callable `(config, rank, world_size) -> bool` used instead of
            the strategy `config.export_strategy` names.
        _allow_reinit: Testing only: allow a second enabled setup while one is live
            (`nemo.lens.testing.reset_init_guard()` is the public way).

    Returns:
        A handle. It exports (`is_exporting=True`) when the config is enabled, the
        strategy selects this process and `OTEL_SDK_DISABLED` is not `true`; otherwise
        its tracer and meter are no-ops.

    Raises:
        RuntimeError: An enabled setup is live in this process (one whose handle was
            not shut down).
        ValueError: A bad rank or world size, an unknown strategy or exporter, an
            `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` / `OTEL_LOGS_EXPORTER` lens
            does not support, an unknown span group (strict resolvers), a negative
            `metric_cardinality_limit`, or a malformed `OTEL_METRIC_EXPORT_INTERVAL`,
            `OTEL_BSP_*` variable, `OTEL_EXPORTER_PROMETHEUS_PORT` or `LOCAL_RANK`.
        TypeError: The configuration's span-group class (`from_env(span_group_cls=...)`)
            is not a `SpanGroup` subclass, `console_path` is not a str, or
            `export_strategy` is not callable.
        ImportError: An exporting process lacks the SDK or the configured exporter.
    """
    global _INITIALIZED, _live_handle
    with _setup_lock:
        if _INITIALIZED and config.enabled and not _allow_reinit:
            raise RuntimeError(
                "nemo.lens telemetry has already been initialised for this process; call "
                "setup_telemetry once per process, or shut the earlier handle down first "
                "(handle.shutdown()). In tests, call nemo.lens.testing.reset_init_guard() "
                "(_allow_reinit=True is for tests only)"
            )
        checked_rank, checked_world_size = _check_rank(rank, world_size)
        if not config.run_id:
            config.run_id = _job_run_id()
        selected = _export_decision(
            config,
            export_strategy,
            0 if checked_rank is None else checked_rank,
            1 if checked_world_size is None else checked_world_size,
        )
        strict_groups: frozenset[str] | None = None
        plan: ExportPlan | None = None
        disabled_by_env = False
        if config.enabled:
            _check_console_path(config.console_path, config._label("console_path"))
            _check_cardinality_limit(
                config.metric_cardinality_limit, config._label("metric_cardinality_limit")
            )
            # Built on every rank, before anything: building it checks every setting.
            injected = {"traces": span_exporter, "metrics": metric_reader}
            plan = build_export_plan(
                config,
                one_exporter_per_node=_exports_once_per_node(
                    config.export_strategy, custom=export_strategy is not None
                ),
                injected=frozenset(s for s, given in injected.items() if given is not None),
            )
            strict_groups = _strict_span_groups(config)
            disabled_by_env = _sdk_disabled_by_env(selected)
        if plan is None or not selected or disabled_by_env:
            handle = _no_op_setup()
        else:
            handle = _exporting_setup(
                config,
                plan,
                strict_groups,
                rank=checked_rank,
                world_size=checked_world_size,
                resource_attributes=resource_attributes,
                span_exporter=span_exporter,
                metric_reader=metric_reader,
            )
        if config.enabled:
            _INITIALIZED = True
            _live_handle = handle
        return handle


def _sdk_disabled_by_env(selected: bool) -> bool:
    """True when `OTEL_SDK_DISABLED=true`; logs why on a process that would have exported."""
    disabled, problem = _otel_env.sdk_disabled()
    if problem is not None:
        _logger.warning("%s", problem)
    if disabled and selected:
        _logger.warning(
            "OTEL_SDK_DISABLED=true: nemo.lens builds no telemetry pipeline in this process "
            "(nothing is exported, no port is bound; the handle is a no-op)"
        )
    return disabled


def _release_init_guard(handle: TelemetryHandle) -> None:
    """`handle` was shut down: if it is the live setup's, another setup may follow.

    Bounded: a shutdown (at exit, from a signal handler) must not wait for ever on a setup
    another thread is stuck in (a custom strategy waiting on a collective, say); then the
    guard simply stays set.
    """
    global _INITIALIZED, _live_handle
    if not _setup_lock.acquire(timeout=_GUARD_RELEASE_WAIT_S):
        return
    try:
        if _live_handle is handle:
            _INITIALIZED = False
            _live_handle = None
    finally:
        _setup_lock.release()


def _check_rank(rank: object, world_size: object) -> tuple[int | None, int | None]:
    if rank is None and world_size is None:
        return None, None
    if rank is None or world_size is None:
        raise LensValueError(
            f"setup_telemetry: rank and world_size must be given together or not at all, "
            f"got rank={rank!r}, world_size={world_size!r}"
        )
    checked_world_size = _as_int("world_size", world_size, "an integer >= 1")
    if checked_world_size < 1:
        raise LensValueError(
            f"setup_telemetry: world_size must be an integer >= 1, got {world_size!r}"
        )
    checked_rank = _as_int("rank", rank, f"an integer in [0, {checked_world_size})")
    if not 0 <= checked_rank < checked_world_size:
        raise LensValueError(
            f"setup_telemetry: rank must be an integer with 0 <= rank < world_size "
            f"({checked_world_size}), got {rank!r}"
        )
    return checked_rank, checked_world_size


def _as_int(name: str, value: Any, accepted: str) -> int:
    if isinstance(value, bool):
        raise LensValueError(f"setup_telemetry: {name} must be {accepted}, got a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError as exc:
        raise LensValueError(
            f"setup_telemetry: {name} must be {accepted}, got {type(value).__name__} ({value!r})"
        ) from exc


def _export_decision(
    config: NemoLensConfig, strategy: ExportStrategy | None, rank: int, world_size: int
) -> bool:
    if strategy is None:
        strategy = get_export_strategy(config.export_strategy)
    elif not callable(strategy):
        raise LensTypeError(
            "setup_telemetry: export_strategy must be a callable (config, rank, world_size) "
            f"-> bool or None, got {type(strategy).__name__} ({strategy!r})"
        )
    return bool(strategy(config, rank, world_size))


def _strict_span_groups(config: NemoLensConfig) -> frozenset[str] | None:
    """Resolve `span_groups` now on the strict path (so a typo fails on every rank)."""
    span_group_cls = config._span_group_cls
    if span_group_cls is not None and not (
        isinstance(span_group_cls, type) and issubclass(span_group_cls, SpanGroup)
    ):
        raise LensTypeError(
            "NemoLensConfig._span_group_cls must be a SpanGroup subclass or None, got "
            f"{span_group_cls!r}"
        )
    strict = _strict_resolver_for(span_group_cls)
    if strict is None:
        return None
    return _resolve_configured(strict, config.span_groups, config._env_source("span_groups"))


def _no_op_setup() -> TelemetryHandle:
    # Install the API's no-op providers only where nothing is installed yet: a refused
    # set-once would only log OpenTelemetry's override warning on every repeated setup.
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _set_global(
            trace.set_tracer_provider, trace.get_tracer_provider, trace.NoOpTracerProvider()
        )
    if isinstance(metrics.get_meter_provider(), ProxyMeterProvider):
        _set_global(
            metrics.set_meter_provider, metrics.get_meter_provider, metrics.NoOpMeterProvider()
        )
    state.set_enabled_span_groups(frozenset())
    handle = TelemetryHandle(
        trace.NoOpTracer(),
        metrics.NoOpMeter(_INSTRUMENTATION_SCOPE, version=__version__),
        is_exporting=False,
    )
    # Built nothing, so its flush and shutdown touch nothing (not someone else's globals).
    handle._owns_nothing = True
    return handle


def _exporting_setup(
    config: NemoLensConfig,
    plan: ExportPlan,
    strict_groups: frozenset[str] | None,
    *,
    rank: int | None,
    world_size: int | None,
    resource_attributes: Mapping[str, AttributeValue] | None,
    span_exporter: SpanExporter | None,
    metric_reader: MetricReader | None,
) -> TelemetryHandle:
    # The SDK is imported only now, by the one setup that builds SDK objects.
    try:
        from nemo.lens._sdk._pipeline import build_pipeline
    except ImportError as exc:
        raise ImportError(
            "setup_telemetry: an exporting process needs the OpenTelemetry SDK; "
            f"{_otel_env.install_hint(_otel_env.SDK_EXTRA)} ({exc})"
        ) from exc

    pipeline = build_pipeline(
        config,
        plan,
        rank=rank,
        world_size=world_size,
        resource_attributes=resource_attributes,
        span_exporter=span_exporter,
        metric_reader=metric_reader,
        instrumentation_scope=_INSTRUMENTATION_SCOPE,
    )
    _forget_finished_globals()
    if pipeline.tracer_provider is not None:
        _set_global(trace.set_tracer_provider, trace.get_tracer_provider, pipeline.tracer_provider)
        tracer = pipeline.tracer_provider.get_tracer(_INSTRUMENTATION_SCOPE, __version__)
        if trace.get_tracer_provider() is not pipeline.tracer_provider:
            _warn_global_kept("tracer", "trace.get_tracer()")
    else:
        tracer = trace.get_tracer(_INSTRUMENTATION_SCOPE, __version__)
    if pipeline.meter_provider is not None:
        _set_global(metrics.set_meter_provider, metrics.get_meter_provider, pipeline.meter_provider)
        meter = pipeline.meter_provider.get_meter(_INSTRUMENTATION_SCOPE, __version__)
        if metrics.get_meter_provider() is not pipeline.meter_provider:
            _warn_global_kept("meter", "metrics.get_meter()")
    elif pipeline.joined_parent is not None:
        meter = _inheritance.ParentsMeter(
            _INSTRUMENTATION_SCOPE, pipeline.joined_parent, __version__
        )
    else:
        instead = _inheritance.meter_instead_of_global(_INSTRUMENTATION_SCOPE, __version__)
        meter = (
            metrics.get_meter(_INSTRUMENTATION_SCOPE, __version__) if instead is None else instead
        )
    if pipeline.logger_provider is not None:
        _install_logger_provider(pipeline.logger_provider)
    _install_w3c_propagator()
    if strict_groups is None:
        state._set_configured_span_group_spec(config.span_groups, config._env_source("span_groups"))
    else:
        state.set_enabled_span_groups(strict_groups)
    handle = TelemetryHandle(tracer, meter, is_exporting=True)
    handle._pipeline = pipeline
    # The providers do not shut themselves down at exit; lens does, within a bound.
    _shutdown.shutdown_at_exit(handle, handle.shutdown)
    return handle


def _parents_meter(pipeline: Pipeline, name: str, version: str | None) -> metrics.Meter:
    """In a forked child, `handle.get_meter(name)` of the parent's handle: a meter through
    which record_metrics reports to that pipeline, or a no-op where it does not take this
    child's values (its provider is never called here)."""
    consumer = _otel_internals.provider_consumer(pipeline.meter_provider)
    if consumer is None and pipeline.joined_parent is not None:
        consumer = pipeline.joined_parent
    return _inheritance.ParentsMeter(name, consumer, version)


def _install_logger_provider(provider: ApiLoggerProvider) -> None:
    # OpenTelemetry's logs API lives in `opentelemetry._logs` (it is public, if still
    # marked experimental by the underscore); `setup_logging_bridge` reads it back.
    from opentelemetry import _logs

    _inheritance.note_logger_provider(provider)
    if _inheritance.is_inherited_logger_provider(_logs.get_logger_provider()):
        # A forked child setting up its own pipeline: the global provider is its parent's,
        # which exports nothing here, and logs have no handle-level provider to fall back on.
        _otel_internals.forget_global_logger_provider()
    _set_global(_logs.set_logger_provider, _logs.get_logger_provider, provider)
    if _logs.get_logger_provider() is not provider:
        _logger.warning(
            "OpenTelemetry's global logger provider was already set and cannot be replaced; "
            "setup_logging_bridge() and logging records keep going to the earlier one"
        )


def _set_global(
    install: Callable[[Any], None], current: Callable[[], object], provider: object
) -> None:
    """Install `provider` as a global and remember it as lens's, if the API took it."""
    install(provider)
    if current() is provider:
        _lens_globals.add(provider)


def _forget_finished_globals() -> None:
    """Forget each global provider an earlier, finished setup of lens installed.

    Called by an exporting setup (under the setup lock) before it installs its own
    providers. A provider the live handle still uses (a test's `_allow_reinit` setup) is
    kept; so is any provider lens did not install.
    """
    live_pipeline = None if _live_handle is None else _live_handle._pipeline
    live = (
        []
        if live_pipeline is None
        else [
            live_pipeline.tracer_provider,
            live_pipeline.meter_provider,
            live_pipeline.logger_provider,
        ]
    )
    forget = {
        "tracer provider": _otel_internals.forget_global_tracer_provider,
        "meter provider": _otel_internals.forget_global_meter_provider,
        "logger provider": _otel_internals.forget_global_logger_provider,
    }
    for provider, label in _otel_internals.installed_global_providers():
        if provider is None or any(provider is mine for mine in live):
            continue
        if provider in _lens_globals:
            forget[label]()
            _lens_globals.discard(provider)


def _warn_global_kept(signal: str, accessor: str) -> None:
    _logger.warning(
        "OpenTelemetry's global %s provider was already set and cannot be replaced; "
        "handle.%s records through the provider this setup built, but %s and "
        "nemo.lens.get_%s() keep returning the earlier global one",
        signal,
        signal,
        accessor,
        signal,
    )


def _reset_in_child() -> None:
    # A forked child is a new process: it may set up its own pipeline.
    global _INITIALIZED, _live_handle, _setup_lock
    _INITIALIZED = False
    _live_handle = None
    _setup_lock = threading.RLock()


_fork_hooks.register("setup guard", after_in_child=_reset_in_child)
