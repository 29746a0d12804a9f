"""TelemetryHandle: properties, force_flush, and the bounded, idempotent shutdown."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import lens_otlp_json
import pytest
from lens_children import child_env, run_python
from lens_threads import eventually
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from nemo.lens import NemoLensConfig, TelemetryHandle, _shutdown, setup_telemetry
from nemo.lens.testing import in_memory_spans, isolated_telemetry
from nemo.lens.version import __version__


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


class CountingExporter(InMemorySpanExporter):
    """An in-memory exporter that also counts its shutdown calls."""

    def __init__(self) -> None:
        super().__init__()
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1
        super().shutdown()


class BlockingExporter(SpanExporter):
    """Blocks every export until released, like a collector that never answers."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(60)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def exporting_handle(exporter: SpanExporter) -> TelemetryHandle:
    return setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=exporter, metric_reader=InMemoryMetricReader()
    )


def shutdown_done(handle: TelemetryHandle) -> bool:
    """Read the private flag consumers name (a call, so mypy does not narrow it)."""
    return handle._shutdown_done


def test_tracer_and_meter_are_read_only_and_is_exporting_is_plain() -> None:
    """`tracer`/`meter` cannot be assigned; `is_exporting` can."""
    handle = TelemetryHandle(trace.NoOpTracer(), metrics.NoOpMeter("m"))
    assert handle.is_exporting is False
    with pytest.raises(AttributeError):
        handle.tracer = trace.NoOpTracer()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        handle.meter = metrics.NoOpMeter("other")  # type: ignore[misc]
    handle.is_exporting = True
    assert handle.is_exporting is True


def test_shutdown_is_idempotent_and_marks_itself_done() -> None:
    """A second shutdown does nothing: the exporter is shut down once."""
    exporter = CountingExporter()
    handle = exporting_handle(exporter)
    assert shutdown_done(handle) is False
    handle.shutdown()
    assert shutdown_done(handle) is True
    handle.shutdown(timeout_ms=10)
    assert exporter.shutdowns == 1


#: The budget of the call that interrupts a shutdown: the default, as Megatron-LM calls it.
INTERRUPTING_BUDGET_MS = 5000
#: "Returns promptly": far below that budget, with slack for a shared 2-core machine.
PROMPT_S = 1.0


def _shutdown_interrupted_before(position: int) -> float | None:
    """Shut a fresh setup down; before the `position`-th bytecode of that `shutdown()`,
    call `shutdown()` again from the same thread, as a SIGTERM handler landing there
    does. The seconds that second call took; None once `shutdown()` ran out of bytecodes.

    Opcode tracing stands in for the signal: CPython runs a Python signal handler between
    two bytecodes of the interrupted frame, which is exactly where a trace callback runs,
    so every place a signal can land is tried, one per call, deterministically.
    """
    exporter = CountingExporter()
    handle = exporting_handle(exporter)
    with handle.tracer.start_as_current_span("before"):
        pass
    code = TelemetryHandle.shutdown.__code__
    seen = 0
    elapsed: list[float] = []

    def on_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal seen
        if event == "opcode":
            seen += 1
            if seen == position:
                started = time.monotonic()
                handle.shutdown(timeout_ms=INTERRUPTING_BUDGET_MS)  # the "handler"
                elapsed.append(time.monotonic() - started)
        return on_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is not code or seen:
            return None
        frame.f_trace_opcodes = True
        return on_opcode

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        handle.shutdown(timeout_ms=INTERRUPTING_BUDGET_MS)
    finally:
        sys.settrace(previous)
    assert [span.name for span in exporter.get_finished_spans()] == ["before"]
    assert exporter.shutdowns == 1
    return elapsed[0] if elapsed else None


def _traces_opcodes() -> bool:
    """True where `sys.settrace` delivers per-opcode events (CPython 3.12.1 gives none)."""
    events: list[str] = []

    def on_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        events.append(event)
        return on_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return on_opcode

    def probe() -> int:
        return len(events)

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        probe()
    finally:
        sys.settrace(previous)
    return "opcode" in events


