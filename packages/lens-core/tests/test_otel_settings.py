"""The OTLP exporters' own variables: bad values fail setup naming the variable, or warn.

lens passes the OTLP exporters no arguments, so they read `OTEL_EXPORTER_OTLP_*` themselves;
`_otel_env.check_otlp_settings` checks those values first. The rules are tested with
explicit environment mappings; setup itself runs in child processes with a clean
environment, because the exporters read the real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lens_children import child_env, free_port, run_python
from lens_cli import run_lens
from lens_env import clean_env

from nemo.lens._otel_env import (
    DEFAULT_METRIC_EXPORT_TIMEOUT_MS,
    check_otlp_settings,
    metric_export_timeout_ms,
    otlp_targets,
)
from nemo.lens.errors import LensValueError

SECRET = "s3cr3t-t0ken"


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"]
)
@pytest.mark.parametrize("bad", ["abc", "1.5", "0", "-3", ""])
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_timeout_must_be_a_positive_whole_number_of_seconds(
    variable: str, bad: str, transport: str
) -> None:
    """A timeout that 1.23's int() or 1.45's float() rejects, or <= 0, names its variable."""
    with pytest.raises(LensValueError) as raised:
        check_otlp_settings("traces", transport, {variable: bad})

    message = str(raised.value)
    assert f"Invalid value for {variable}: {bad!r}" in message
    assert "positive whole number of seconds" in message


def test_the_signal_timeout_wins_over_the_general_one() -> None:
    """A valid per-signal timeout is what the exporter reads; the general one is not."""
    environ = {"OTEL_EXPORTER_OTLP_TIMEOUT": "abc", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": " 30 "}

    assert check_otlp_settings("metrics", "grpc", environ) == []
    with pytest.raises(LensValueError, match="OTEL_EXPORTER_OTLP_TIMEOUT: 'abc'"):
        check_otlp_settings("traces", "grpc", environ)


@pytest.mark.parametrize(
    ("transport", "value", "accepted"),
    [
        ("grpc", "gzip", True),
        ("grpc", " GZIP ", True),
        ("grpc", "none", False),
        ("grpc", "deflate", False),
        ("grpc", "zip", False),
        ("http", "gzip", True),
        ("http", "Deflate", True),
        ("http", "none", True),
        ("http", "zip", False),
        ("http", "", False),
    ],
)
def test_compression_follows_what_the_transport_accepts(
    transport: str, value: str, accepted: bool
) -> None:
    """gRPC takes gzip only; HTTP takes gzip, deflate and none; the error lists them."""
    environ = {"OTEL_EXPORTER_OTLP_COMPRESSION": value}
    if accepted:
        assert check_otlp_settings("traces", transport, environ) == []
        return
    with pytest.raises(LensValueError) as raised:
        check_otlp_settings("traces", transport, environ)
    message = str(raised.value)
    assert f"OTEL_EXPORTER_OTLP_COMPRESSION: {value!r}" in message
    expected = "'gzip'" if transport == "grpc" else "'gzip', 'deflate', 'none'"
    assert f"accepts {expected} " in message


@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
    ],
)
def test_a_certificate_or_key_variable_must_name_a_readable_file(
    tmp_path: Path, variable: str
) -> None:
    """A missing PEM file fails naming the variable and the path; an existing one passes."""
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(LensValueError) as raised:
        check_otlp_settings("metrics", "grpc", {variable: missing})
    assert f"{variable}: {missing!r} is not a readable file" in str(raised.value)

    present = tmp_path / "present.pem"
    present.write_text("-----BEGIN CERTIFICATE-----\n")
    assert check_otlp_settings("metrics", "http", {variable: str(present)}) == []


@pytest.mark.parametrize(
    "headers",
    [
        SECRET,
        f"={SECRET}",
        f"api key={SECRET}",
        f"api-key={SECRET},{SECRET}",
        f'api-key="{SECRET}"',
        f"api-key={SECRET};x=1",
        f"api-key={SECRET}\u00e9",
    ],
)
def test_a_malformed_header_fails_without_showing_its_value(headers: str) -> None:
    """Entries the exporter would drop (logging them, secret and all) fail, value unshown."""
    with pytest.raises(LensValueError) as raised:
        check_otlp_settings("traces", "http", {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": headers})

    message = str(raised.value)
    assert "Invalid value for OTEL_EXPORTER_OTLP_TRACES_HEADERS" in message
    assert "comma-separated name=value pairs" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "headers",
    [
        f"api-key={SECRET}",
        f"Authorization=Bearer {SECRET}",
        f" a = 1 , b={SECRET} ,",
        f"k=%22{SECRET}%2C",
        f"token={SECRET}==",
        "   ",
    ],
)
def test_well_formed_headers_pass(headers: str) -> None:
    """name=value lists (spaces, '=' and %XX in values, blank entries) are accepted."""
    assert check_otlp_settings("logs", "grpc", {"OTEL_EXPORTER_OTLP_HEADERS": headers}) == []


@pytest.mark.parametrize(("value", "warns"), [("true", False), ("FALSE", False), ("1", True)])
def test_a_grpc_insecure_flag_that_is_not_true_or_false_warns(value: str, warns: bool) -> None:
    """The gRPC exporter reads anything but "true" as false: say so; HTTP ignores the flag."""
    environ = {"OTEL_EXPORTER_OTLP_INSECURE": value}

    warnings = check_otlp_settings("traces", "grpc", environ)

    assert len(warnings) == int(warns)
    if warns:
        assert "OTEL_EXPORTER_OTLP_INSECURE='1' is neither 'true' nor 'false'" in warnings[0]
    assert check_otlp_settings("traces", "http", environ) == []


def test_otlp_targets_refuses_what_setup_refuses() -> None:
    """The resolver `lens doctor` uses runs the same checks, so the two never disagree."""
    with pytest.raises(LensValueError, match="OTEL_EXPORTER_OTLP_COMPRESSION"):
        otlp_targets(["traces"], {"OTEL_EXPORTER_OTLP_COMPRESSION": "zip"})


@pytest.mark.parametrize(
    ("raw", "expected", "warns"),
    [
        (None, DEFAULT_METRIC_EXPORT_TIMEOUT_MS, False),
        (" 5000 ", 5000.0, False),
        ("2500.5", 2500.5, False),
        ("abc", DEFAULT_METRIC_EXPORT_TIMEOUT_MS, True),
        ("0", DEFAULT_METRIC_EXPORT_TIMEOUT_MS, True),
        ("-5", DEFAULT_METRIC_EXPORT_TIMEOUT_MS, True),
        ("nan", DEFAULT_METRIC_EXPORT_TIMEOUT_MS, True),
        ("inf", DEFAULT_METRIC_EXPORT_TIMEOUT_MS, True),
    ],
)
def test_a_bad_metric_export_timeout_gives_the_default_and_a_warning(
    raw: str | None, expected: float, warns: bool
) -> None:
    """OTEL_METRIC_EXPORT_TIMEOUT that is no positive number degrades to 30000 with a warning."""
    environ = {} if raw is None else {"OTEL_METRIC_EXPORT_TIMEOUT": raw}

    timeout, warning = metric_export_timeout_ms(environ)

    assert timeout == expected
    if warns:
        assert warning is not None
        assert f"OTEL_METRIC_EXPORT_TIMEOUT: {raw!r}" in warning
        assert "positive number of milliseconds" in warning
    else:
        assert warning is None


# --- setup, in a child process with a clean environment ----------------------------------

_SETUP_CHILD = """
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
from opentelemetry import metrics, trace
import nemo.lens.handle
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.errors import LensValueError
from nemo.lens._otel_internals import ProxyMeterProvider
outcome = {"error": None}
try:
    handle = setup_telemetry(NemoLensConfig(enabled=True, exporter="otlp"))
