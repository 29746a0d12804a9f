"""The export plan: which exporter each signal uses, with which settings, decided once.

`setup_telemetry` builds the plan on every enabled rank, and building it is the validation:
each bad setting raises there, naming its variable. The SDK pipeline then builds exactly
what the plan says, and `lens doctor` builds the same plan and probes exactly its
destinations, so the two cannot disagree. Nothing here imports the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NamedTuple

from nemo.lens import _otel_env, _value_limits, propagation
from nemo.lens._otel_env import BatchSpanSettings, OtlpTarget
from nemo.lens._value_limits import ValueLimits

if TYPE_CHECKING:
    from nemo.lens.config import NemoLensConfig

#: The signals in the order setup builds them.
SIGNALS: Final = ("traces", "metrics", "logs")
#: `SignalPlan.exporter` for a signal whose exporter the caller of setup handed in.
INJECTED: Final = "injected"


class SignalPlan(NamedTuple):
    """Where one signal goes, and the settings its exporter is built with.

    Only the fields of its `exporter` are set: `otlp` for OTLP, `console_path` for the
    console ("" is standard output), `prometheus_address` for a Prometheus pull (traces
    beside a Prometheus pull keep a tracer provider and export nothing); a metrics
    plan that pushes has `interval_ms` and `timeout_ms`, a traces or logs plan its batch
    settings.
    """

    signal: str
    #: "otlp", "console", "prometheus", or `INJECTED` (setup's span_exporter/metric_reader).
    exporter: str
    #: What chose the exporter: `OTEL_TRACES_EXPORTER`, or the config field's label.
    chosen_by: str
    otlp: OtlpTarget | None = None
    console_path: str = ""
    console_label: str = "NemoLensConfig.console_path"
    prometheus_address: tuple[str, int] | None = None
    interval_ms: int = 0
    timeout_ms: float = 0.0
    batch: BatchSpanSettings | None = None
    #: A traces or logs plan's value length limits (`OTEL_*_LIMIT`, else lens's defaults).
    value_limits: ValueLimits | None = None

    def destination(self) -> str:
        """Where the signal goes, in words (`lens doctor` prints it)."""
        if self.otlp is not None:
            return f"OTLP over {self.otlp.transport} to {self.otlp.endpoint}"
        if self.exporter == "console":
            return (
                f"OTLP/JSON lines to {self.console_path!r}"
                if self.console_path
                else ("OTLP/JSON lines on stdout")
            )
        if self.prometheus_address is not None:
            host, port = self.prometheus_address
            return f"a Prometheus endpoint at http://{host}:{port}/metrics"
        if self.exporter == "prometheus":
            return "nowhere (Prometheus serves metrics only)"
        return "the exporter handed to setup_telemetry"


class ExportPlan(NamedTuple):
    """Each exporting signal's plan (a signal that exports nothing has none), and the
    warnings building it found: settings the exporters accept but read otherwise than a
    user may mean, logged once when the pipeline is built."""

    signals: Mapping[str, SignalPlan]
    warnings: tuple[str, ...] = ()
    #: What a user may wonder about, logged at INFO (logs with nowhere to go).
    notes: tuple[str, ...] = ()

    def get(self, signal: str) -> SignalPlan | None:
        return self.signals.get(signal)


def signal_exporter(
    signal: str, config: NemoLensConfig, environ: Mapping[str, str] | None = None
) -> str:
    """The exporter name `signal` uses: `OTEL_<SIGNAL>_EXPORTER` over `config.exporter`.

    Raises:
        ValueError: The variable names an exporter lens does not build for that signal.
    """
    return _otel_env.signal_exporter(signal, config.exporter, environ, config._label("exporter"))


def plan_signal(
    signal: str,
    exporter: str,
    config: NemoLensConfig,
    *,
    environ: Mapping[str, str] | None = None,
    one_exporter_per_node: bool = True,
    injected: bool = False,
    warnings: list[str] | None = None,
    notes: list[str] | None = None,
) -> SignalPlan | None:
    """The plan of one signal whose exporter name is `exporter`; None when it exports
    nothing (off in the config, `none`, or logs beside a Prometheus pull with no OTLP logs
    endpoint). `injected`: setup was handed this signal's exporter or reader. Warnings the
    settings earn are appended to `warnings`, notes (INFO) to `notes`.

    Raises:
        ValueError: A setting of the chosen exporter is bad; the message names it.
    """
    enabled = {
        "traces": config.traces_enabled,
        "metrics": config.metrics_enabled,
        "logs": config.logs_enabled,
    }[signal]
    if not enabled or (exporter == "none" and not injected):
        return None
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    chosen_by = variable if exporter != config.exporter else config._label("exporter")
    found = [] if warnings is None else warnings
    batch, limits = None, None
    if signal in ("traces", "logs"):
        read = _otel_env.batch_span_settings if signal == "traces" else _otel_env.batch_log_settings
        batch = read(environ)
        limits = _value_limits.value_limits(environ)
    if injected:
        return SignalPlan(
            signal, INJECTED, "setup_telemetry's argument", batch=batch, value_limits=limits
        )
    if signal == "logs" and exporter == "prometheus":
        # Prometheus serves metrics only: logs go over OTLP when an OTLP logs endpoint is
        # set, else nowhere.
        if _otel_env.otlp_endpoint_variable("logs", environ) is None:
            if notes is not None:
                notes.append(
                    "logs_enabled with exporter 'prometheus': Prometheus serves metrics only "
                    "and no OTLP logs endpoint is set (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or "
                    "OTEL_EXPORTER_OTLP_ENDPOINT), so log records are not exported"
                )
            return None
        exporter, chosen_by = "otlp", f"{chosen_by} (Prometheus serves metrics only)"
    plan = SignalPlan(signal, exporter, chosen_by, batch=batch, value_limits=limits)
    if exporter == "otlp":
        plan = plan._replace(otlp=_otlp_target(signal, environ, found))
    elif exporter == "console":
        plan = plan._replace(
            console_path=config.console_path, console_label=config._label("console_path")
        )
    elif exporter == "prometheus":
        if signal == "traces":
            # A tracer provider with no exporter: spans still carry ids and propagate.
            return plan
        address = _otel_env.prometheus_serving_address(
            one_exporter_per_node=one_exporter_per_node, environ=environ
        )
        return plan._replace(prometheus_address=address)
    if signal == "metrics":
        timeout_ms, problem = _otel_env.metric_export_timeout_ms(environ)
        if problem is not None:
            found.append(problem)
        plan = plan._replace(
            interval_ms=_otel_env.metric_export_interval_ms(environ), timeout_ms=timeout_ms
        )
    return plan


def _otlp_target(signal: str, environ: Mapping[str, str] | None, warnings: list[str]) -> OtlpTarget:
    """Where `signal` goes over OTLP: the transport its protocol asks for, or the other one
    when only that is installed (a warning says so); with neither installed, the asked-for
    one, and building the exporter raises ImportError."""
    preferred = _otel_env.otlp_transports(signal, environ)[0]
    transport = _otel_env.otlp_transport_in_use(signal, environ) or preferred
    if transport != preferred:
        warnings.append(
            f"OTLP {signal}: protocol {_otel_env.otlp_protocol(signal, environ)!r} asked for "
            f"the {preferred} exporter, which is not installed; exporting over {transport} "
            f"instead ({_otel_env.install_hint(_otel_env.SDK_EXTRA)})"
        )
    (target,) = _otel_env.otlp_targets((signal,), environ, transports={signal: transport})
    warnings.extend(_otel_env.check_otlp_settings(signal, transport, environ))
    return target


def build_export_plan(
    config: NemoLensConfig,
    *,
    environ: Mapping[str, str] | None = None,
    one_exporter_per_node: bool = True,
    injected: frozenset[str] = frozenset(),
) -> ExportPlan:
    """The plan `config` and the environment give, every setting checked.

    `injected` names the signals whose exporter setup was handed (`span_exporter` ->
    "traces", `metric_reader` -> "metrics"): their exporter settings are not read.

    Raises:
        ValueError: Any bad exporter name or setting; the message names the variable.
    """
    _otel_env.check_exporter_name(config.exporter, config._label("exporter"))
    propagation._check_propagators(environ)
    # Every signal's variable is read, enabled or not, so a typo fails on every rank.
    exporters = {signal: signal_exporter(signal, config, environ) for signal in SIGNALS}
    warnings: list[str] = []
    notes: list[str] = []
    signals: dict[str, SignalPlan] = {}
    for signal in SIGNALS:
        plan = plan_signal(
            signal,
            exporters[signal],
            config,
            environ=environ,
            one_exporter_per_node=one_exporter_per_node,
            injected=signal in injected,
            warnings=warnings,
            notes=notes,
        )
        if plan is not None:
            signals[signal] = plan
    return ExportPlan(signals, tuple(dict.fromkeys(warnings)), tuple(notes))
