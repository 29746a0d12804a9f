"""lens-core with each shim installed: legacy code runs unchanged on the metric registry, its
module is the shim's, and the shim's distribution is laid out as lens-core expects.

How lens-core's finder serves a legacy name in general is tested in lens-core's
tests/test_legacy_modules.py, with a throwaway distribution; these tests pin what each
shim's own entry point and metadata make of it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pathlib
import textwrap
from typing import Any

import pytest
from lens_children import run_python
from lens_shims import EACH_SHIM, Shim
from packaging.requirements import Requirement

import nemo.lens
import nemo.lens.instruments
from nemo.lens import MetricSpec, record_metrics, register_metric_group
from nemo.lens._legacy_modules import ENTRY_POINT_GROUP, legacy_module_targets

# A loop written against lens 0.2: it only knows the legacy import and call. The loop's
# call and the module and function it imports are the shim's.
LEGACY_LOOP = textwrap.dedent(
    """\
    import json

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from {module} import {function}

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("legacy-loop")
    for step in range(3):
        {call}

    series = dict()
    for resource_metrics in reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                (point,) = metric.data.data_points
                value = [point.count, point.sum] if hasattr(point, "count") else point.value
                series[metric.name] = [type(metric.data).__name__, metric.unit, value]
    print(json.dumps(series))
    """
)
# Each shim's legacy step (`step` is 0, 1, 2) and the series three steps leave: kind, unit,
# and a gauge's last value or a histogram's [count, sum].
LEGACY_STEPS = {
    "rl": (
        "record_rl_metrics(meter, reward_mean=0.5 + step, "
        "generation_duration_ms=100.0 * (step + 1))",
        {
            "rl.reward.mean": ["Gauge", "", 2.5],
            "rl.generation.duration_ms": ["Histogram", "ms", [3, 600.0]],
        },
    ),
    "gym": (
        "record_gym_metrics(meter, 10.0 * (step + 1), 500.0, 20.0, 0.25 * step, "
        "active_servers=step + 2)",
        {
            "gym.server.request_duration_ms": ["Histogram", "ms", [3, 60.0]],
            "gym.rollout.duration_ms": ["Histogram", "ms", [3, 1500.0]],
            "gym.verify.duration_ms": ["Histogram", "ms", [3, 60.0]],
            "gym.verify.success_rate": ["Gauge", "", 0.5],
            "gym.servers.active": ["Gauge", "", 4],
        },
    ),
}


@EACH_SHIM
def test_a_legacy_loop_records_its_series_and_warns_once_at_its_call_line(
    shim: Shim, tmp_path: pathlib.Path
) -> None:
    """In a fresh interpreter, unchanged legacy code records its series with their legacy
    kinds, units and values, and sees one DeprecationWarning, at its own call line and
    naming the replacement, even with every warning shown."""
    call, expected = LEGACY_STEPS[shim.name]
    source = LEGACY_LOOP.format(module=shim.legacy_module, function=shim.legacy_function, call=call)
    script = tmp_path / "legacy_loop.py"
    script.write_text(source)
    call_line = source.splitlines().index(f"    {call}") + 1

    result = run_python("-W", "always", script, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected
    assert result.stderr.count("DeprecationWarning") == 1
    assert f"legacy_loop.py:{call_line}: DeprecationWarning" in result.stderr
    assert f"register_metric_group('{shim.name}'" in result.stderr
    assert f"record_metrics(meter, '{shim.name}'" in result.stderr


@EACH_SHIM
def test_the_legacy_module_is_the_shims_code(shim: Shim) -> None:
    """The legacy name is the module the shim's entry point names, served under the legacy
    name: its origin and file are that module's, in the shim's package, it takes that
    module's docstring and hands out the shim's own function; lens-core's instruments
    package holds no module of that name."""
    legacy = importlib.import_module(shim.legacy_module)
    served = importlib.import_module(shim.served_module)
    package = importlib.import_module(shim.package)

    assert legacy.__name__ == shim.legacy_module
    assert legacy.__spec__ is not None
    assert legacy.__spec__.origin == served.__file__
    assert legacy.__file__ == legacy.__spec__.origin
    assert pathlib.Path(str(legacy.__file__)).parent == pathlib.Path(str(package.__file__)).parent
    assert getattr(nemo.lens.instruments, shim.name) is legacy
    assert legacy.__all__ == [shim.legacy_function]
    assert legacy.__doc__ == served.__doc__
    assert getattr(legacy, shim.legacy_function) is shim.function()
    for directory in nemo.lens.instruments.__path__:
        assert not (pathlib.Path(directory) / f"{shim.name}.py").exists()
        assert not (pathlib.Path(directory) / shim.name).exists()


@EACH_SHIM
def test_the_distribution_declares_its_legacy_module_and_pins_lens_core(shim: Shim) -> None:
    """The shim's metadata has one entry point in lens-core's group, the only declaration of
    the legacy name, naming the shim's module; it requires lens-core and nothing else, at
    exactly the installed release, which is its own."""
    distribution = importlib.metadata.distribution(shim.distribution)

    (entry,) = distribution.entry_points.select(group=ENTRY_POINT_GROUP)
    declarations = [
        declared
        for declared in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if declared.name == shim.legacy_module
    ]
    (requirement,) = [Requirement(line) for line in distribution.requires or []]

    assert (entry.name, entry.value) == (shim.legacy_module, shim.served_module)
    assert [declared.value for declared in declarations] == [shim.served_module]
    assert legacy_module_targets()[shim.legacy_module] == shim.served_module
    version = importlib.import_module(shim.package).__version__
    assert distribution.version == version == nemo.lens.__version__
    assert requirement.name == "lens-core"
    assert str(requirement.specifier) == f"=={nemo.lens.__version__}"


@EACH_SHIM
def test_the_distribution_writes_nothing_outside_its_package(shim: Shim) -> None:
    """No file under nemo/ (lens-core's), no start-up hook: every Python file the
    distribution installs lies in its package, and only an editable install has a .pth."""
    distribution = importlib.metadata.distribution(shim.distribution)
    names = [file.as_posix() for file in distribution.files or []]
    direct_url = json.loads(distribution.read_text("direct_url.json") or "{}")
    editable = direct_url.get("dir_info", {}).get("editable", False)

    assert names
    assert not [name for name in names if name.startswith("nemo/")]
    python_files = [name for name in names if name.endswith(".py")]
    assert all(name.startswith(f"{shim.package}/") for name in python_files), python_files
    # Only an editable install has a .pth file: the installer's, pointing at src/.
    pth_files = [name for name in names if name.endswith(".pth")]
    assert len(pth_files) == (1 if editable else 0), pth_files


@EACH_SHIM
def test_every_public_name_imports(shim: Shim) -> None:
    """The package's __all__ is sorted and each of its names is an attribute of it."""
    package = importlib.import_module(shim.package)

    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None


@pytest.mark.shim("rl")
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
