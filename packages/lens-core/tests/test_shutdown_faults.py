"""Shutdown and exit against collectors that are down or hang, with real OTLP receivers.

Each signal gets its own share of the shutdown budget, so a dead traces collector cannot
starve the metrics export; each signal is exported once at shutdown; and once
`shutdown()` returns the process exits without waiting on an exporter. A forgotten
`shutdown()` is done by lens's own bounded exit hook. The faulty runs happen in child
interpreters (each bounded by a timeout and killed past it), so no exporter left
retrying against a dead port outlives its test, and exit itself can be timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import lens_children
import pytest
from lens_children import MARKER, ChildRun, otlp_env
from lens_receivers import HangingListener, OtlpReceiver, dead_endpoint

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    _shutdown,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import isolated_telemetry

# Each test runs child processes against dead or hanging collectors for seconds: the soak
# sessions run them (at both OpenTelemetry ends), the matrix cells do not.
pytestmark = [pytest.mark.e2e, pytest.mark.soak]

TRANSPORTS = ("grpc", "http")
#: Every child is killed past this; the defects under test took 10-48 s.
CHILD_TIMEOUT_S = 120.0
#: "Exits promptly": far above the ~0.1 s measured, far below the 5-20 s of the defect.
PROMPT_EXIT_S = 3.0
METRIC_POINTS = 3000

CHILD_PRELUDE = f"""
import sys
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry

