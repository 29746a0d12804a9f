"""`lens doctor`: versions, the resolved configuration and the exporter endpoint check."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path

import pytest
from lens_children import child_env, free_port
from lens_cli import LensResult, run_lens
from lens_env import clean_env

from nemo.lens._otel_env import EXPORTER_REQUIREMENTS, otlp_targets, prometheus_address
from nemo.lens.cli import _doctor
from nemo.lens.cli._common import distribution_of
from nemo.lens.config import NemoLensConfig


def doctor(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, **more_env: str
) -> LensResult:
    """Run `lens doctor ARGS` in this process, with only `env` and `more_env` as lens and
    OpenTelemetry settings."""
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
    return free_port()


def fail_lines(output: str) -> list[str]:
    """The FAIL lines of a report."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith("FAIL")]


def test_console_exporter_is_all_well(tmp_path: Path) -> None:
    """An enabled console configuration needs no endpoint: exit 0, `all well`."""
    result = doctor(cwd=tmp_path, NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="console")
    assert result.returncode == 0, result.stdout
    assert fail_lines(result.stdout) == []
    assert result.stdout.rstrip().endswith("all well")
    assert (
        "ok    the console exporter writes OTLP/JSON lines to stdout (traces, metrics); "
        "no endpoint to reach"
    ) in result.stdout


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