def test_a_shutdown_interrupted_anywhere_by_another_shutdown_never_stalls() -> None:
    """shutdown() from a handler landing at any bytecode of a running shutdown() is prompt."""
    if not _traces_opcodes():
        pytest.skip("this interpreter's sys.settrace gives no opcode events (CPython 3.12.1)")
    slow: dict[int, float] = {}
    position = 1
    while (took := _shutdown_interrupted_before(position)) is not None:
        if took >= PROMPT_S:
            slow[position] = round(took, 2)
            break  # one is enough: each costs the whole budget
        position += 1
    assert slow == {}  # {position: seconds} where the second call slept its budget
    assert position > 20  # it did walk shutdown()'s bytecode


def test_shutdown_flushes_everything_recorded_before_it() -> None:
    """Spans ended before shutdown are exported by it (batch processor flushed)."""
    exporter = CountingExporter()
    handle = exporting_handle(exporter)
    for index in range(50):
        with handle.tracer.start_as_current_span(f"s{index}"):
            pass
    handle.shutdown()
    assert len(exporter.get_finished_spans()) == 50


def test_force_flush_exports_without_shutting_down() -> None:
    """force_flush returns True, exports queued spans and keeps the pipeline running."""
    exporter = CountingExporter()
    handle = exporting_handle(exporter)
    with handle.tracer.start_as_current_span("before-flush"):
        pass
    assert handle.force_flush() is True
    assert [span.name for span in exporter.get_finished_spans()] == ["before-flush"]
    with handle.tracer.start_as_current_span("after-flush"):
        pass
    handle.shutdown()
    assert exporter.shutdowns == 1
    assert handle.force_flush() is False
    assert [span.name for span in exporter.get_finished_spans()][-1] == "after-flush"


def test_open_spans_are_ended_truncated_innermost_first() -> None:
    """Spans open at shutdown end child-first, marked truncated, with no ERROR status."""
    exporter = CountingExporter()
    handle = exporting_handle(exporter)
    job = handle.tracer.start_span("job")
    step = handle.tracer.start_span("step", context=trace.set_span_in_context(job))
    with handle.tracer.start_as_current_span("finished"):
        pass
    handle.shutdown()
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["finished", "step", "job"]
    for span in spans[1:]:
        assert span.attributes is not None
        assert span.attributes["nemo.span.truncated"] is True
        assert [event.name for event in span.events] == ["nemo.span.truncated"]
        assert "nemo.span.truncated.reason" in (span.events[0].attributes or {})
        assert span.status.status_code is not StatusCode.ERROR
    assert "nemo.span.truncated" not in (spans[0].attributes or {})
    assert not step.is_recording()


def test_blocked_shutdown_is_abandoned_with_a_warning_on_a_daemon_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider that blocks is abandoned at the budget: a warning, and a daemon thread."""
    exporter = BlockingExporter()
    handle = exporting_handle(exporter)
    with handle.tracer.start_as_current_span("stuck"):
        pass
    caplog.set_level(logging.WARNING, logger="nemo.lens._shutdown")
    try:
        handle.shutdown(timeout_ms=200)
        assert exporter.entered.wait(5)
        abandoned = [
            thread for thread in threading.enumerate() if thread.name == "nemo-lens-shutdown"
        ]
        assert abandoned
        assert all(thread.daemon for thread in abandoned)
        assert any(thread.is_alive() for thread in abandoned)
        assert "did not finish within 200 ms" in caplog.text
        assert "abandoned" in caplog.text
    finally:
        exporter.release.set()
        # The abandoned lane ends, and its worker goes idle (renamed).
        assert eventually(
            lambda: all(t.name != "nemo-lens-shutdown" for t in threading.enumerate())
        )


def test_a_second_setup_and_shutdown_starts_no_thread_of_lens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A setup and its shutdown start lens's workers (one idle for exit, one per lane);
    they wait idle afterwards, so the next setup and shutdown start none."""
    # Setups other tests left pending at exit, and their idle workers, are not this test's.
    monkeypatch.setattr(_shutdown, "_at_exit", {})
    monkeypatch.setattr(_shutdown, "_idle", [])
    started: list[str] = []
    start = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for _ in range(2):
        started.clear()
        exporter = InMemorySpanExporter()
        handle = exporting_handle(exporter)
        with handle.tracer.start_as_current_span("step"):
            pass
        handle.shutdown()
        assert [span.name for span in exporter.get_finished_spans()] == ["step"]
        assert shutdown_done(handle)
        lens_started = [name for name in started if name.startswith("nemo-lens")]
        if not _shutdown._idle_here():  # the first round: the workers it started
            assert lens_started == ["nemo-lens-exit", "nemo-lens-shutdown"]
        assert eventually(lambda: len(_shutdown._idle_here()) == 2)
    assert lens_started == []


