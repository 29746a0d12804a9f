"""`console_path` / `<PREFIX>_CONSOLE_PATH` and `metric_cardinality_limit` /
`<PREFIX>_METRIC_CARDINALITY_LIMIT`, and the one metrics export at shutdown.

The environment cases run lens in a child interpreter with only the variables they set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lens_otlp_json
import pytest
from lens_children import run_child

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.errors import LensTypeError, LensValueError
from nemo.lens.testing import isolated_telemetry

_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
from nemo.lens import NemoLensConfig, setup_telemetry
outcome = {"error": None}
try:
    config = NemoLensConfig.from_env("TRAINER_OTEL")
    outcome["console_path"] = config.console_path
    outcome["limit"] = config.metric_cardinality_limit
    config.enabled = True
    handle = setup_telemetry(config)
    from nemo.lens.instruments import _cardinality
    outcome["applied_limit"] = _cardinality.limit
except Exception as exc:
    outcome["error"] = [type(exc).__name__, str(exc)]
else:
    counter = handle.meter.create_counter("child.steps")
    for _ in range(10):
        counter.add(1)
    with handle.tracer.start_as_current_span("child-span"):
        pass
    handle.shutdown(timeout_ms=5000)
print(json.dumps(outcome))
"""


def run_with(**variables: str) -> tuple[dict[str, Any], str, str]:
    """from_env("TRAINER_OTEL") and an enabled setup in a child: outcome, stdout, stderr."""
    environ = {"OTEL_METRIC_EXPORT_INTERVAL": "600000", **variables}
    run = run_child(_CHILD, environ, 120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome, "\n".join(lines[:-1]), run.stderr


def test_console_path_sends_every_signal_to_the_file_and_metrics_once(tmp_path: Path) -> None:
    """<PREFIX>_CONSOLE_PATH: spans and metrics go to that file; shutdown exports metrics once."""
    target = tmp_path / "run.otlp.jsonl"
    outcome, stdout, _ = run_with(
        TRAINER_OTEL_EXPORTER="console", TRAINER_OTEL_CONSOLE_PATH=str(target)
    )
    assert outcome["error"] is None
    assert outcome["console_path"] == str(target)
    assert "resourceMetrics" not in stdout
    assert "resourceSpans" not in stdout
    written = target.read_text(encoding="utf-8")
    assert lens_otlp_json.span_names(written) == ["child-span"]
    # One final export at shutdown: one metrics request, carrying the total.
    assert len(lens_otlp_json.metric_requests(written)) == 1
    assert lens_otlp_json.metric_values(written, "child.steps") == [10]


def test_without_a_console_path_the_console_exporter_writes_stdout_once() -> None:
    """No console path: the OTLP/JSON lines go to stdout, one metrics request at shutdown."""
    outcome, stdout, _ = run_with(TRAINER_OTEL_EXPORTER="console")
    assert outcome["console_path"] == ""
    assert len(lens_otlp_json.metric_requests(stdout)) == 1
    assert lens_otlp_json.metric_values(stdout, "child.steps") == [10]


def test_a_cardinality_limit_is_read_and_applied_without_a_warning() -> None:
    """<PREFIX>_METRIC_CARDINALITY_LIMIT=5000 is read and applied by lens; setup warns nothing."""
    outcome, _, log = run_with(
        TRAINER_OTEL_EXPORTER="console", TRAINER_OTEL_METRIC_CARDINALITY_LIMIT="5000"
    )
    assert outcome["error"] is None
    assert outcome["limit"] == 5000
    assert outcome["applied_limit"] == 5000
    assert "cardinality" not in log


def test_no_cardinality_limit_variable_means_no_limit() -> None:
    """Without <PREFIX>_METRIC_CARDINALITY_LIMIT the limit is 0: lens limits nothing."""
    outcome, _, _ = run_with(TRAINER_OTEL_EXPORTER="console")
    assert outcome["error"] is None
    assert outcome["limit"] == 0
    assert outcome["applied_limit"] == 0


@pytest.mark.parametrize("raw", ["-1", "many", "1.5"])
def test_a_bad_cardinality_limit_variable_names_it(raw: str) -> None:
    """A limit that is not an integer >= 0 fails from_env, naming the variable and the form."""
    outcome, _, _ = run_with(TRAINER_OTEL_METRIC_CARDINALITY_LIMIT=raw)
    kind, message = outcome["error"]
    assert kind == "LensValueError"
    assert "TRAINER_OTEL_METRIC_CARDINALITY_LIMIT" in message
    assert "an integer >= 0" in message


@pytest.mark.parametrize("limit", [-5, True, 2.0, "10"])
def test_a_bad_cardinality_limit_field_fails_setup(limit: object) -> None:
    """metric_cardinality_limit set in code to anything but an int >= 0 fails setup."""
    with isolated_telemetry():
        config = NemoLensConfig(enabled=True)
        config.metric_cardinality_limit = limit  # type: ignore[assignment]
        with pytest.raises(LensValueError, match="metric_cardinality_limit"):
            setup_telemetry(config)


def test_a_console_path_that_is_not_a_str_fails_setup() -> None:
    """console_path set in code to a non-str fails setup with a TypeError naming it."""
    with isolated_telemetry():
        config = NemoLensConfig(enabled=True)
        config.console_path = Path("/tmp/x")  # type: ignore[assignment]
        with pytest.raises(LensTypeError, match="console_path"):
            setup_telemetry(config)