def test_a_setting_read_from_the_fallback_prefix_is_named_by_that_variable() -> None:
    """A bad value `from_env` read under --fallback-prefix is reported under the variable
    that holds it, and one left unset under the primary prefix, which would set it."""
    result = doctor(
        "--prefix", "MY_OTEL", "--fallback-prefix", "NEMO_LENS",
        MY_OTEL_ENABLED="true", NEMO_LENS_EXPORTER="carrier-pigeon",
        NEMO_LENS_EXPORT_STRATEGY="every_other_rank",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    problems = fail_lines(result.stdout)
    assert any("NEMO_LENS_EXPORTER='carrier-pigeon' is not" in line for line in problems), problems
    assert any("NEMO_LENS_EXPORT_STRATEGY='every_other_rank'" in line for line in problems)
    assert "MY_OTEL_EXPORTER=" not in result.stdout
    disabled = doctor("--prefix", "MY_OTEL", "--fallback-prefix", "NEMO_LENS")
    assert "set MY_OTEL_ENABLED=1 to export" in disabled.stdout


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


@pytest.mark.parametrize(
    ("strategy", "offset"), [("all_ranks", 3), ("single_rank", 0), ("first_rank_per_node", 0)]
)
def test_doctor_checks_the_port_this_rank_would_serve(
    listening_port: int, strategy: str, offset: int
) -> None:
    """With several exporting ranks per node, doctor checks base port + LOCAL_RANK (what
    setup binds); a single-exporter strategy checks the base port. Either way the port
    checked is the taken one, so doctor must fail naming it."""
    base = listening_port - offset
    result = doctor(
        NEMO_LENS_ENABLED="1",
        NEMO_LENS_EXPORTER="prometheus",
        NEMO_LENS_EXPORT_STRATEGY=strategy,
        OTEL_EXPORTER_PROMETHEUS_PORT=str(base),
        LOCAL_RANK="3",
    )
    assert result.returncode == 1, result.stdout
    assert f"127.0.0.1:{listening_port}" in "".join(fail_lines(result.stdout))


def test_doctor_fails_a_local_rank_that_cannot_offset_the_port() -> None:
    """A malformed LOCAL_RANK under a several-per-node strategy is a FAIL naming it."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        NEMO_LENS_EXPORTER="prometheus",
        NEMO_LENS_EXPORT_STRATEGY="all_ranks",
        LOCAL_RANK="two",
    )
    assert result.returncode == 1, result.stdout
    assert "LOCAL_RANK" in "".join(fail_lines(result.stdout))


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
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",  # gRPC refuses user information
    )
    assert result.returncode == 1
    assert "pa55w0rd" not in result.stdout
    hidden = f"https://trainer:***@127.0.0.1:{closed_port}"
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT              '{hidden}'" in result.stdout
    (line,) = fail_lines(result.stdout)
    assert f"OTLP http/protobuf endpoint {hidden} (traces, metrics) is not reachable" in line
    assert result.stdout.count(hidden) == 3  # the variable, the FAIL line, the summary


def test_a_password_in_an_invalid_endpoint_is_hidden_in_the_error() -> None:
    """A rejected endpoint is quoted with its password hidden, even a password with a raw @."""
    endpoint = "http://trainer:p@ss@127.0.0.1:notaport"
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",  # gRPC refuses user information
    )
    assert result.returncode == 1
    assert "p@ss" not in result.stdout
    # Traces fail on their endpoint; metrics, with no endpoint of their own, are probed
    # at the default one (nothing listens there in the test either).
    (line,) = [line for line in fail_lines(result.stdout) if "invalid port" in line]
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
    for signal in ("trace", "metric"):
        monkeypatch.setitem(
            sys.modules, f"opentelemetry.exporter.otlp.proto.http.{signal}_exporter", None
        )
    report = _doctor.Report()
    config = NemoLensConfig(enabled=True, exporter="otlp")
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    plans = _doctor._plan_signals(report, config, "NEMO_LENS", environ)
    _doctor._check_endpoints(report, plans, timeout=0.2, idle=None)
    (line,) = [line for line in report.lines if "OTLP http/protobuf endpoint" in line]
    assert "endpoint http://localhost:4317 (traces, metrics)" in line
    assert "sent over grpc" in line
    # The fallback is a note too, once per signal, as setup warns it.
    notes = [line for line in report.lines if "asked for the http exporter" in line]
    assert [note.split(":")[0].split()[-1] for note in notes] == ["traces", "metrics"]


def note_lines(output: str) -> list[str]:
    """The note lines of a report."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith("note")]


def test_disabled_telemetry_with_an_unreachable_endpoint_is_a_note(closed_port: int) -> None:
    """While telemetry is disabled, an unreachable collector is a note and the exit is 0."""
    endpoint = f"http://127.0.0.1:{closed_port}"
    result = doctor(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 0, result.stdout
    assert fail_lines(result.stdout) == []
    (line,) = [line for line in note_lines(result.stdout) if "not reachable" in line]
    assert f"OTLP grpc endpoint {endpoint} (traces, metrics) is not reachable" in line
    assert line.endswith("(no problem while telemetry is disabled; --strict fails on it)")
    assert result.stdout.rstrip().endswith("all well")


def test_strict_fails_on_an_unreachable_endpoint_while_disabled(closed_port: int) -> None:
    """--strict keeps an unreachable collector a failure even while telemetry is disabled."""
    endpoint = f"http://127.0.0.1:{closed_port}"
    result = doctor("--strict", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 1, result.stdout
    (line,) = fail_lines(result.stdout)
    assert f"OTLP grpc endpoint {endpoint} (traces, metrics) is not reachable" in line
    assert "--strict" not in line


def test_disabled_telemetry_with_a_taken_prometheus_port_is_a_note(listening_port: int) -> None:
    """While telemetry is disabled, a Prometheus port in use is a note; --strict fails on it."""
    env = {"NEMO_LENS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": f"{listening_port}"}
    relaxed = doctor(env=env)
    assert relaxed.returncode == 0, relaxed.stdout
    assert any(
        f"prometheus cannot serve on 127.0.0.1:{listening_port}" in line
        for line in note_lines(relaxed.stdout)
    )
    strict = doctor("--strict", env=env)
    assert strict.returncode == 1, strict.stdout
    (line,) = fail_lines(strict.stdout)
    assert f"prometheus cannot serve on 127.0.0.1:{listening_port}" in line


def test_a_bad_setting_fails_even_while_disabled() -> None:
    """Only reachability is softened while disabled: an invalid OTLP port still fails."""
    result = doctor(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:notaport")
    assert result.returncode == 1, result.stdout
    (line,) = fail_lines(result.stdout)
    assert "'http://127.0.0.1:notaport' has an invalid port" in line


@pytest.mark.parametrize("value", ["true", " TRUE ", "True"])
def test_otel_sdk_disabled_says_no_pipeline_is_built(value: str, closed_port: int) -> None:
    """OTEL_SDK_DISABLED=true (any case): a line says setup builds no pipeline because of it,
    and an enabled configuration's unreachable collector becomes a note."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_SDK_DISABLED=value,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port}",
    )
    assert result.returncode == 0, result.stdout
    assert fail_lines(result.stdout) == []
    assert (
        "note  OTEL_SDK_DISABLED is true: setup_telemetry builds no pipeline because of it "
        "(no exporter, no port bound, handle.is_exporting is False); unset it to export"
    ) in result.stdout
    (line,) = [line for line in note_lines(result.stdout) if "not reachable" in line]
    assert line.endswith("(no problem while OTEL_SDK_DISABLED is true; --strict fails on it)")


@pytest.mark.parametrize(
    ("value", "note"),
    [
        ("false", None),
        ("", None),
        ("yes", "OTEL_SDK_DISABLED='yes' is neither 'true' nor 'false'; read as false"),
    ],
)
def test_otel_sdk_disabled_other_than_true_leaves_the_checks_strict(
    value: str, note: str | None, closed_port: int
) -> None:
    """Any OTEL_SDK_DISABLED value but `true` keeps the SDK on: an enabled configuration's
    unreachable collector still fails, and a value that is not `false` gets a note."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_SDK_DISABLED=value,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port}",
    )
    assert result.returncode == 1, result.stdout
    assert "builds no pipeline" not in result.stdout
    notes = [line for line in note_lines(result.stdout) if "OTEL_SDK_DISABLED" in line]
    assert len(notes) == (0 if note is None else 1), notes
    assert all(note is not None and note in line for line in notes)


def block_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make each module in `names` unimportable for this test, as if not installed."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def package_lines(config: NemoLensConfig) -> tuple[list[str], list[str]]:
    """Run the package check alone for `config`: its lines and the problems it found."""
    report = _doctor.Report()
    idle = None if config.enabled else "it is off"
    _doctor._check_packages(report, [config.exporter], idle)
    return report.lines, report.problems


def test_a_missing_sdk_is_named_once_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The console exporter without the SDK names opentelemetry-sdk once, with its extra."""
    block_modules(monkeypatch, "opentelemetry.sdk")
    lines, problems = package_lines(NemoLensConfig(enabled=True, exporter="console"))
    assert lines == [
        "  FAIL  not installed: opentelemetry-sdk; install it with: pip install 'lens-core[sdk]'"
    ]
    assert len(problems) == 1


def test_missing_prometheus_packages_are_each_named_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Prometheus without its packages names each distribution once and lens-core[prometheus];
    while disabled, the same line is a note."""
    block_modules(
        monkeypatch, "opentelemetry.sdk", "opentelemetry.exporter.prometheus", "prometheus_client"
    )
    lines, problems = package_lines(NemoLensConfig(enabled=False, exporter="prometheus"))
    assert problems == []
    (line,) = lines
    assert line.startswith(
        "  note  not installed: opentelemetry-sdk, opentelemetry-exporter-prometheus, "
        "prometheus-client; install it with: pip install 'lens-core[prometheus]'"
    )


def test_otlp_needs_only_one_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """One OTLP transport installed is enough; with neither, both are offered as one item."""
    block_modules(monkeypatch, "opentelemetry.exporter.otlp.proto.http")
    lines, problems = package_lines(NemoLensConfig(enabled=True, exporter="otlp"))
    assert (lines, problems) == (["  ok    the SDK and the otlp exporter are installed"], [])
    block_modules(monkeypatch, "opentelemetry.exporter.otlp.proto.grpc")
    lines, problems = package_lines(NemoLensConfig(enabled=True, exporter="otlp"))
    assert problems == [
        "not installed: one of opentelemetry-exporter-otlp-proto-grpc or "
        "opentelemetry-exporter-otlp-proto-http; install it with: pip install 'lens-core[sdk]'"
    ]


@pytest.mark.parametrize(
    "module",
    sorted({module for modules, _ in EXPORTER_REQUIREMENTS.values() for module in modules}),
)
def test_each_required_module_names_its_real_distribution(module: str) -> None:
    """The distribution doctor tells users to get for each required module exists and
    installs that module (this environment has every extra)."""
    distribution = metadata.distribution(distribution_of(module))
    top = module.replace(".", "/")
    assert any(str(file).startswith(f"{top}/") for file in distribution.files or ())


def test_a_closed_pipe_exits_0_without_a_traceback(tmp_path: Path) -> None:
    """When the reader closes the pipe before the report is written (`lens doctor | head`),
    doctor exits 0 and prints nothing on stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "nemo.lens.cli", "doctor", "--timeout", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env({"NEMO_LENS_EXPORTER": "console"}),
        cwd=tmp_path,
    ) as process:
        assert process.stdout is not None
        process.stdout.close()  # the reader is gone before the child has started
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert stderr.decode() == ""
    assert process.returncode == 0


def test_a_head_reading_one_line_gets_it_and_doctor_exits_0(tmp_path: Path) -> None:
    """`lens doctor | head -1` prints the first line, `versions`; the pipeline (pipefail:
    doctor's status counts too) exits 0 and nothing reaches stderr."""
    script = f"set -o pipefail; {sys.executable} -m nemo.lens.cli doctor --timeout 1 | head -1"
    result = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env=child_env({"NEMO_LENS_EXPORTER": "console"}),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "versions\n", "")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("trainer:pa55@collector:4317", "trainer:***@collector:4317"),
        ("'trainer:p@ss@collector:4317'", "'trainer:***@collector:4317'"),
        ("https://ghp_t0ken@github.example/run", "https://***@github.example/run"),
        ("repo=https://me:tok@git.example/x,team=ml", "repo=https://me:***@git.example/x,team=ml"),
        ("owner=me@example.com,team=ml", "owner=me@example.com,team=ml"),
        ("http://collector:4317", "http://collector:4317"),
    ],
)
def test_hide_secrets_covers_bare_endpoints_and_token_users(text: str, shown: str) -> None:
    """Passwords of scheme-less endpoints and user names that stand alone (tokens) are hidden;
    an e-mail address and a URL without credentials are left as they are."""
    assert _doctor.hide_secrets(text) == shown


def test_a_scheme_less_endpoint_password_is_hidden(closed_port: int) -> None:
    """A gRPC endpoint written without a scheme is refused and never shows its password."""
    endpoint = f"trainer:pa55w0rd@127.0.0.1:{closed_port}"
    result = doctor(NEMO_LENS_ENABLED="1", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 1, result.stdout
    assert "pa55w0rd" not in result.stdout
    assert result.stdout.count(f"trainer:***@127.0.0.1:{closed_port}") == 1  # the variable
    assert any("holds user information" in line for line in fail_lines(result.stdout))


def test_a_per_signal_exporter_is_checked_for_its_signal(
    listening_port: int, closed_port: int
) -> None:
    """OTEL_METRICS_EXPORTER=prometheus sends metrics to Prometheus: its port is checked and
    only traces are checked against the OTLP endpoint."""
    endpoint = f"http://127.0.0.1:{listening_port}"
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(closed_port),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
    )
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert (
        "  ok    OTEL_METRICS_EXPORTER='prometheus' sends metrics to prometheus, not to "
        "NEMO_LENS_EXPORTER's 'otlp'"
    ) in lines
    assert "  ok    the SDK and the otlp and prometheus exporters are installed" in lines
    assert f"  ok    OTLP grpc endpoint {endpoint} (traces) accepts TCP connections" in lines
    assert f"prometheus can serve http://127.0.0.1:{closed_port}/metrics" in result.stdout


def test_signals_turned_off_by_none_are_not_checked(closed_port: int) -> None:
    """With every enabled signal's exporter `none`, no endpoint is checked: an unreachable
    collector fails nothing even with telemetry enabled."""
    result = doctor(
        NEMO_LENS_ENABLED="1",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="NONE",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port}",
    )
    assert result.returncode == 0, result.stdout
    notes = note_lines(result.stdout)
    assert "note  OTEL_TRACES_EXPORTER=none turns traces off" in notes
    assert "note  OTEL_METRICS_EXPORTER=none turns metrics off" in notes
    assert "note  no signal is exported, so no exporter package or endpoint is checked" in notes
    assert "OTLP grpc endpoint" not in result.stdout