def test_idle_workers_leave_but_the_one_a_pending_exit_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle workers end after IDLE_S; while a setup is pending at exit, one stays (exit
    may find no thread it can start), and it runs that shutdown at exit."""
    monkeypatch.setattr(_shutdown, "_at_exit", {})
    monkeypatch.setattr(_shutdown, "_idle", [])
    monkeypatch.setattr(_shutdown, "IDLE_S", 0.05)
    first = exporting_handle(InMemorySpanExporter())
    first.shutdown()
    workers = [worker.thread for worker in _shutdown._idle_here()]
    assert workers
    assert eventually(lambda: not _shutdown._idle_here())
    assert eventually(lambda: not any(thread.is_alive() for thread in workers))
    exporter = InMemorySpanExporter()
    pending = exporting_handle(exporter)
    with pending.tracer.start_as_current_span("at exit"):
        pass
    time.sleep(0.3)  # several idle timeouts
    assert len(_shutdown._idle_here()) == 1
    _shutdown._run_at_exit()
    assert shutdown_done(pending)
    assert [span.name for span in exporter.get_finished_spans()] == ["at exit"]
    assert eventually(lambda: not _shutdown._idle_here())


def test_shutdown_never_raises_and_logs_a_failing_step(caplog: pytest.LogCaptureFixture) -> None:
    """A provider whose shutdown raises is logged, and shutdown returns normally."""

    class ExplodingProcessor(SpanProcessor):
        def shutdown(self) -> None:
            raise RuntimeError("processor exploded")

    spans = in_memory_spans(install=True)
    spans.provider.add_span_processor(ExplodingProcessor())
    handle = TelemetryHandle(trace.get_tracer("t"), metrics.get_meter("m"), is_exporting=True)
    caplog.set_level(logging.WARNING, logger="nemo.lens._shutdown")
    handle.shutdown()
    assert "processor exploded" in caplog.text


def test_hand_built_handle_shuts_down_the_global_providers() -> None:
    """A handle built by hand flushes and shuts down the current global providers."""
    spans = in_memory_spans(install=True)
    tracer = trace.get_tracer("hand-built")
    handle = TelemetryHandle(tracer, metrics.get_meter("hand-built"), is_exporting=True)
    with tracer.start_as_current_span("global"):
        pass
    handle.shutdown()
    assert spans.names() == ["global"]
    tracer.start_span("after-shutdown").end()
    assert spans.names() == ["global"]


def test_no_op_handle_shuts_down_nothing() -> None:
    """A disabled setup's handle leaves a global SDK provider (not its own) running."""
    spans = in_memory_spans(install=True)
    handle = setup_telemetry(NemoLensConfig())
    assert handle.force_flush() is True
    handle.shutdown()
    handle.shutdown()
    assert handle._shutdown_done is True
    trace.get_tracer("still-running").start_span("after").end()
    assert spans.names() == ["after"]


