"""record_rl_metrics issues one DeprecationWarning per process, at the caller's line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings
from typing import Any

import pytest

import lens_compat_rl
from lens_compat_rl import record_rl_metrics
from lens_compat_rl._record import REMOVAL_RELEASE

# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 30


def _deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.usefixtures("armed_deprecation")
def test_first_call_warns_once_naming_the_replacement_and_the_removal(pipeline: Any) -> None:
    """Only the first of many calls warns; the message names register_metric_group,
    record_metrics(meter, 'rl', ...) and the removal release."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            record_rl_metrics(pipeline.meter, reward_mean=float(step))

    (warning,) = _deprecations(caught)
    message = str(warning.message)
    assert "register_metric_group" in message
    assert "record_metrics(meter, 'rl'" in message
    assert f"lens {REMOVAL_RELEASE}" in message
    assert REMOVAL_RELEASE == "0.5.0"


@pytest.mark.usefixtures("armed_deprecation")
def test_warning_points_at_the_callers_line(pipeline: Any) -> None:
    """The warning carries the file and line that called the legacy function, not the
    shim's or lens-core's."""
    import nemo.lens.instruments.rl as legacy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_line = sys._getframe().f_lineno + 1
        legacy.record_rl_metrics(pipeline.meter, grad_norm=1.0)

    (warning,) = _deprecations(caught)
    assert warning.filename == __file__
    assert warning.lineno == call_line


@pytest.mark.usefixtures("armed_deprecation")
def test_values_are_recorded_even_when_the_warning_is_an_error(pipeline: Any) -> None:
    """Under an "error" filter the single warning raises, after the values were recorded;
    later calls neither warn nor raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning, match="record_rl_metrics"):
            record_rl_metrics(pipeline.meter, policy_loss=0.5)
        record_rl_metrics(pipeline.meter, policy_loss=0.25)

    assert pipeline.points("rl.policy_loss")[0].value == 0.25


@pytest.mark.usefixtures("armed_deprecation")
def test_concurrent_first_calls_warn_exactly_once(pipeline: Any) -> None:
    """Eight threads making their first call at the same moment produce one warning."""
    thread_count = 8
    barrier = threading.Barrier(thread_count)

    def first_call(index: int) -> None:
        barrier.wait()
        record_rl_metrics(pipeline.meter, value_loss=float(index))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=first_call, args=(i,)) for i in range(thread_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert len(_deprecations(caught)) == 1
    assert len(pipeline.points("rl.value_loss")) == 1


def test_importing_is_quiet_and_registers_nothing() -> None:
    """A fresh interpreter imports both module paths and reads the signature with
    DeprecationWarning as an error: no warning, no registered group."""
    script = (
        "import inspect, json\n"
        "import nemo.lens.instruments.rl as legacy\n"
        "import lens_compat_rl\n"
        "from nemo.lens import registered_metric_groups\n"
        "params = list(inspect.signature(legacy.record_rl_metrics).parameters)\n"
        "print(json.dumps({'params': params, 'groups': sorted(registered_metric_groups())}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=CHILD_TIMEOUT,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert report["groups"] == []
    assert report["params"][0] == "meter"
    assert report["params"][-1] == "tokens_per_sec"
    assert len(report["params"]) == 13


def test_the_public_function_is_the_legacy_modules_function() -> None:
    """Both import paths give the same function, so they share one deprecation state."""
    import nemo.lens.instruments.rl as legacy

    assert legacy.record_rl_metrics is lens_compat_rl.record_rl_metrics


def test_reset_all_re_arms_the_deprecation(pipeline: Any) -> None:
    """The once-per-process warning is warn-once memory: nemo.lens.testing.reset_all()
    forgets it, so a consumer's test can assert the deprecation again."""
    from nemo.lens.testing import reset_all

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_rl_metrics(pipeline.meter, reward_mean=1.0)  # the fixture marked it issued
        assert _deprecations(caught) == []
        reset_all()
        record_rl_metrics(pipeline.meter, reward_mean=2.0)
        record_rl_metrics(pipeline.meter, reward_mean=3.0)
    assert len(_deprecations(caught)) == 1
