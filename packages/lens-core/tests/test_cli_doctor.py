"""`lens doctor`: versions, the resolved configuration and the exporter endpoint check."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path

import pytest
from lens_cli import clean_env, run_lens

from nemo.lens._otel_env import otlp_targets, prometheus_address


def doctor(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, **more_env: str
) -> subprocess.CompletedProcess[str]:
    """Run `lens doctor ARGS` with only `env` and `more_env` as lens/OpenTelemetry settings."""
    settings = {**(env or {}), **more_env}
    return run_lens(
        "doctor", "--timeout", "5", *args,
        cwd=cwd, env=clean_env(settings, also_strip=("MY_OTEL_",)),
    )  # fmt: skip


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A port on 127.0.0.1 with a socket listening on it, as a collector would."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def fail_lines(output: str) -> list[str]:
    """The FAIL lines of a report."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith("FAIL")]


def test_console_exporter_is_all_well(tmp_path: Path) -> None:
    """An enabled console configuration needs no endpoint: exit 0, `all well`."""
    result = doctor(cwd=tmp_path, NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="console")
    assert result.returncode == 0, result.stdout
    assert fail_lines(result.stdout) == []
    assert result.stdout.rstrip().endswith("all well")
    assert "ok    the console exporter writes JSON lines to stdout" in result.stdout


def test_versions_are_the_installed_distributions() -> None:
    """The report shows the installed lens-core, API, SDK and exporter versions."""
    result = doctor(NEMO_LENS_EXPORTER="console")
    section = result.stdout.split("\n\n", 1)[0].splitlines()
    assert section[0] == "versions"
    lines = {line.split()[0]: line.split()[1] for line in section[1:]}
    assert lines["lens-core"] == metadata.version("lens-core")
    assert lines["opentelemetry-api"] == metadata.version("opentelemetry-api")
    assert lines["opentelemetry-sdk"] == metadata.version("opentelemetry-sdk")
    exporter = "opentelemetry-exporter-prometheus"
    assert lines[exporter] == metadata.version(exporter)


def test_the_configuration_comes_from_the_environment() -> None:
    """Each NemoLensConfig field is printed as from_env resolves it."""
    result = doctor(
        NEMO_LENS_EXPORTER="console", NEMO_LENS_EXPORT_RANK="3", OTEL_SERVICE_NAME="trainer"
    )
    assert "configuration: NemoLensConfig.from_env(prefix='NEMO_LENS')" in result.stdout
    fields = dict(line.split(None, 1) for line in result.stdout.splitlines() if "  " in line)
    assert fields["export_rank"].strip() == "3"
    assert fields["service_name"].strip() == "'trainer'"
    assert fields["exporter"].strip() == "'console'"


