"""record_gym_metrics never raises an Exception into the Gym server: bad values of its own
keywords cost only their own series.

What every shim does alike (unusable meters, any values, failures inside lens-core, Ctrl-C,
the legacy table and series, the deprecation) is tested once per shim in the root tests/.
"""

from __future__ import annotations

from typing import Any

from lens_compat_gym import record_gym_metrics


def test_bad_values_cost_only_their_own_series(pipeline: Any) -> None:
    """A string, NaN, an arbitrary object or a negative duration is skipped; the valid
    values of the same call record."""
    record_gym_metrics(
        pipeline.meter,
        server_request_duration_ms="abc",  # type: ignore[arg-type]  # deliberately wrong
        rollout_duration_ms=float("nan"),
        verify_duration_ms=-5.0,
        verify_success_rate=object(),  # type: ignore[arg-type]  # deliberately wrong
        active_servers=3,
    )
    record_gym_metrics(pipeline.meter, verify_success_rate=0.5)

    assert pipeline.names() == {"gym.servers.active", "gym.verify.success_rate"}
    assert pipeline.points("gym.servers.active")[0].value == 3
    assert pipeline.points("gym.verify.success_rate")[0].value == 0.5
