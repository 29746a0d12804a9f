"""Each shim's legacy function issues one DeprecationWarning per process, at the caller's line.

The tests record on each shim's `rollout_duration_ms`, a histogram both shims have, so a
histogram's count shows every value that was recorded. A fresh interpreter running a whole
legacy loop is in test_with_shim.py.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
import threading
import warnings
from typing import Any

import pytest
from lens_shims import EACH_SHIM, Shim, python_report


def _deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


@EACH_SHIM
@pytest.mark.usefixtures("armed_deprecation")
def test_only_the_first_call_warns_naming_the_replacement_and_the_removal(
    shim: Shim, pipeline: Any
) -> None:
    """One warning for many calls; it names the legacy function,
    register_metric_group('<group>', ...), record_metrics(meter, '<group>', ...), the
    shim's legacy specs, its migration page and the removal release, lens 0.5.0."""
    record = shim.function()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            record(pipeline.meter, rollout_duration_ms=float(step))

    (warning,) = _deprecations(caught)
    message = str(warning.message)
    assert importlib.import_module(shim.recording_module).REMOVAL_RELEASE == "0.5.0"
    assert "lens 0.5.0" in message
    assert f"{shim.legacy_function}()" in message
    assert f"register_metric_group('{shim.name}'" in message
    assert f"record_metrics(meter, '{shim.name}'" in message
    assert f"{shim.package}.{shim.specs_attribute}" in message
    assert f"docs/migrating-from-{shim.legacy_function.replace('_', '-')}.md" in message


@EACH_SHIM
@pytest.mark.usefixtures("armed_deprecation")
def test_the_warning_points_at_the_callers_line(shim: Shim, pipeline: Any) -> None:
    """The warning carries the file and line that called the legacy function, not the
    shim's or lens-core's."""
    legacy = importlib.import_module(shim.legacy_module)
    record = getattr(legacy, shim.legacy_function)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_line = sys._getframe().f_lineno + 1
        record(pipeline.meter, rollout_duration_ms=3.0)

    (warning,) = _deprecations(caught)
    assert (warning.filename, warning.lineno) == (__file__, call_line)


@EACH_SHIM
@pytest.mark.usefixtures("armed_deprecation")
def test_values_are_recorded_even_when_the_warning_is_an_error(shim: Shim, pipeline: Any) -> None:
    """Under an "error" filter the single warning raises after the values were recorded;
    later calls neither warn nor raise."""
    record = shim.function()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning, match=shim.legacy_function):
            record(pipeline.meter, rollout_duration_ms=100.0)
        record(pipeline.meter, rollout_duration_ms=300.0)

    (point,) = pipeline.points(f"{shim.name}.rollout.duration_ms")
    assert (point.count, point.sum) == (2, 400.0)


@EACH_SHIM
@pytest.mark.usefixtures("armed_deprecation")
def test_concurrent_first_calls_warn_exactly_once(shim: Shim, pipeline: Any) -> None:
    """Eight threads making their first call at the same moment produce one warning, and
    every value is recorded."""
    record = shim.function()
    thread_count = 8
    barrier = threading.Barrier(thread_count)

    def first_call() -> None:
        barrier.wait()
        record(pipeline.meter, rollout_duration_ms=1.0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=first_call) for _ in range(thread_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert len(_deprecations(caught)) == 1
    assert pipeline.points(f"{shim.name}.rollout.duration_ms")[0].count == thread_count


@EACH_SHIM
def test_reset_all_re_arms_the_deprecation(shim: Shim, pipeline: Any) -> None:
    """The once-per-process warning is warn-once memory: nemo.lens.testing.reset_all()
    forgets it, so a consumer's test can assert the deprecation again."""
    from nemo.lens.testing import reset_all

    record = shim.function()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record(pipeline.meter, rollout_duration_ms=1.0)  # the fixture marked it issued
        assert _deprecations(caught) == []
        reset_all()
        record(pipeline.meter, rollout_duration_ms=2.0)
        record(pipeline.meter, rollout_duration_ms=3.0)
    assert len(_deprecations(caught)) == 1


@EACH_SHIM
def test_importing_is_quiet_and_registers_nothing(shim: Shim, tmp_path: pathlib.Path) -> None:
    """A fresh interpreter imports both module paths and reads the legacy signature with
    DeprecationWarning as an error: no warning, no registered group."""
    script = (
        "import importlib, inspect, json, sys\n"
        "legacy_name, function, package = sys.argv[1:]\n"
        "legacy = importlib.import_module(legacy_name)\n"
        "importlib.import_module(package)\n"
        "from nemo.lens import registered_metric_groups\n"
        "params = list(inspect.signature(getattr(legacy, function)).parameters)\n"
        "print(json.dumps({'params': params, 'groups': sorted(registered_metric_groups())}))\n"
    )
    legacy = [shim.legacy_module, shim.legacy_function, shim.package]

    report = python_report(["-W", "error::DeprecationWarning", "-c", script, *legacy], cwd=tmp_path)

    assert report["groups"] == []
    assert report["params"][0] == "meter"
    assert report["params"] == list(inspect.signature(shim.function()).parameters)