ATEXIT_SCRIPT = """
import atexit
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry

handle = setup_telemetry(NemoLensConfig(enabled=True, exporter="console", traces_enabled=False))
register_metric_group("exit", [MetricSpec("count", "exit.count", "counter")])
record_metrics(handle.meter, "exit", count=5)
atexit.register(handle.shutdown)  # as MLM does
"""


def test_shutdown_from_an_atexit_handler_flushes_without_error() -> None:
    """shutdown() run by atexit (where some Pythons refuse new threads) exports and never raises."""
    environ = child_env({"OTEL_METRIC_EXPORT_INTERVAL": "600000"})
    result = run_python("-c", ATEXIT_SCRIPT, env=environ)
    assert result.returncode == 0, result.stderr
    assert "Exception" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    values = lens_otlp_json.metric_values(result.stdout, "exit.count")
    assert values
    assert values[-1] == 5


def _metric_scopes(reader: InMemoryMetricReader) -> dict[str, str | None]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        scope.scope.name: scope.scope.version
        for resource_metrics in data.resource_metrics
        for scope in resource_metrics.scope_metrics
    }


def test_get_meter_and_get_tracer_give_the_callers_scope_on_the_setups_providers() -> None:
    """handle.get_meter/get_tracer(name, version): the framework's scope, this setup's export."""
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=spans, metric_reader=reader
    )
    handle.get_meter("megatron.core", "0.9.0").create_counter("mcore.steps").add(1)
    handle.get_meter("no.version").create_counter("plain.steps").add(1)
    handle.meter.create_counter("lens.steps").add(1)
    with handle.get_tracer("nemo_rl.algorithms", "1.2").start_as_current_span("framework"):
        pass
    with handle.tracer.start_as_current_span("lens"):
        pass
    scopes = _metric_scopes(reader)
    assert scopes["megatron.core"] == "0.9.0"
    assert not scopes["no.version"]
    assert scopes["nemo.lens"] == __version__
    handle.shutdown(timeout_ms=2000)
    by_name = {span.name: span.instrumentation_scope for span in spans.get_finished_spans()}
    framework, lens = by_name["framework"], by_name["lens"]
    assert framework is not None
    assert lens is not None
    assert (framework.name, framework.version) == ("nemo_rl.algorithms", "1.2")
    assert (lens.name, lens.version) == ("nemo.lens", __version__)


def test_a_no_op_handle_gives_no_op_meters_and_tracers_under_any_scope() -> None:
    """A disabled setup's get_meter/get_tracer are no-ops: nothing reaches any provider."""
    handle = setup_telemetry(NemoLensConfig(enabled=False))
    meter = handle.get_meter("framework", "1.0")
    tracer = handle.get_tracer("framework", "1.0")
    assert isinstance(meter, metrics.NoOpMeter)
    assert isinstance(tracer, trace.NoOpTracer)
    meter.create_counter("framework.steps").add(1)
    with tracer.start_as_current_span("nothing") as span:
        assert not span.get_span_context().is_valid


@pytest.mark.parametrize("recorded_before", [True, False], ids=["seen", "unseen"])
def test_recording_on_a_finished_setups_meter_warns_once(
    recorded_before: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """record_metrics on a meter of a shut-down setup is dropped with one warning, not silently."""
    from nemo.lens import MetricSpec, record_metrics, register_metric_group

    reader = InMemoryMetricReader()
    handle = setup_telemetry(NemoLensConfig(enabled=True), metric_reader=reader)
    register_metric_group("late", [MetricSpec("steps", "late.steps", "counter")])
    meter = handle.get_meter("framework")
    if recorded_before:
        record_metrics(meter, "late", steps=1)  # its emitter is cached before shutdown
    handle.shutdown()
    caplog.set_level(logging.WARNING, logger="nemo.lens")
    for _ in range(3):
        record_metrics(meter, "late", steps=1)
    warnings = [r.getMessage() for r in caplog.records if "shut down" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "'late'" in warnings[0]
