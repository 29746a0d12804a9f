"""`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER` and `OTEL_LOGS_EXPORTER`, per signal.

Each case runs setup in a child interpreter whose environment holds only the variables
the case sets (lens_children strips every inherited `OTEL_*`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from lens_children import run_child

from nemo.lens import _otel_env
from nemo.lens.errors import LensValueError

_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
from nemo.lens import NemoLensConfig, setup_telemetry
outcome = {"error": None}
try:
    handle = setup_telemetry(NemoLensConfig(enabled=True, exporter=sys.argv[1], logs_enabled=True))
except Exception as exc:
    outcome["error"] = [type(exc).__name__, str(exc)]
else:
    pipeline = handle._pipeline
    outcome["traces"] = pipeline.tracer_provider is not None
    outcome["metrics"] = pipeline.meter_provider is not None
    outcome["logs"] = pipeline.logger_provider is not None
    # lens keeps a pull reader (Prometheus) aside, to flush it before shutdown.
    pulled = [type(reader).__name__ for reader in pipeline.readers_to_flush]
    outcome["reader"] = (
        None if pipeline.meter_provider is None
        else (pulled[0] if pulled else "PeriodicExportingMetricReader")
    )
    handle.shutdown(timeout_ms=500)
print(json.dumps(outcome))
"""


def setup_with(exporter: str, **variables: str) -> dict[str, Any]:
    """Set lens up in a child with `exporter` and `variables`; what it built."""
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        "OTEL_EXPORTER_PROMETHEUS_PORT": "0",
        **variables,
    }
    run = run_child(_CHILD, environ, 120, exporter)
    assert run.returncode == 0, run.stderr
    outcome: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return outcome


def test_none_turns_each_signal_off_alone() -> None:
    """`none` in one signal's variable builds nothing for that signal and keeps the others."""
    outcome = setup_with("otlp", OTEL_TRACES_EXPORTER="none", OTEL_LOGS_EXPORTER="NONE")
    assert outcome["error"] is None
    assert (outcome["traces"], outcome["metrics"], outcome["logs"]) == (False, True, False)
    outcome = setup_with("otlp", OTEL_METRICS_EXPORTER="none")
    assert (outcome["traces"], outcome["metrics"], outcome["logs"]) == (True, False, True)


def test_a_signal_variable_selects_that_signal_over_the_lens_exporter() -> None:
    """OTEL_METRICS_EXPORTER=prometheus with <PREFIX>_EXPORTER=otlp: metrics pull, rest OTLP."""
    outcome = setup_with("otlp", OTEL_METRICS_EXPORTER="prometheus")
    assert outcome["error"] is None
    assert outcome["reader"] == "PrometheusMetricReader"
    assert outcome["traces"] is True
    outcome = setup_with("prometheus", OTEL_METRICS_EXPORTER="console")
    assert outcome["reader"] == "PeriodicExportingMetricReader"


def test_an_unset_or_blank_variable_leaves_the_lens_exporter_in_charge() -> None:
    """A blank OTEL_METRICS_EXPORTER counts as unset: <PREFIX>_EXPORTER decides."""
    outcome = setup_with("prometheus", OTEL_METRICS_EXPORTER="  ")
    assert outcome["error"] is None
    assert outcome["reader"] == "PrometheusMetricReader"


@pytest.mark.parametrize(
    ("variable", "value", "hint"),
    [
        ("OTEL_TRACES_EXPORTER", "prometheus", "Prometheus serves metrics only"),
        ("OTEL_LOGS_EXPORTER", "zipkin", "'none', 'otlp', 'console'"),
        ("OTEL_METRICS_EXPORTER", "otlp,console", "one exporter per signal"),
    ],
)
def test_an_unsupported_value_fails_setup_naming_the_variable(
    variable: str, value: str, hint: str
) -> None:
    """An exporter lens cannot build for that signal is a LensValueError naming the variable."""
    outcome = setup_with("otlp", **{variable: value})
    assert outcome["error"] is not None
    kind, message = outcome["error"]
    assert kind == "LensValueError"
    assert variable in message
    assert repr(value) in message
    assert hint in message


def test_the_rule_reads_the_variable_before_the_configured_exporter() -> None:
    """signal_exporter: the variable (any case) wins; unset gives the configured exporter."""
    assert _otel_env.signal_exporter("traces", "otlp", {}) == "otlp"
    assert _otel_env.signal_exporter("traces", "otlp", {"OTEL_TRACES_EXPORTER": "Console"}) == (
        "console"
    )
    with pytest.raises(LensValueError, match="OTEL_LOGS_EXPORTER"):
        _otel_env.signal_exporter("logs", "otlp", {"OTEL_LOGS_EXPORTER": "prometheus"})