def test_prefix_and_fallback_prefix_are_passed_to_from_env() -> None:
    """--prefix reads PREFIX_* first and --fallback-prefix fills what it leaves unset."""
    result = doctor(
        "--prefix", "MY_OTEL", "--fallback-prefix", "NEMO_LENS",
        MY_OTEL_EXPORTER="console", NEMO_LENS_SPAN_GROUPS="job,step", NEMO_LENS_EXPORTER="otlp",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "prefix='MY_OTEL', fallback_prefix='NEMO_LENS'" in result.stdout
    assert "span groups 'job,step' enable ['job', 'step']" in result.stdout


def test_disabled_telemetry_is_a_note_not_a_problem() -> None:
    """A disabled configuration is reported as a note and does not fail the run."""
    result = doctor(NEMO_LENS_EXPORTER="console")
    assert result.returncode == 0, result.stdout
    assert "note  telemetry is disabled; set NEMO_LENS_ENABLED=1 to export" in result.stdout


def test_a_reachable_otlp_endpoint_is_all_well(listening_port: int) -> None:
    """An OTLP endpoint accepting TCP connections passes: exit 0."""
    endpoint = f"http://127.0.0.1:{listening_port}"
    result = doctor(NEMO_LENS_ENABLED="1", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 0, result.stdout
    assert f"OTLP grpc endpoint {endpoint} (traces, metrics) accepts TCP connections" in (
        result.stdout
    )


def test_an_unreachable_otlp_endpoint_fails(closed_port: int) -> None:
    """An OTLP endpoint nothing listens on is a problem: exit 1 with what to do."""
    endpoint = f"http://127.0.0.1:{closed_port}"
    result = doctor(NEMO_LENS_ENABLED="1", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 1
    (line,) = fail_lines(result.stdout)
    assert f"OTLP grpc endpoint {endpoint} (traces, metrics) is not reachable" in line
    assert "start a collector there or set OTEL_EXPORTER_OTLP_ENDPOINT" in line
    assert "1 problem found:" in result.stdout


def test_each_signal_endpoint_is_checked(listening_port: int, closed_port: int) -> None:
    """Per-signal endpoints are checked separately; only the unreachable one fails."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{listening_port}/v1/traces",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"http://127.0.0.1:{closed_port}/v1/metrics",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    assert result.returncode == 1
    (line,) = fail_lines(result.stdout)
    assert f"127.0.0.1:{closed_port}/v1/metrics (metrics) is not reachable" in line
    assert f"127.0.0.1:{listening_port}/v1/traces (traces) accepts TCP" in result.stdout


def test_a_free_prometheus_port_is_all_well(closed_port: int) -> None:
    """The Prometheus exporter passes when its port can be bound."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        NEMO_LENS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(closed_port),
    )
    assert result.returncode == 0, result.stdout
    assert f"prometheus can serve http://127.0.0.1:{closed_port}/metrics" in result.stdout


def test_a_taken_prometheus_port_fails(listening_port: int) -> None:
    """A Prometheus port another socket holds is a problem: exit 1 naming the address."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        NEMO_LENS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(listening_port),
    )
    assert result.returncode == 1
    (line,) = fail_lines(result.stdout)
    assert f"prometheus cannot serve on 127.0.0.1:{listening_port}" in line


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"NEMO_LENS_EXPORT_RANK": "last"},
            "Invalid value for NEMO_LENS_EXPORT_RANK: 'last'",
        ),
        (
            {"NEMO_LENS_EXPORTER": "zipkin"},
            "NEMO_LENS_EXPORTER='zipkin' is not an exporter; expected one of "
            "['otlp', 'console', 'prometheus']",
        ),
        (
            {"NEMO_LENS_EXPORTER": "console", "NEMO_LENS_EXPORT_STRATEGY": "every_rank"},
            "NEMO_LENS_EXPORT_STRATEGY='every_rank' is not registered",
        ),
        (
            {"NEMO_LENS_EXPORTER": "console", "NEMO_LENS_SPAN_GROUPS": "job,stepp"},
            "NEMO_LENS_SPAN_GROUPS='job,stepp': Unknown span group or preset: 'stepp'",
        ),
        (
            {"NEMO_LENS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "http"},
            "Invalid value for OTEL_EXPORTER_PROMETHEUS_PORT: 'http'",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://:4317"},
            "endpoint 'http://:4317' has no host",
        ),
    ],
)
def test_a_bad_environment_fails_with_the_variable_named(
    env: dict[str, str], expected: str
) -> None:
    """A configuration problem exits 1 with a FAIL line naming the variable and its value."""
    result = doctor(env=env)
    assert result.returncode == 1, result.stdout
    assert any(expected in line for line in fail_lines(result.stdout)), result.stdout


def test_import_registers_a_consumer_strategy(tmp_path: Path) -> None:
    """--import runs a consumer module first, so its export strategy counts as registered."""
    (tmp_path / "my_strategies.py").write_text(
        "from nemo.lens.strategies import register_export_strategy\n"
        "register_export_strategy('rank_zero', lambda config, rank, world_size: rank == 0)\n",
        encoding="utf-8",
    )
    without = doctor(
        cwd=tmp_path, NEMO_LENS_EXPORTER="console", NEMO_LENS_EXPORT_STRATEGY="rank_zero"
    )
    assert without.returncode == 1
    with_import = doctor(
        "--import",
        "my_strategies",
        cwd=tmp_path,
        NEMO_LENS_EXPORTER="console",
        NEMO_LENS_EXPORT_STRATEGY="rank_zero",
    )
    assert with_import.returncode == 0, with_import.stdout
    assert "export strategy 'rank_zero' is registered" in with_import.stdout


def test_header_values_are_hidden() -> None:
    """OTLP header variables, which hold credentials, are shown as set but not printed."""
    result = doctor(
        NEMO_LENS_EXPORTER="console",
        OTEL_EXPORTER_OTLP_HEADERS="api-key=s3cret",
        OTEL_SERVICE_NAME="shown",
    )
    assert "s3cret" not in result.stdout
    assert "OTEL_EXPORTER_OTLP_HEADERS" in result.stdout
    assert "<set, value hidden>" in result.stdout
    assert "OTEL_SERVICE_NAME                        'shown'" in result.stdout


def test_url_passwords_are_hidden_in_the_environment_and_the_checks(closed_port: int) -> None:
    """An endpoint's password never appears: not in the OTEL_* list, the checks or the summary."""
    endpoint = f"https://trainer:pa55w0rd@127.0.0.1:{closed_port}"
    result = doctor(NEMO_LENS_ENABLED="1", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 1
    assert "pa55w0rd" not in result.stdout
    hidden = f"https://trainer:***@127.0.0.1:{closed_port}"
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT              '{hidden}'" in result.stdout
    (line,) = fail_lines(result.stdout)
    assert f"OTLP grpc endpoint {hidden} (traces, metrics) is not reachable" in line
    assert result.stdout.count(hidden) == 3  # the variable, the FAIL line, the summary


def test_a_password_in_an_invalid_endpoint_is_hidden_in_the_error() -> None:
    """A rejected endpoint is quoted with its password hidden, even a password with a raw @."""
    endpoint = "http://trainer:p@ss@127.0.0.1:notaport"
    result = doctor(NEMO_LENS_ENABLED="1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint)
    assert result.returncode == 1
    assert "p@ss" not in result.stdout
    (line,) = fail_lines(result.stdout)
    assert "'http://trainer:***@127.0.0.1:notaport' has an invalid port" in line


def test_secret_looking_variables_and_list_items_are_hidden() -> None:
    """OTEL_* variables named like credentials are hidden; secret items of a list are redacted."""
    result = doctor(
        NEMO_LENS_EXPORTER="console",
        OTEL_EXPORTER_JAEGER_PASSWORD="hunter2",
        OTEL_RESOURCE_ATTRIBUTES="team=vision,api_key=sk-live-1,Authorization=Bearer x",
    )
    assert "hunter2" not in result.stdout
    assert "sk-live-1" not in result.stdout
    assert "Bearer" not in result.stdout
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines() if "OTEL_" in line)
    assert lines["OTEL_EXPORTER_JAEGER_PASSWORD"].strip() == "<set, value hidden>"
    assert lines["OTEL_RESOURCE_ATTRIBUTES"].strip() == (
        "'team=vision,api_key=[REDACTED],Authorization=[REDACTED]'"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--timeout", "-1"], "argument --timeout: expected a number of seconds >= 0"),
        (["--import", "not_a_module_anywhere"], "cannot import module 'not_a_module_anywhere'"),
        (["--import", "bad target"], "expected MODULE[:CALLABLE]"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], expected: str) -> None:
    """Invalid options exit 2 with a one-line error and no report."""
    result = doctor(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("lens doctor: error: ")
    assert expected in result.stderr


def test_otlp_targets_follow_the_exporter_rules() -> None:
    """Protocol and endpoint resolve per signal, with the OTLP defaults per transport."""
    assert [
        (target.signals, target.protocol, target.host, target.port)
        for target in otlp_targets(("traces", "metrics"), {})
    ] == [(("traces", "metrics"), "grpc", "localhost", 4317)]
    environ = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "collector:4317",
    }
    assert [
        (target.signals, target.protocol, target.host, target.port)
        for target in otlp_targets(("traces", "metrics"), environ)
    ] == [
        (("traces",), "http/protobuf", "localhost", 4318),
        (("metrics",), "grpc", "collector", 4317),
    ]
    (https,) = otlp_targets(("traces",), {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example"})
    assert https.port == 443


def test_prometheus_address_defaults_and_overrides() -> None:
    """The Prometheus address defaults to 127.0.0.1:9464 and follows its two variables."""
    assert prometheus_address({}) == ("127.0.0.1", 9464)
    assert prometheus_address(
        {"OTEL_EXPORTER_PROMETHEUS_HOST": "::1", "OTEL_EXPORTER_PROMETHEUS_PORT": " 9000 "}
    ) == ("::1", 9000)


def test_endpoint_check_follows_the_transport_setup_falls_back_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With http/protobuf asked for but only gRPC installed, the gRPC port (4317) is checked."""
    from nemo.lens.cli import _doctor
    from nemo.lens.config import NemoLensConfig

    for signal in ("trace", "metric"):
        monkeypatch.setitem(
            sys.modules, f"opentelemetry.exporter.otlp.proto.http.{signal}_exporter", None
        )
    report = _doctor.Report()
    config = NemoLensConfig(enabled=True, exporter="otlp")
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    _doctor._check_endpoint(report, config, environ, timeout=0.2)
    (line,) = [line for line in report.lines if "OTLP" in line]
    assert "endpoint http://localhost:4317 (traces, metrics)" in line
    assert "sent over grpc" in line
