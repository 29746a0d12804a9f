"""The logs pipeline `logs_enabled=True` builds: exporters, trace ids, shutdown and fork.

Records go through the logging bridge (`setup_logging_bridge`) into the SDK logger
provider setup installed, and from there to real OTLP receivers on 127.0.0.1 or to the
console.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import pytest
from lens_children import MARKER, run_child
from lens_receivers import HangingListener, OtlpReceiver

from nemo.lens import NemoLensConfig, TelemetryHandle, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge
from nemo.lens.testing import isolated_telemetry

LOGGER_NAME = "lens.tests.logs"


@pytest.fixture(autouse=True)
def _isolated(clean_environ: pytest.MonkeyPatch) -> Iterator[None]:
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    with isolated_telemetry(clear_span_registry=True):
        yield
    for handler in list(logger.handlers):
        if getattr(handler, "_nemo_lens_logging_bridge", False):
            logger.removeHandler(handler)


def logs_config(exporter: str = "otlp") -> NemoLensConfig:
    return NemoLensConfig(enabled=True, exporter=exporter, logs_enabled=True, metrics_enabled=False)


def setup_logs(exporter: str = "otlp") -> TelemetryHandle:
    handle = setup_telemetry(logs_config(exporter), _allow_reinit=True)
    setup_logging_bridge(LOGGER_NAME)
    return handle


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_records_reach_an_otlp_receiver_with_the_span_they_were_logged_in(
    monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    """A record logged inside a span arrives once, carrying that span's trace and span id."""
    with OtlpReceiver(transport) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", receiver.signal_endpoint("logs"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.signal_endpoint("traces"))
        protocol = "grpc" if transport == "grpc" else "http/protobuf"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        handle = setup_logs()
        logger = logging.getLogger(LOGGER_NAME)
        with handle.tracer.start_as_current_span("step") as span:
            logger.warning("inside the step")
            context = span.get_span_context()
        logger.info("after the step")
        handle.shutdown(timeout_ms=10000)
        logs = receiver.received.logs()
    by_body = {log.body: log for log in logs}
    assert sorted(by_body) == ["after the step", "inside the step"]
    assert len(logs) == 2
    inside = by_body["inside the step"]
    assert inside.trace_id == format(context.trace_id, "032x")
    assert inside.span_id == format(context.span_id, "016x")
    assert inside.severity in ("WARN", "WARNING")
    assert by_body["after the step"].trace_id in ("", "0" * 32)
    assert inside.resource["service.name"] == "nemo"