def test_a_bad_per_signal_exporter_fails_naming_the_variable() -> None:
    """An OTEL_TRACES_EXPORTER value setup would refuse is a FAIL naming the variable and the
    accepted values, whether or not telemetry is enabled."""
    result = doctor(NEMO_LENS_EXPORTER="console", OTEL_TRACES_EXPORTER="zipkin")
    assert result.returncode == 1, result.stdout
    (line,) = fail_lines(result.stdout)
    assert "Invalid value for OTEL_TRACES_EXPORTER: 'zipkin'; expected one of 'none'" in line
    assert "console exporter writes OTLP/JSON lines to stdout (metrics)" in result.stdout


def test_the_console_path_is_where_the_console_exporter_writes(tmp_path: Path) -> None:
    """With NEMO_LENS_CONSOLE_PATH set, doctor says the console exporter writes that file."""
    path = tmp_path / "run.jsonl"
    result = doctor(NEMO_LENS_EXPORTER="console", NEMO_LENS_CONSOLE_PATH=str(path))
    assert result.returncode == 0, result.stdout
    assert f"console exporter writes OTLP/JSON lines to {str(path)!r}" in result.stdout


def test_missing_packages_of_two_exporters_name_the_sdk_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Traces over OTLP and metrics to Prometheus without the SDK: one line names
    opentelemetry-sdk once, then each exporter's packages and both extras."""
    block_modules(
        monkeypatch,
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.grpc",
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry.exporter.prometheus",
        "prometheus_client",
    )
    report = _doctor.Report()
    _doctor._check_packages(report, ["otlp", "prometheus"], idle=None)
    assert report.problems == [
        "not installed: opentelemetry-sdk, one of opentelemetry-exporter-otlp-proto-grpc or "
        "opentelemetry-exporter-otlp-proto-http, opentelemetry-exporter-prometheus, "
        "prometheus-client; install it with: pip install 'lens-core[sdk]'; "
        "install it with: pip install 'lens-core[prometheus]'"
    ]
