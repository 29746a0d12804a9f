"""record_gym_metrics issues one DeprecationWarning per process, at the caller's line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lens_compat_gym import record_gym_metrics
from lens_compat_gym._record import REMOVAL_RELEASE

RunChild = Callable[..., subprocess.CompletedProcess[str]]

# A NeMo-Gym loop written against lens 0.2: it only knows the legacy import and call.
LEGACY_GYM_SCRIPT = textwrap.dedent(
    """\
    import json

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from nemo.lens.instruments.gym import record_gym_metrics

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("legacy-gym-servers")
    for step in range(3):
        request_ms, success_rate, servers = 10.0 * (step + 1), 0.25 * step, step + 2
        record_gym_metrics(meter, request_ms, 500.0, 20.0, success_rate, active_servers=servers)

    series = {}
    for resource_metrics in reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                (point,) = metric.data.data_points
                series[metric.name] = {
                    "type": type(metric.data).__name__,
                    "unit": metric.unit,
                    "value": getattr(point, "value", None),
                    "count": getattr(point, "count", None),
                    "sum": getattr(point, "sum", None),
                }
    print(json.dumps(series))
    """
)
CALL_LINE = next(
    number
    for number, line in enumerate(LEGACY_GYM_SCRIPT.splitlines(), start=1)
    if line.strip().startswith("record_gym_metrics(")
)


def _deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.usefixtures("armed_deprecation")
def test_only_the_first_call_warns_naming_the_replacement_and_the_removal(pipeline: Any) -> None:
    """One warning for many calls; it names register_metric_group('gym', ...),
    record_metrics(meter, 'gym', ...), LEGACY_GYM_SPECS, the docs page and lens 0.5.0."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            record_gym_metrics(pipeline.meter, active_servers=step)

    (warning,) = _deprecations(caught)
    message = str(warning.message)
    assert REMOVAL_RELEASE == "0.5.0"
    assert "lens 0.5.0" in message
    assert "register_metric_group('gym'" in message
    assert "record_metrics(meter, 'gym'" in message
    assert "lens_compat_gym.LEGACY_GYM_SPECS" in message
    assert "docs/migrating-from-record-gym-metrics.md" in message


@pytest.mark.usefixtures("armed_deprecation")
def test_the_warning_points_at_the_callers_line(pipeline: Any) -> None:
    """The warning carries the file and line that called the legacy function."""
    import nemo.lens.instruments.gym as legacy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_line = sys._getframe().f_lineno + 1
        legacy.record_gym_metrics(pipeline.meter, verify_duration_ms=3.0)

    (warning,) = _deprecations(caught)
    assert (warning.filename, warning.lineno) == (__file__, call_line)


@pytest.mark.usefixtures("armed_deprecation")
def test_values_are_recorded_even_when_the_warning_is_an_error(pipeline: Any) -> None:
    """Under an "error" filter the single warning raises after the values were recorded;
    later calls neither warn nor raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning, match="record_gym_metrics"):
            record_gym_metrics(pipeline.meter, rollout_duration_ms=100.0)
        record_gym_metrics(pipeline.meter, rollout_duration_ms=300.0)

    assert pipeline.points("gym.rollout.duration_ms")[0].count == 2


@pytest.mark.usefixtures("armed_deprecation")
def test_concurrent_first_calls_warn_exactly_once(pipeline: Any) -> None:
    """Eight threads making their first call at the same moment produce one warning, and
    every value is recorded."""
    thread_count = 8
    barrier = threading.Barrier(thread_count)

    def first_call() -> None:
        barrier.wait()
        record_gym_metrics(pipeline.meter, server_request_duration_ms=1.0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=first_call) for _ in range(thread_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert len(_deprecations(caught)) == 1
    assert pipeline.points("gym.server.request_duration_ms")[0].count == thread_count


def test_reset_all_re_arms_the_deprecation(pipeline: Any) -> None:
    """The once-per-process warning is warn-once memory: nemo.lens.testing.reset_all()
    forgets it, so a consumer's test can assert the deprecation again."""
    from nemo.lens.testing import reset_all

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_gym_metrics(pipeline.meter, active_servers=1)  # the fixture marked it issued
        assert _deprecations(caught) == []
        reset_all()
        record_gym_metrics(pipeline.meter, active_servers=2)
        record_gym_metrics(pipeline.meter, active_servers=3)
    assert len(_deprecations(caught)) == 1


def test_importing_is_quiet_and_registers_nothing(run_child: RunChild, tmp_path: Path) -> None:
    """A fresh interpreter imports both module paths and reads the signature with
    DeprecationWarning as an error: no warning, no registered group."""
    script = (
        "import inspect, json\n"
        "import nemo.lens.instruments.gym as legacy\n"
        "import lens_compat_gym\n"
        "from nemo.lens import registered_metric_groups\n"
        "params = list(inspect.signature(legacy.record_gym_metrics).parameters)\n"
        "print(json.dumps({'params': params, 'groups': sorted(registered_metric_groups())}))\n"
    )

    result = run_child(["-W", "error::DeprecationWarning", "-c", script], cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert report["groups"] == []
    assert report["params"] == [
        "meter",
        "server_request_duration_ms",
        "rollout_duration_ms",
        "verify_duration_ms",
        "verify_success_rate",
        "active_servers",
    ]


def test_a_legacy_gym_loop_records_all_series_and_warns_once(
    run_child: RunChild, tmp_path: Path
) -> None:
    """In a fresh interpreter, unchanged legacy Gym code records the five series with their
    kinds and units, and sees one DeprecationWarning at its own call line even with every
    warning shown."""
    script = tmp_path / "legacy_gym_loop.py"
    script.write_text(LEGACY_GYM_SCRIPT)

    result = run_child(["-W", "always", script], cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    series = json.loads(result.stdout)
    assert {name: (s["type"], s["unit"]) for name, s in series.items()} == {
        "gym.server.request_duration_ms": ("Histogram", "ms"),
        "gym.rollout.duration_ms": ("Histogram", "ms"),
        "gym.verify.duration_ms": ("Histogram", "ms"),
        "gym.verify.success_rate": ("Gauge", ""),
        "gym.servers.active": ("Gauge", ""),
    }
    request = series["gym.server.request_duration_ms"]
    assert (request["count"], request["sum"]) == (3, 60.0)
    assert series["gym.verify.success_rate"]["value"] == 0.5
    assert series["gym.servers.active"]["value"] == 4
    assert result.stderr.count("DeprecationWarning") == 1
    assert f"legacy_gym_loop.py:{CALL_LINE}: DeprecationWarning" in result.stderr
    assert "record_metrics(meter, 'gym'" in result.stderr