def test_the_logs_protocol_variable_chooses_the_logs_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OTEL_EXPORTER_OTLP_LOGS_PROTOCOL wins over the general protocol, for logs only."""
    with OtlpReceiver("http") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", receiver.signal_endpoint("logs"))
        config = logs_config()
        config.traces_enabled = False
        handle = setup_telemetry(config, _allow_reinit=True)
        setup_logging_bridge(LOGGER_NAME)
        logging.getLogger(LOGGER_NAME).warning("over http")
        handle.shutdown(timeout_ms=10000)
        assert [log.body for log in receiver.received.logs()] == ["over http"]


def test_console_writes_one_json_object_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    """exporter='console': the records leave as OTLP/JSON on stdout, one compact
    ExportLogsServiceRequest per line."""
    config = logs_config("console")
    config.traces_enabled = False
    handle = setup_telemetry(config, _allow_reinit=True)
    setup_logging_bridge(LOGGER_NAME)
    logging.getLogger(LOGGER_NAME).error("to the console")
    handle.shutdown(timeout_ms=10000)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    records = [
        record
        for request in (json.loads(line) for line in lines)
        for resource_logs in request["resourceLogs"]
        for scope_logs in resource_logs["scopeLogs"]
        for record in scope_logs["logRecords"]
    ]
    assert [record["body"]["stringValue"] for record in records] == ["to the console"]
    assert records[0]["severityText"] == "ERROR"


def test_prometheus_without_a_logs_endpoint_builds_no_logger_provider(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """exporter='prometheus' alone sends logs nowhere: setup installs no logger provider,
    the bridge attaches nothing, and one INFO line says why."""
    from nemo.lens._sdk._logging import sdk_logger_provider

    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    config = logs_config("prometheus")
    config.metrics_enabled = True
    with caplog.at_level(logging.INFO, logger="nemo.lens._sdk._exporters"):
        handle = setup_telemetry(config, _allow_reinit=True)
    setup_logging_bridge(LOGGER_NAME)
    assert sdk_logger_provider() is None
    logger = logging.getLogger(LOGGER_NAME)
    assert not any(getattr(h, "_nemo_lens_logging_bridge", False) for h in logger.handlers)
    said = [r for r in caplog.records if "Prometheus serves metrics only" in r.getMessage()]
    assert len(said) == 1
    assert said[0].levelno == logging.INFO
    handle.shutdown(timeout_ms=5000)


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
)
def test_prometheus_with_a_logs_endpoint_sends_logs_over_otlp(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """exporter='prometheus' plus the logs (or the general) OTLP endpoint: logs go there."""
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    with OtlpReceiver("grpc") as receiver:
        monkeypatch.setenv(variable, receiver.signal_endpoint("logs"))
        config = logs_config("prometheus")
        config.metrics_enabled = True
        handle = setup_telemetry(config, _allow_reinit=True)
        setup_logging_bridge(LOGGER_NAME)
        logging.getLogger(LOGGER_NAME).warning("beside prometheus")
        handle.shutdown(timeout_ms=10000)
        assert [log.body for log in receiver.received.logs()] == ["beside prometheus"]


def test_logs_disabled_installs_no_logger_provider() -> None:
    """Without logs_enabled the bridge finds no SDK provider and attaches nothing."""
    config = logs_config("console")
    config.logs_enabled = False
    handle = setup_telemetry(config, _allow_reinit=True)
    setup_logging_bridge(LOGGER_NAME)
    logger = logging.getLogger(LOGGER_NAME)
    assert not any(getattr(h, "_nemo_lens_logging_bridge", False) for h in logger.handlers)
    handle.shutdown(timeout_ms=2000)


def test_force_flush_exports_the_records_logged_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    """handle.force_flush() pushes queued records out before the batch delay."""
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "600000")
    with OtlpReceiver("grpc") as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", receiver.signal_endpoint("logs"))
        handle = setup_logs()
        logging.getLogger(LOGGER_NAME).warning("flushed")
        assert handle.force_flush(timeout_ms=10000)
        assert [log.body for log in receiver.received.logs()] == ["flushed"]
        handle.shutdown(timeout_ms=10000)
        assert len(receiver.received.logs()) == 1


HANGING_COLLECTOR_PROGRAM = f"""
import logging, time
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge

