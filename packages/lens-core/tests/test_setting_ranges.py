"""Every numeric setting lens reads has a range; beyond it the export plan refuses it.

Past the range the SDK fails on its own, quietly: a reader or batch thread dies of
`OverflowError` at its first wait (nothing is exported again), an OTLP timeout makes every
export fail, a queue size makes setup raise a raw `OverflowError`. The rules are tested on
the plan with explicit environments; the real setups run in child processes with a clean
environment (the SDK reads the real one), importing the same lens as this test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lens_children import child_env, run_python
from lens_cli import run_lens
from lens_env import clean_env
from lens_receivers import OtlpReceiver

import nemo.lens
from nemo.lens import NemoLensConfig
from nemo.lens._otel_env import metric_export_timeout_ms
from nemo.lens.errors import LensValueError

#: The source directory of the lens this test imported, for the children.
LENS_SOURCE = Path(nemo.lens.__file__).resolve().parents[2]
#: The documented ranges (docs/configuration.md, "Numeric ranges"): durations and sizes up
#: to 2**31 - 1 (milliseconds: about 24.8 days), the OTLP timeout up to that in seconds.
MAX_DURATION_MS = 2**31 - 1
MAX_OTLP_TIMEOUT_S = MAX_DURATION_MS // 1000
HUGE_MS = str(10**13)  # past threading.TIMEOUT_MAX (about 9.22e12 ms on Linux)
HUGE_COUNT = str(10**20)  # past sys.maxsize, which a deque's maxlen must fit

_DURATION = f"[1, {MAX_DURATION_MS}]"
_TIMEOUT = f"[0, {MAX_DURATION_MS}]"
_OTLP_TIMEOUT = f"[1, {MAX_OTLP_TIMEOUT_S}]"


def plan(exporter: str = "otlp", **environ: str) -> Any:
    """The export plan of an enabled setup with every signal on, for `environ` alone."""
    from nemo.lens._export_plan import build_export_plan  # here: fd238c0 predates it

    config = NemoLensConfig(enabled=True, exporter=exporter, logs_enabled=True)
    return build_export_plan(config, environ=environ)


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("OTEL_METRIC_EXPORT_INTERVAL", HUGE_MS, _DURATION),
        ("OTEL_METRIC_EXPORT_INTERVAL", str(MAX_DURATION_MS + 1), _DURATION),
        ("OTEL_BSP_SCHEDULE_DELAY", HUGE_MS, _DURATION),
        ("OTEL_BSP_EXPORT_TIMEOUT", HUGE_MS, _TIMEOUT),
        ("OTEL_BSP_MAX_QUEUE_SIZE", HUGE_COUNT, _DURATION),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", HUGE_COUNT, _DURATION),
        ("OTEL_BLRP_SCHEDULE_DELAY", HUGE_MS, _DURATION),
        ("OTEL_BLRP_EXPORT_TIMEOUT", HUGE_MS, _TIMEOUT),
        ("OTEL_BLRP_MAX_QUEUE_SIZE", HUGE_COUNT, _DURATION),
        ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", HUGE_COUNT, _DURATION),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", str(10**10), _OTLP_TIMEOUT),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(MAX_OTLP_TIMEOUT_S + 1), _OTLP_TIMEOUT),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", str(10**10), _OTLP_TIMEOUT),
    ],
)
def test_a_number_beyond_its_range_is_refused_naming_variable_value_and_range(
    variable: str, value: str, accepted: str
) -> None:
    """The plan raises LensValueError naming the variable, the value and the range."""
    with pytest.raises(LensValueError) as raised:
        plan(**{variable: value})

    message = str(raised.value)
    assert f"{variable}: {value!r}" in message
    assert accepted in message


def test_every_bound_itself_is_accepted() -> None:
    """The largest value of each range builds a plan that carries it."""
    largest = str(MAX_DURATION_MS)
    environ = {
        "OTEL_METRIC_EXPORT_INTERVAL": largest,
        "OTEL_EXPORTER_OTLP_TIMEOUT": str(MAX_OTLP_TIMEOUT_S),
        **{
            f"{prefix}_{name}": largest
            for prefix in ("OTEL_BSP", "OTEL_BLRP")
            for name in ("SCHEDULE_DELAY", "EXPORT_TIMEOUT", "MAX_QUEUE_SIZE")
        },
    }

    built = plan(**environ)

    assert built.signals["metrics"].interval_ms == MAX_DURATION_MS
    for signal in ("traces", "logs"):
        batch = built.signals[signal].batch
        assert batch.schedule_delay_ms == batch.export_timeout_ms == MAX_DURATION_MS
        assert batch.max_queue_size == MAX_DURATION_MS


@pytest.mark.parametrize("raw", ["1e300", str(10**13), str(MAX_DURATION_MS + 1)])
def test_a_metric_export_timeout_beyond_its_range_is_clamped_with_a_warning(raw: str) -> None:
    """OTEL_METRIC_EXPORT_TIMEOUT past the largest duration becomes it, with a warning."""
    timeout, warning = metric_export_timeout_ms({"OTEL_METRIC_EXPORT_TIMEOUT": raw})

    assert timeout == MAX_DURATION_MS
    assert warning is not None
    assert f"OTEL_METRIC_EXPORT_TIMEOUT: {raw!r}" in warning
    assert str(MAX_DURATION_MS) in warning


@pytest.mark.parametrize(
    "host",
    ["ü" * 70, "h\udcffst", "hôte", "exa mple"],
    ids=["long", "surrogate", "accent", "space"],
)
def test_a_prometheus_host_that_is_not_an_ascii_name_is_refused_naming_it(host: str) -> None:
    """A non-ASCII (or spaced) Prometheus host is a LensValueError from the plan."""
    with pytest.raises(LensValueError) as raised:
        plan("prometheus", OTEL_EXPORTER_PROMETHEUS_HOST=host)

    assert "OTEL_EXPORTER_PROMETHEUS_HOST" in str(raised.value)
    assert "ASCII" in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_METRIC_EXPORT_INTERVAL", HUGE_MS),
        ("OTEL_BSP_MAX_QUEUE_SIZE", HUGE_COUNT),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", str(10**10)),
    ],
)
def test_doctor_gives_the_plan_s_verdict_on_a_number_beyond_its_range(
    variable: str, value: str
) -> None:
    """`lens doctor` fails on the same out-of-range value, naming it and the range."""
    result = run_lens(
        "doctor",
        "--timeout",
        "0.2",
        env=clean_env({"NEMO_LENS_ENABLED": "1", variable: value}),
    )

    assert result.returncode == 1, result.stdout
    fails = [line for line in result.stdout.splitlines() if "FAIL" in line]
    assert any(f"{variable}: {value!r}" in line for line in fails), fails


def test_doctor_refuses_a_probe_timeout_no_socket_can_wait() -> None:
    """`lens doctor --timeout 1e300` is bad input (exit 2), not an OverflowError."""
    result = run_lens("doctor", "--timeout", "1e300", env=clean_env())

    assert result.returncode == 2
    assert f"a number of seconds >= 0 and <= {MAX_OTLP_TIMEOUT_S}" in result.stderr


# --- real setups, in child processes -----------------------------------------------------

_SETUP_CHILD = """
import json, os, sys, threading
died = []
threading.excepthook = lambda hook: died.append(
    f"{hook.thread.name}: {hook.exc_type.__name__}: {hook.exc_value}")
