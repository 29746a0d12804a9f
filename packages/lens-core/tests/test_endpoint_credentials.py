"""Credentials in an endpoint never reach a message, a log line or `lens doctor`'s output.

The OTLP gRPC exporter cannot send URL user information: it dials a "host" named
`user:password@collector` and logs that name, password included, on every failed export.
The export plan refuses such an endpoint, naming the variable but not the endpoint. `lens
doctor` hides URL passwords, secret-looking query values (`?token=`, by lens's one
redaction rule) and headers in every line it prints.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from lens_cli import run_lens
from lens_env import clean_env
from lens_receivers import OtlpReceiver

from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens._otel_env import otlp_targets
from nemo.lens.errors import LensValueError
from nemo.lens.testing import isolated_telemetry

#: Every credential in these tests holds it; none may be printed, raised or logged.
MARK = "s3cret"
USER = "lens-user"
HTTP = "http/protobuf"


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    with isolated_telemetry():
        yield


@pytest.mark.parametrize(
    ("variable", "endpoint"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{USER}:pw-{MARK}@collector:4317"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://tok-{MARK}@collector:4317"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", f"{USER}:pw-{MARK}@collector:4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://{USER}:pw-{MARK}@[::1]:4317"),
    ],
    ids=["password", "token-user", "scheme-less", "per-signal"],
)
def test_a_grpc_endpoint_with_user_information_is_refused_without_echoing_it(
    variable: str, endpoint: str
) -> None:
    """The plan refuses it naming the variable; the message holds no part of the userinfo."""
    with pytest.raises(LensValueError) as raised:
        otlp_targets(["traces"], {variable: endpoint})

    message = str(raised.value)
    assert variable in message
    assert "OTEL_EXPORTER_OTLP_HEADERS" in message  # where a credential goes instead
    assert MARK not in message
    assert USER not in message


def test_an_http_endpoint_with_user_information_is_accepted() -> None:
    """OTLP/HTTP sends URL user information as basic auth, so the plan keeps it."""
    endpoint = f"http://{USER}:pw-{MARK}@collector:4318"
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": HTTP, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}

    (target,) = otlp_targets(["traces"], environ)

    assert (target.transport, target.host, target.port) == ("http", "collector", 4318)


@pytest.mark.parametrize(
    "endpoint",
    [f"http://{USER}:pw-{MARK}@:4318", f"http://{USER}:pw-{MARK}@collector:99999"],
    ids=["no-host", "bad-port"],
)
def test_a_malformed_endpoint_s_message_hides_its_password(endpoint: str) -> None:
    """An endpoint with no host or a bad port is refused without showing its password."""
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": HTTP, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}

    with pytest.raises(LensValueError) as raised:
        otlp_targets(["traces"], environ)

    assert MARK not in str(raised.value)


@pytest.mark.e2e
def test_setup_refuses_the_grpc_endpoint_and_no_log_line_carries_the_password(
    clean_environ: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A real setup raises LensValueError; nothing it (or the SDK) logs holds the password."""
    with OtlpReceiver("grpc") as receiver:
        endpoint = receiver.endpoint.replace("://", f"://{USER}:pw-{MARK}@")
        clean_environ.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        clean_environ.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
        refused = None
        with caplog.at_level(logging.DEBUG):
            try:
                handle = setup_telemetry(NemoLensConfig(enabled=True, metrics_enabled=False))
            except LensValueError as exc:
                refused = str(exc)
            else:  # before the fix: every export logged the password
                with handle.tracer.start_as_current_span("credentials.span"):
                    pass
                handle.shutdown(timeout_ms=3000)

    logged = [record.getMessage() for record in caplog.records if MARK in record.getMessage()]
    assert logged == []
    assert refused is not None
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in refused
    assert MARK not in refused


@pytest.mark.parametrize(
    "variables",
    [
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": (
                f"http://{USER}:pw-{MARK}@127.0.0.1:9/?token=tok-{MARK}&team=ml"
            ),
            "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20hdr-{MARK}",
        },
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:9?token=tok-{MARK}&api_key=k-{MARK}"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{USER}:pw-{MARK}@127.0.0.1:9"},
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"https://tok-{MARK}@127.0.0.1:9/v1/traces",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:9/v1/metrics?key=k-{MARK}",
        },
    ],
    ids=["http-userinfo-query-headers", "grpc-query", "grpc-userinfo", "per-signal"],
)
def test_doctor_prints_no_credential_in_any_line(variables: dict[str, str]) -> None:
    """Environment, check and result lines alike: no password, token, key or header."""
    result = run_lens(
        "doctor", "--timeout", "0.2", env=clean_env({"NEMO_LENS_ENABLED": "1", **variables})
    )

    printed = result.stdout + result.stderr
    assert result.returncode == 1, printed  # port 9 refuses, or the endpoint is refused
    assert [line for line in printed.splitlines() if MARK in line] == []
    assert "127.0.0.1" in result.stdout  # the endpoint itself is still shown


def test_doctor_keeps_what_is_not_a_credential_in_a_query() -> None:
    """Only secret-looking query values are hidden: `?token=` goes, `team=ml` stays."""
    endpoint = f"http://127.0.0.1:9/v1/traces?token=tok-{MARK}&team=ml"
    variables = {"OTEL_EXPORTER_OTLP_PROTOCOL": HTTP, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}

    result = run_lens(
        "doctor", "--timeout", "0.2", env=clean_env({"NEMO_LENS_ENABLED": "1", **variables})
    )

    checks = [line for line in result.stdout.splitlines() if "OTLP http/protobuf endpoint" in line]
    assert checks, result.stdout
    assert all("?token=[REDACTED]&team=ml" in line for line in checks), checks