config = NemoLensConfig(enabled=True, logs_enabled=True, metrics_enabled=False)
config.traces_enabled = False
handle = setup_telemetry(config)
setup_logging_bridge("app")
logging.getLogger("app").warning("never answered")
started = time.monotonic()
handle.shutdown(timeout_ms=1000)
print("shutdown took", time.monotonic() - started)
print({MARKER!r}, flush=True)
"""


def test_shutdown_keeps_its_budget_when_the_logs_collector_hangs() -> None:
    """A logs collector that never answers costs shutdown about its budget (1 s), not the
    exporter's 10 s timeout, and the process exits promptly after it."""
    # In a child interpreter: the export shutdown abandons keeps running (and logging its
    # failure) after shutdown returns, which must not spill into another test.
    with HangingListener() as listener:
        env = {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": listener.endpoint}
        run = run_child(HANGING_COLLECTOR_PROGRAM, env, 60.0)
    assert not run.timed_out, run.stderr
    assert run.returncode == 0, run.stderr
    took = float(run.stdout.split("shutdown took", 1)[1].split()[0])
    # Generous against a shared machine, and far under the exporter's own 10 s.
    assert took < 4.0
    assert run.after_marker_s is not None
    assert run.after_marker_s < 4.0


FORK_PROGRAM = """
import logging, os, sys, time
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge

config = NemoLensConfig(enabled=True, logs_enabled=True, metrics_enabled=False)
handle = setup_telemetry(config)
setup_logging_bridge("app")
logger = logging.getLogger("app")
logger.setLevel(logging.INFO)
logger.warning("parent before fork")
pid = os.fork()
if pid == 0:
    logger.warning("child record")
    # A normal interpreter exit: atexit handlers and logging.shutdown() run here.
    sys.exit(0)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    sys.exit("the forked child hung")
logger.warning("parent after fork")
handle.shutdown(timeout_ms=10000)
print("child exit status", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.fork
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_forked_child_never_hangs_and_never_re_exports_parent_records(transport: str) -> None:
    """A child forked with the logs pipeline running exits at once and exports nothing:
    the parent's records arrive exactly once, the child's not at all."""
    with OtlpReceiver(transport) as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": receiver.signal_endpoint("logs"),
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if transport == "grpc" else "http/protobuf",
            # Records sit in the batch queue when the fork happens.
            "OTEL_BLRP_SCHEDULE_DELAY": "600000",
        }
        run = run_child(FORK_PROGRAM, env, 60.0)
        assert not run.timed_out, run.stderr
        assert run.returncode == 0, run.stderr
        assert "child exit status 0" in run.stdout
        bodies = [log.body for log in receiver.received.logs()]
    assert sorted(bodies) == ["parent after fork", "parent before fork"]


CHILD_SETUP_PROGRAM = """
import logging, os, sys, time
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.logging_bridge import setup_logging_bridge

config = NemoLensConfig(enabled=True, logs_enabled=True, metrics_enabled=False)
handle = setup_telemetry(config)
setup_logging_bridge("app")
logger = logging.getLogger("app")
logger.setLevel(logging.INFO)
logger.warning("from the parent")
pid = os.fork()
if pid == 0:
    child = setup_telemetry(NemoLensConfig(enabled=True, logs_enabled=True, metrics_enabled=False))
    setup_logging_bridge("app")
    logger.warning("from the child")
    child.shutdown(timeout_ms=10000)
    os._exit(0)
_, status = os.waitpid(pid, 0)
handle.shutdown(timeout_ms=10000)
print("child", pid, "exit status", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.fork
def test_a_forked_child_that_sets_up_exports_its_own_records() -> None:
    """A child's own setup_telemetry replaces the inherited global logger provider: its
    records arrive once, under its own pid, and the parent's once under the parent's."""
    with OtlpReceiver("grpc") as receiver:
        env = {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": receiver.signal_endpoint("logs")}
        run = run_child(CHILD_SETUP_PROGRAM, env, 60.0)
        assert not run.timed_out, run.stderr
        assert run.returncode == 0, run.stderr
        assert "exit status 0" in run.stdout
        child_pid = run.stdout.split()[1]
        logs = receiver.received.logs()
    pids = {log.body: log.resource["process.pid"] for log in logs}
    assert sorted(log.body for log in logs) == ["from the child", "from the parent"]
    assert pids["from the child"] == child_pid
    assert pids["from the parent"] != child_pid


def test_the_logs_resource_is_the_one_the_other_signals_get() -> None:
    """The logger provider carries exactly the tracer provider's resource attributes."""
    from opentelemetry import trace

    from nemo.lens._sdk._logging import sdk_logger_provider

    config = logs_config("console")
    handle = setup_telemetry(config, _allow_reinit=True, resource_attributes={"team": "rl"})
    provider = sdk_logger_provider()
    assert provider is not None
    tracer_resource = trace.get_tracer_provider().resource  # type: ignore[attr-defined]
    assert dict(provider.resource.attributes) == dict(tracer_resource.attributes)
    assert provider.resource.attributes["team"] == "rl"
    assert provider.resource.attributes["process.pid"] == os.getpid()
    handle.shutdown(timeout_ms=2000)