except Exception as exc:
    outcome["error"] = [type(exc).__name__, isinstance(exc, LensValueError), str(exc)]
outcome["globals_untouched"] = isinstance(
    trace.get_tracer_provider(), trace.ProxyTracerProvider
) and isinstance(metrics.get_meter_provider(), ProxyMeterProvider)
# Read before shutdown, which frees the guard again.
outcome["initialized"] = nemo.lens.handle._INITIALIZED
if outcome["error"] is None:
    handle.shutdown(timeout_ms=500)
print(json.dumps(outcome))
sys.stdout.flush()
os._exit(0)
"""


def setup_in_child(closed_port: int, **variables: str) -> tuple[dict[str, Any], str]:
    """Run an enabled OTLP setup in a fresh process; its outcome and its log (stderr)."""
    settings = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port}", **variables}
    result = run_python("-c", _SETUP_CHILD, env=child_env(settings))
    assert result.returncode == 0, result.stderr
    outcome: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return outcome, result.stderr


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    return free_port()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpcs"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc"),
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1.5"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zip"),
        ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/lens-ca.pem"),
        ("OTEL_EXPORTER_OTLP_HEADERS", SECRET),
    ],
)
def test_a_bad_otlp_setting_fails_setup_naming_it_before_any_global_changes(
    closed_port: int, variable: str, value: str
) -> None:
    """setup_telemetry raises LensValueError naming the variable; nothing global is set."""
    outcome, log = setup_in_child(closed_port, **{variable: value})

    name, is_lens_error, message = outcome["error"]
    assert is_lens_error, (name, message)
    assert variable in message
    assert outcome["globals_untouched"]
    assert outcome["initialized"] is False
    assert "opentelemetry" not in log  # the SDK never got to read (or log) the value
    assert SECRET not in log + message


def test_a_bad_metric_export_timeout_warns_once_and_setup_goes_on(closed_port: int) -> None:
    """OTEL_METRIC_EXPORT_TIMEOUT=abc: one lens warning naming it, none from the SDK."""
    outcome, log = setup_in_child(closed_port, OTEL_METRIC_EXPORT_TIMEOUT="abc")

    assert outcome["error"] is None
    assert outcome["initialized"] is True
    warnings = [line for line in log.splitlines() if "OTEL_METRIC_EXPORT_TIMEOUT" in line]
    assert len(warnings) == 1
    assert "Found invalid value for export timeout" not in log


def test_an_insecure_flag_that_is_not_true_or_false_warns_once_at_setup(closed_port: int) -> None:
    """OTEL_EXPORTER_OTLP_INSECURE=1 (read as false) warns once for both signals; setup goes on."""
    outcome, log = setup_in_child(closed_port, OTEL_EXPORTER_OTLP_INSECURE="1")

    assert outcome["error"] is None
    warning = "OTEL_EXPORTER_OTLP_INSECURE='1' is neither 'true' nor 'false'"
    assert log.count(warning) == 1


# --- lens doctor ------------------------------------------------------------------------


def doctor_fail_lines(**variables: str) -> tuple[list[str], str]:
    """Run `lens doctor` for an enabled OTLP setup; its FAIL lines and all it printed."""
    result = run_lens(
        "doctor", "--timeout", "1", env=clean_env({"NEMO_LENS_ENABLED": "1", **variables})
    )
    assert result.returncode == 1, result.stdout
    fails = [line.strip() for line in result.stdout.splitlines() if "FAIL" in line]
    return fails, result.stdout + result.stderr


def test_doctor_reports_an_unknown_protocol() -> None:
    """`lens doctor` fails on OTEL_EXPORTER_OTLP_PROTOCOL=http, naming the accepted values."""
    fails, _ = doctor_fail_lines(OTEL_EXPORTER_OTLP_PROTOCOL="http")

    assert any(
        "OTEL_EXPORTER_OTLP_PROTOCOL: 'http'" in line
        and "'grpc', 'http/protobuf', 'http/json'" in line
        for line in fails
    ), fails


def test_doctor_reports_a_malformed_header_without_its_value() -> None:
    """`lens doctor` fails on a malformed header and prints its value nowhere."""
    fails, printed = doctor_fail_lines(OTEL_EXPORTER_OTLP_HEADERS=SECRET)

    assert any("OTEL_EXPORTER_OTLP_HEADERS" in line for line in fails), fails
    assert SECRET not in printed
