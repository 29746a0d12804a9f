"""lens-core with lens-compat-rl: legacy code runs unchanged on the metric registry."""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from nemo.lens import MetricSpec, record_metrics, register_metric_group

pytestmark = pytest.mark.shim("rl")

# A training loop written against lens 0.2: it only knows the legacy import and call.
LEGACY_SCRIPT = textwrap.dedent(
    """\
    import json

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from nemo.lens.instruments.rl import record_rl_metrics

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("legacy-training-loop")
    for step in range(3):
        record_rl_metrics(meter, reward_mean=0.5 + step, generation_duration_ms=100.0 * (step + 1))

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
    for number, line in enumerate(LEGACY_SCRIPT.splitlines(), start=1)
    if line.strip().startswith("record_rl_metrics(")
)


def test_legacy_training_loop_records_and_warns_once(tmp_path: pathlib.Path) -> None:
    """In a fresh interpreter, unchanged legacy code records rl.reward.mean and the
    rl.generation.duration_ms histogram in ms, and sees one DeprecationWarning at its
    own call line even with every warning shown."""
    script = tmp_path / "legacy_training_loop.py"
    script.write_text(LEGACY_SCRIPT)

    result = subprocess.run(
        [sys.executable, "-W", "always", str(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )

    assert result.returncode == 0, result.stderr
    series = json.loads(result.stdout)
    assert set(series) == {"rl.reward.mean", "rl.generation.duration_ms"}
    assert series["rl.reward.mean"]["type"] == "Gauge"
    assert series["rl.reward.mean"]["value"] == 2.5
    assert series["rl.generation.duration_ms"]["type"] == "Histogram"
    assert series["rl.generation.duration_ms"]["unit"] == "ms"
    assert series["rl.generation.duration_ms"]["count"] == 3
    assert series["rl.generation.duration_ms"]["sum"] == 600.0
    assert result.stderr.count("DeprecationWarning") == 1
    assert f"legacy_training_loop.py:{CALL_LINE}: DeprecationWarning" in result.stderr
    assert "register_metric_group" in result.stderr


def test_legacy_module_is_lens_compat_rl_code() -> None:
    """The legacy name resolves to a module whose origin lies in lens_compat_rl."""
    import lens_compat_rl

    legacy = importlib.import_module("nemo.lens.instruments.rl")

    assert legacy.__spec__ is not None
    assert legacy.__spec__.origin is not None
    origin = pathlib.Path(legacy.__spec__.origin)
    assert origin.parent == pathlib.Path(lens_compat_rl.__file__).parent
    assert legacy.record_rl_metrics is lens_compat_rl.record_rl_metrics


def test_legacy_and_migrated_code_share_one_group(pipeline: Any) -> None:
    """A consumer halfway through migrating (its own "rl" group, some legacy calls left)
    gets one set of series, under its own names."""
    from nemo.lens.instruments.rl import record_rl_metrics

    register_metric_group(
        "rl",
        [
            MetricSpec("reward_mean", "nemo_rl.reward.mean", "gauge"),
            MetricSpec("rollout_duration_ms", "nemo_rl.rollout.duration", "histogram", unit="ms"),
        ],
    )

    record_rl_metrics(pipeline.meter, reward_mean=0.1, rollout_duration_ms=10.0)
    record_metrics(pipeline.meter, "rl", {"reward_mean": 0.2, "rollout_duration_ms": 30.0})

    metrics = pipeline.metrics()
    assert set(metrics) == {"nemo_rl.reward.mean", "nemo_rl.rollout.duration"}
    assert metrics["nemo_rl.reward.mean"].data.data_points[0].value == 0.2
    (histogram_point,) = metrics["nemo_rl.rollout.duration"].data.data_points
    assert (histogram_point.count, histogram_point.sum) == (2, 40.0)
