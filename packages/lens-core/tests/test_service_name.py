"""`service.name` in OpenTelemetry's order, under lens's default.

A name set in code or by `<PREFIX>_SERVICE_NAME` wins; then `OTEL_SERVICE_NAME`; then
`service.name` in `OTEL_RESOURCE_ATTRIBUTES`; then `nemo`. Each case runs setup in a
child interpreter with only the variables it sets and reads the exported resource.
"""

from __future__ import annotations

import copy
import pickle

import lens_otlp_json
import pytest
from lens_children import run_child

from nemo.lens import NemoLensConfig, _otel_env
from nemo.lens.config import _is_default_service_name

_CHILD = """
import sys
from nemo.lens import NemoLensConfig, setup_telemetry
mode = sys.argv[1]
if mode == "from_env":
    config = NemoLensConfig.from_env("TRAINER_OTEL")
    config.enabled = True
elif mode.startswith("code:"):
    config = NemoLensConfig(enabled=True, service_name=mode[len("code:"):])
else:
    config = NemoLensConfig(enabled=True)
config.exporter = "console"
config.traces_enabled = False
handle = setup_telemetry(config)
handle.meter.create_counter("probe.count").add(1)
handle.shutdown(timeout_ms=2000)
"""

ATTRIBUTES = {"OTEL_RESOURCE_ATTRIBUTES": "team=ml,service.name=from%20attributes"}
OTEL_NAME = {"OTEL_SERVICE_NAME": "from-otel"}


def exported_service_name(mode: str, **variables: str) -> object:
    """The `service.name` a child's console export carries."""
    run = run_child(_CHILD, {"OTEL_METRIC_EXPORT_INTERVAL": "600000", **variables}, 120, mode)
    assert run.returncode == 0, run.stderr
    return lens_otlp_json.resource_value(run.stdout, "service.name")


@pytest.mark.parametrize(
    ("mode", "variables", "expected"),
    [
        ("default", {}, "nemo"),
        ("default", ATTRIBUTES, "from attributes"),
        ("default", {**ATTRIBUTES, **OTEL_NAME}, "from-otel"),
        ("code:from-code", {**ATTRIBUTES, **OTEL_NAME}, "from-code"),
        ("code:nemo", OTEL_NAME, "nemo"),
        (
            "from_env",
            {**ATTRIBUTES, **OTEL_NAME, "TRAINER_OTEL_SERVICE_NAME": "prefixed"},
            "prefixed",
        ),
        ("from_env", {**ATTRIBUTES, **OTEL_NAME}, "from-otel"),
        ("from_env", ATTRIBUTES, "from attributes"),
    ],
)
def test_service_name_follows_opentelemetry_order(
    mode: str, variables: dict[str, str], expected: str
) -> None:
    """Code or <PREFIX>_SERVICE_NAME > OTEL_SERVICE_NAME > OTEL_RESOURCE_ATTRIBUTES > nemo."""
    assert exported_service_name(mode, **variables) == expected


def test_the_default_equals_nemo_but_is_told_apart_from_a_name_set_in_code() -> None:
    """The default is "nemo" (== and repr); a plain "nemo" assigned in code is not the default."""
    config = NemoLensConfig()
    assert config.service_name == "nemo"
    assert repr(config.service_name) == "'nemo'"
    assert _is_default_service_name(config.service_name)
    assert _is_default_service_name(copy.deepcopy(config).service_name)
    assert _is_default_service_name(pickle.loads(pickle.dumps(config)).service_name)
    config.service_name = "nemo"
    assert not _is_default_service_name(config.service_name)


def test_resource_attributes_service_name_is_decoded_and_the_last_one_wins() -> None:
    """`service.name` in OTEL_RESOURCE_ATTRIBUTES: percent-decoded, last entry, blank unset."""
    read = _otel_env.resource_attributes_service_name
    assert read({"OTEL_RESOURCE_ATTRIBUTES": "service.name=a,service.name=b%2Cc"}) == "b,c"
    assert read({"OTEL_RESOURCE_ATTRIBUTES": "service.name= "}) is None
    assert read({"OTEL_RESOURCE_ATTRIBUTES": "team=ml"}) is None
    assert read({}) is None