from opentelemetry import trace
from nemo.lens import MetricSpec, NemoLensConfig, record_metrics, register_metric_group
from nemo.lens import setup_telemetry
from nemo.lens.errors import LensValueError
outcome = {"error": None}
try:
    handle = setup_telemetry(NemoLensConfig(
        enabled=True, exporter="console", console_path=sys.argv[1], logs_enabled=True))
except Exception as exc:
    outcome["error"] = [type(exc).__name__, isinstance(exc, LensValueError), str(exc)]
else:
    register_metric_group("ranges", [MetricSpec("steps", "ranges.steps", "counter")])
    record_metrics(handle.meter, "ranges", steps=3)
    with handle.tracer.start_as_current_span("ranges.span"):
        pass
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(0.5)  # a thread that dies at its first wait is gone by now
    handle.shutdown(timeout_ms=5000)
text = open(sys.argv[1]).read() if os.path.exists(sys.argv[1]) else ""
outcome.update(died=died, metrics="ranges.steps" in text, spans="ranges.span" in text)
print(json.dumps(outcome))
"""


def console_setup_in_child(tmp_path: Path, **variables: str) -> dict[str, Any]:
    """An enabled console setup that records a metric and a span, then shuts down."""
    env = child_env(variables, python_path=[LENS_SOURCE])
    result = run_python("-c", _SETUP_CHILD, str(tmp_path / "out.jsonl"), env=env)
    assert result.returncode == 0, result.stderr
    outcome: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return outcome


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_METRIC_EXPORT_INTERVAL", HUGE_MS),
        ("OTEL_BSP_SCHEDULE_DELAY", HUGE_MS),
        ("OTEL_BLRP_SCHEDULE_DELAY", HUGE_MS),
        ("OTEL_BSP_MAX_QUEUE_SIZE", HUGE_COUNT),
    ],
)
def test_a_number_that_would_kill_an_sdk_thread_fails_setup_instead(
    tmp_path: Path, variable: str, value: str
) -> None:
    """Setup raises LensValueError naming the variable; before, a thread died unseen."""
    outcome = console_setup_in_child(tmp_path, **{variable: value})

    assert outcome["error"] is not None, outcome
    name, is_lens_error, message = outcome["error"]
    assert is_lens_error, (name, message)
    assert variable in message
    assert outcome["died"] == []


def test_at_the_largest_interval_and_delay_the_threads_live_and_shutdown_exports(
    tmp_path: Path,
) -> None:
    """The bounds are safe: no SDK thread dies and shutdown exports the metric and span."""
    largest = str(MAX_DURATION_MS)
    outcome = console_setup_in_child(
        tmp_path,
        OTEL_METRIC_EXPORT_INTERVAL=largest,
        OTEL_METRIC_EXPORT_TIMEOUT=largest,
        OTEL_BSP_SCHEDULE_DELAY=largest,
        OTEL_BSP_EXPORT_TIMEOUT=largest,
        OTEL_BLRP_SCHEDULE_DELAY=largest,
        OTEL_BSP_MAX_QUEUE_SIZE=largest,
    )

    assert outcome == {"error": None, "died": [], "metrics": True, "spans": True}


_SDK_READER_CHILD = """
import io, json, sys, threading
died = []
threading.excepthook = lambda hook: died.append(hook.exc_type.__name__)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
out = io.StringIO()
reader = PeriodicExportingMetricReader(
    ConsoleMetricExporter(out=out), export_interval_millis=int(sys.argv[1]))
