"""`OTEL_SDK_DISABLED=true`: an enabled setup builds no pipeline and says why.

Each case runs in a child interpreter with only the variables it sets.
"""

from __future__ import annotations

import json
from typing import Any

from lens_children import free_port, run_child

from nemo.lens import _otel_env

_CHILD = """
import json, logging, socket, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
from opentelemetry import metrics
from nemo.lens import NemoLensConfig, setup_telemetry
port = int(sys.argv[1])
handle = setup_telemetry(NemoLensConfig(enabled=True, exporter="prometheus"))
probe = socket.socket()
try:
    probe.bind(("127.0.0.1", port))
    port_free = True
except OSError:
    port_free = False
finally:
    probe.close()
outcome = {
    "is_exporting": handle.is_exporting,
    "pipeline": handle._pipeline is not None,
    "port_free": port_free,
    "global_meter_provider": type(metrics.get_meter_provider()).__name__,
}
handle.shutdown(timeout_ms=500)
print(json.dumps(outcome))
"""


def setup_with(**variables: str) -> tuple[dict[str, Any], str]:
    """A Prometheus setup in a child under `variables`; what it built, and its log."""
    port = free_port()
    environ = {"OTEL_EXPORTER_PROMETHEUS_PORT": str(port), **variables}
    run = run_child(_CHILD, environ, 120, str(port))
    assert run.returncode == 0, run.stderr
    outcome: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return outcome, run.stderr


def test_sdk_disabled_builds_no_pipeline_and_binds_no_port() -> None:
    """OTEL_SDK_DISABLED=TRUE: not exporting, no pipeline, the port stays free, one reason."""
    outcome, log = setup_with(OTEL_SDK_DISABLED="TRUE")
    assert outcome == {
        "is_exporting": False,
        "pipeline": False,
        "port_free": True,
        "global_meter_provider": "NoOpMeterProvider",
    }
    assert log.count("OTEL_SDK_DISABLED=true") == 1
    assert "builds no telemetry pipeline" in log


def test_sdk_disabled_false_or_unset_still_exports() -> None:
    """OTEL_SDK_DISABLED=false (or unset) changes nothing: the endpoint binds its port."""
    for variables in ({"OTEL_SDK_DISABLED": "false"}, {}):
        outcome, log = setup_with(**variables)
        assert outcome["is_exporting"] is True
        assert outcome["port_free"] is False
        assert "OTEL_SDK_DISABLED" not in log


def test_an_odd_value_reads_as_false_with_one_warning() -> None:
    """OTEL_SDK_DISABLED=1 is not 'true': the SDK stays enabled and a warning names it."""
    outcome, log = setup_with(OTEL_SDK_DISABLED="1")
    assert outcome["is_exporting"] is True
    assert log.count("OTEL_SDK_DISABLED='1' is neither 'true' nor 'false'") == 1


def test_the_rule_accepts_only_true_as_disabling() -> None:
    """sdk_disabled: `true` in any case disables; blank and `false` quietly do not."""
    assert _otel_env.sdk_disabled({"OTEL_SDK_DISABLED": " True "}) == (True, None)
    assert _otel_env.sdk_disabled({"OTEL_SDK_DISABLED": ""}) == (False, None)
    assert _otel_env.sdk_disabled({}) == (False, None)
    disabled, problem = _otel_env.sdk_disabled({"OTEL_SDK_DISABLED": "yes"})
    assert disabled is False
    assert problem is not None
    assert "OTEL_SDK_DISABLED" in problem