handle = setup_telemetry(NemoLensConfig(enabled=True, service_name="faults"))
specs = [MetricSpec(f"m{{i}}", f"faults.m{{i}}", "counter") for i in range(10)]
register_metric_group("faults", specs)
# 3,000 distinct points: 10 counters x 300 attribute sets (under the SDK's cardinality cap).
for point in range({METRIC_POINTS}):
    values = {{f"m{{point % 10}}": 1}}
    record_metrics(handle.meter, "faults", attributes={{"p": point // 10}}, **values)
for step in range(50):
    with handle.tracer.start_as_current_span("step"):
        pass
"""

SHUTDOWN_CHILD = (
    CHILD_PRELUDE
    + f"""
handle.shutdown(timeout_ms=int(sys.argv[1]))
print("{MARKER}", flush=True)
"""
)

# Ends the moment shutdown() returns, as a job killed right after it would: what arrived
# is what shutdown itself delivered, not what a slow exit delivered later.
SHUTDOWN_THEN_KILLED_CHILD = (
    CHILD_PRELUDE
    + f"""
import os
handle.shutdown(timeout_ms=int(sys.argv[1]))
print("{MARKER}", flush=True)
os._exit(0)
"""
)

FORGETFUL_CHILD = (
    CHILD_PRELUDE
    + f"""
print("{MARKER}", flush=True)
"""
)

FORKING_CHILD = (
    CHILD_PRELUDE
    + f"""
import os
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: the atexit hooks the child inherited run here
os.waitpid(pid, 0)
handle.shutdown(timeout_ms=10000)
print("{MARKER}", flush=True)
"""
)


def run_child(program: str, environ: dict[str, str], *args: str) -> ChildRun:
    """Run `program` in a fresh interpreter; fail the test if it outlives CHILD_TIMEOUT_S."""
    run = lens_children.run_child(program, environ, CHILD_TIMEOUT_S, *args)
    if run.timed_out:
        pytest.fail(f"the child did not exit within {CHILD_TIMEOUT_S} s: {run.stderr}")
    assert run.after_marker_s is not None, run.stderr
    return run


def exit_seconds(run: ChildRun) -> float:
    """Seconds from the child's marker line to its exit."""
    assert run.after_marker_s is not None
    return run.after_marker_s


@contextmanager
def failed_collector(kind: str) -> Iterator[str]:
    """The endpoint of a collector that is `dead` (port refuses) or `hanging` (never answers)."""
    if kind == "dead":
        yield dead_endpoint()
        return
    with HangingListener() as listener:
        yield listener.endpoint


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", ["dead", "hanging"])
def test_metrics_reach_their_collector_when_the_traces_collector_fails(
    transport: str, kind: str
) -> None:
    """shutdown(2000 ms) delivers all 3,000 metric points though the traces collector fails."""
    with OtlpReceiver(transport) as receiver, failed_collector(kind) as traces:
        environ = otlp_env(transport, traces, receiver.endpoint)
        run = run_child(SHUTDOWN_THEN_KILLED_CHILD, environ, "2000")
        assert run.returncode == 0, run.stderr
        assert receiver.received.point_count("faults.") == METRIC_POINTS


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_spans_reach_their_collector_when_the_metrics_collector_hangs(transport: str) -> None:
    """The other way round: a hanging metrics collector does not starve the spans."""
    with OtlpReceiver(transport) as receiver, failed_collector("hanging") as metrics:
        environ = otlp_env(transport, receiver.endpoint, metrics)
        run = run_child(SHUTDOWN_THEN_KILLED_CHILD, environ, "2000")
        assert run.returncode == 0, run.stderr
        assert receiver.received.span_count() == 50


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("kind", ["dead", "hanging"])
def test_the_process_exits_promptly_once_shutdown_returned(transport: str, kind: str) -> None:
    """Both collectors down or hanging: once shutdown() returns, exit waits on no exporter."""
    with failed_collector(kind) as endpoint:
        run = run_child(SHUTDOWN_CHILD, otlp_env(transport, endpoint, endpoint), "1000")
    assert run.returncode == 0, run.stderr
    assert exit_seconds(run) < PROMPT_EXIT_S, run.stderr


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_forgotten_shutdown_costs_at_most_the_exit_budget(transport: str) -> None:
    """No shutdown() and a hanging collector: exit within lens's exit budget (it took 20 s)."""
    with failed_collector("hanging") as endpoint:
        run = run_child(FORGETFUL_CHILD, otlp_env(transport, endpoint, endpoint))
    assert run.returncode == 0, run.stderr
    assert exit_seconds(run) < _shutdown.EXIT_TIMEOUT_MS / 1000 + PROMPT_EXIT_S, run.stderr


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_forgotten_shutdown_still_exports_everything_at_exit(transport: str) -> None:
    """lens's exit hook, not the SDK's, exports the metrics and spans nobody shut down."""
    with OtlpReceiver(transport) as receiver:
        run = run_child(FORGETFUL_CHILD, otlp_env(transport, receiver.endpoint, receiver.endpoint))
        assert run.returncode == 0, run.stderr
        assert receiver.received.point_count("faults.") == METRIC_POINTS
        assert receiver.received.span_count() == 50
        assert receiver.received.metric_requests == 1


def test_a_forked_child_leaving_normally_does_not_shut_down_its_parents_pipeline() -> None:
    """A child exiting through atexit leaves its parent's pipeline alone: one export in all."""
    with OtlpReceiver("grpc") as receiver:
        run = run_child(FORKING_CHILD, otlp_env("grpc", receiver.endpoint, receiver.endpoint))
        assert run.returncode == 0, run.stderr
        assert receiver.received.metric_requests == 1
        assert receiver.received.point_count("faults.") == METRIC_POINTS
        assert receiver.received.span_count() == 50


@pytest.fixture
def clean_otlp_env(clean_environ: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch = clean_environ
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    with isolated_telemetry(clear_span_registry=True):
        yield monkeypatch


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_shutdown_exports_each_signal_once(
    transport: str, clean_otlp_env: pytest.MonkeyPatch
) -> None:
    """One metrics export and one traces export at shutdown (a flush first made it two)."""
    with ExitStack() as stack:
        receiver = stack.enter_context(OtlpReceiver(transport))
        for name, value in otlp_env(transport, receiver.endpoint, receiver.endpoint).items():
            clean_otlp_env.setenv(name, value)
        handle = setup_telemetry(NemoLensConfig(enabled=True))
        register_metric_group("once", [MetricSpec("steps", "once.steps", "counter")])
        for _ in range(10):
            record_metrics(handle.meter, "once", steps=1)
            with handle.tracer.start_as_current_span("step"):
                pass
        handle.shutdown(timeout_ms=20000)
        assert receiver.received.metric_requests == 1
        assert receiver.received.values("once.steps") == [10]
        assert receiver.received.trace_requests == 1
        assert receiver.received.span_count() == 10