provider = MeterProvider(metric_readers=[reader])
provider.get_meter("ranges").create_counter("ranges.steps").add(3)
for thread in threading.enumerate():
    if thread is not threading.main_thread():
        thread.join(0.5)
provider.shutdown()
print(json.dumps({"died": died, "exported": "ranges.steps" in out.getvalue()}))
"""


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        (HUGE_MS, {"died": ["OverflowError"], "exported": False}),
        (str(MAX_DURATION_MS), {"died": [], "exported": True}),
    ],
)
def test_the_sdk_reader_dies_and_exports_nothing_past_the_bound(
    interval: str, expected: dict[str, Any]
) -> None:
    """Why the bound exists: the SDK's own reader at 1e13 ms dies and never exports."""
    result = run_python("-c", _SDK_READER_CHILD, interval, env=child_env())

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == expected


_OTLP_CHILD = """
import json, sys
from nemo.lens import NemoLensConfig, setup_telemetry
from nemo.lens.errors import LensValueError
try:
    handle = setup_telemetry(NemoLensConfig(enabled=True, metrics_enabled=False))
except LensValueError as exc:
    print(json.dumps(str(exc)))
else:
    with handle.tracer.start_as_current_span("ranges.span"):
        pass
    handle.shutdown(timeout_ms=5000)
    print(json.dumps(None))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("transport", ["grpc", "http"])
@pytest.mark.parametrize(
    ("timeout", "refused"), [(str(10**10), True), (str(MAX_OTLP_TIMEOUT_S), False)]
)
def test_an_otlp_timeout_every_export_fails_on_is_refused_and_the_bound_exports(
    transport: str, timeout: str, refused: bool
) -> None:
    """A 1e10 s OTLP timeout fails setup (it made every export fail); the bound exports."""
    with OtlpReceiver(transport) as receiver:
        variables = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.signal_endpoint("traces"),
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if transport == "grpc" else "http/protobuf",
            "OTEL_EXPORTER_OTLP_TIMEOUT": timeout,
        }
        env = child_env(variables, python_path=[LENS_SOURCE])
        result = run_python("-c", _OTLP_CHILD, env=env)
        assert result.returncode == 0, result.stderr
        message = json.loads(result.stdout.splitlines()[-1])
        received = receiver.received.span_count()

    if refused:
        assert message is not None
        assert f"OTEL_EXPORTER_OTLP_TIMEOUT: {timeout!r}" in message
        assert received == 0
    else:
        assert (message, received) == (None, 1)
