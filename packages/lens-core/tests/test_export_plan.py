"""The export plan: `lens doctor` and `setup_telemetry` agree on every signal's destination.

For every combination of the per-signal exporter variables, the configured exporter, logs
on or off and the OTLP endpoint variables, this builds what setup really builds (the SDK's
exporters and readers, caught as the pipeline creates them) and reads what `lens doctor`
prints, and compares the two per signal: which kind of exporter, and which address.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens._export_plan import build_export_plan
from nemo.lens._otlp_secrets import endpoint_host_and_port
from nemo.lens._sdk import _exporters
from nemo.lens.cli import _doctor
from nemo.lens.testing import isolated_telemetry

PREFIX = "AGREE_OTEL"
UNSET = None
SIGNAL_VALUES = {
    "traces": (UNSET, "none", "otlp", "console"),
    "metrics": (UNSET, "none", "otlp", "console", "prometheus"),
    "logs": (UNSET, "none", "otlp", "console"),
}
# Nothing listens on these ports; no test here waits for an export to arrive.
ENDPOINTS: tuple[dict[str, str], ...] = (
    {},
    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:19"},
)
# A destination: ("otlp", transport, host, port), ("console", path), ("prometheus", host).
Destination = tuple[object, ...]


def _environments(exporter: str, logs: bool) -> Iterator[dict[str, str]]:
    for (traces, metrics, log_exporter), endpoints in itertools.product(
        itertools.product(*SIGNAL_VALUES.values()), ENDPOINTS
    ):
        environ = {
            f"{PREFIX}_ENABLED": "1",
            f"{PREFIX}_EXPORTER": exporter,
            f"{PREFIX}_LOGS_ENABLED": "1" if logs else "0",
            # Exports to a closed port give up at once instead of retrying for 10 s.
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OTEL_EXPORTER_PROMETHEUS_PORT": "0",
            **endpoints,
        }
        for signal, value in zip(SIGNAL_VALUES, (traces, metrics, log_exporter), strict=True):
            if value is not UNSET:
                environ[f"OTEL_{signal.upper()}_EXPORTER"] = value
        yield environ


def _otlp_destination(exporter: Any) -> Destination:
    """Transport and address of a real OTLP exporter (the SDK keeps its endpoint in
    `_endpoint`: `host:port` for gRPC, the signal's URL for HTTP)."""
    transport = "grpc" if ".grpc." in type(exporter).__module__ else "http"
    endpoint = re.sub(r"/v1/\w+$", "", exporter._endpoint)
    return ("otlp", transport, *endpoint_host_and_port(endpoint))


def _setup_destinations(monkeypatch: pytest.MonkeyPatch) -> dict[str, Destination]:
    """Set up for real and return what each signal's exporter really is."""
    built: dict[str, Destination] = {}

    def caught(signal: str, build: Any) -> Any:
        def spy(plan: Any, *args: Any) -> Any:
            made = build(plan, *args)
            exporter = getattr(made, "_exporter", made)  # a periodic reader's exporter
            name = type(exporter).__name__
            if name.startswith("OTLP"):
                built[signal] = _otlp_destination(exporter)
            elif name.startswith("OtlpJson"):
                built[signal] = ("console", plan.console_path)
            elif name == "PrometheusMetricReader":
                built[signal] = ("prometheus", plan.prometheus_address[0])
            return made

        return spy

    monkeypatch.setattr(
        _exporters, "build_span_exporter", caught("traces", _exporters.build_span_exporter)
    )
    monkeypatch.setattr(
        _exporters, "build_metric_reader", caught("metrics", _exporters.build_metric_reader)
    )
    monkeypatch.setattr(
        _exporters, "build_log_exporter", caught("logs", _exporters.build_log_exporter)
    )
    handle = setup_telemetry(NemoLensConfig.from_env(prefix=PREFIX))
    try:
        assert handle.is_exporting
    finally:
        handle.shutdown(timeout_ms=2000)
        monkeypatch.undo()
    return built


_OTLP_LINE = re.compile(
    r"OTLP (?P<protocol>\S+) endpoint (?P<endpoint>\S+) \((?P<signals>[^)]*)\)"
    r"(, sent over (?P<transport>\w+))?"
)
_CONSOLE_LINE = re.compile(r"console exporter writes OTLP/JSON lines to (\S+) \(([^)]*)\)")
_PROMETHEUS_LINE = re.compile(r"prometheus can serve http://([^:/]+):\d+/metrics")


def _doctor_destinations(environ: dict[str, str]) -> dict[str, Destination]:
    """What `lens doctor`'s report says each signal's destination is."""
    report = _doctor.Report()
    config = NemoLensConfig.from_env(prefix=PREFIX)
    plans = _doctor._plan_signals(report, config, PREFIX, environ)
    _doctor._check_endpoints(report, plans, timeout=0.05, idle=None)
    found: dict[str, Destination] = {}
    for line in report.lines:
        if match := _OTLP_LINE.search(line):
            protocol = match["protocol"]
            transport = match["transport"] or ("http" if protocol.startswith("http") else "grpc")
            address = endpoint_host_and_port(match["endpoint"])
            for signal in match["signals"].split(", "):
                found[signal] = ("otlp", transport, *address)
        elif match := _CONSOLE_LINE.search(line):
            path = "" if match[1] == "stdout" else match[1].strip("'")
            for signal in match[2].split(", "):
                found[signal] = ("console", path)
        elif match := _PROMETHEUS_LINE.search(line):
            found["metrics"] = ("prometheus", match[1])
    assert report.problems == [] or all("not reachable" in p for p in report.problems), (
        report.problems
    )
    return found


#: The default run checks every SAMPLE_STRIDE-th combination (a stride coprime with each
#: variable's count, so every value of each variable is met); the soak run checks all.
SAMPLE_STRIDE = 7


def _disagreements(
    monkeypatch: pytest.MonkeyPatch, environments: list[dict[str, str]]
) -> list[tuple[dict[str, str], dict[str, Destination], dict[str, Destination]]]:
    """(environment, doctor's destinations, setup's) wherever the two differ."""
    disagreements = []
    for environ in environments:
        with isolated_telemetry(), monkeypatch.context() as patch:
            for name in [name for name in os.environ if name.startswith(("OTEL_", PREFIX))]:
                patch.delenv(name)
            for name, value in environ.items():
                patch.setenv(name, value)
            doctor = _doctor_destinations(environ)
            setup = _setup_destinations(patch)
        if doctor != setup:
            disagreements.append((environ, doctor, setup))
    return disagreements


@pytest.mark.soak
@pytest.mark.parametrize("logs", [True, False], ids=["logs-on", "logs-off"])
@pytest.mark.parametrize("exporter", ["otlp", "console", "prometheus"])
def test_doctor_and_setup_agree_on_every_signal_s_destination(
    monkeypatch: pytest.MonkeyPatch, exporter: str, logs: bool
) -> None:
    """Every combination of OTEL_{TRACES,METRICS,LOGS}_EXPORTER (unset, none, each
    exporter) and the OTLP endpoint variables, for this PREFIX_EXPORTER and logs setting:
    the destinations doctor reports are exactly those setup builds."""
    environments = list(_environments(exporter, logs))
    assert len(environments) == 4 * 5 * 4 * len(ENDPOINTS)
    assert _disagreements(monkeypatch, environments) == []


@pytest.mark.parametrize("logs", [True, False], ids=["logs-on", "logs-off"])
@pytest.mark.parametrize("exporter", ["otlp", "console", "prometheus"])
def test_doctor_and_setup_agree_on_a_sample_of_the_combinations(
    monkeypatch: pytest.MonkeyPatch, exporter: str, logs: bool
) -> None:
    """The same check on every SAMPLE_STRIDE-th combination (the soak run checks all)."""
    environments = list(_environments(exporter, logs))[::SAMPLE_STRIDE]
    for variable in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"):
        assert len({environ.get(variable) for environ in environments}) >= 4, variable
    assert _disagreements(monkeypatch, environments) == []


def test_logs_beside_a_prometheus_pull_go_over_otlp_only_with_an_otlp_logs_endpoint() -> None:
    """Prometheus serves metrics only: logs take OTLP when an OTLP logs endpoint is set (both
    setup and doctor, from the one plan), else go nowhere with one note."""
    config = NemoLensConfig(enabled=True, exporter="prometheus", logs_enabled=True)
    with_endpoint = build_export_plan(
        config, environ={"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://collector:4318"}
    )
    logs = with_endpoint.get("logs")
    assert logs is not None
    assert logs.otlp is not None
    assert (logs.exporter, logs.otlp.endpoint) == ("otlp", "http://collector:4318")

    without = build_export_plan(config, environ={})
    assert without.get("logs") is None
    (note,) = without.notes
    assert "Prometheus serves metrics only and no OTLP logs endpoint is set" in note
