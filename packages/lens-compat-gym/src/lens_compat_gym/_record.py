"""`record_gym_metrics`: the legacy per-step call, mapped onto lens-core's metric registry.

The shim never creates an instrument itself: lens-core's `LegacyRecorder`, shared by every
deprecation shim, registers the legacy "gym" group only when no one else has, records
through `record_metrics`, never raises and issues the one `DeprecationWarning`.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from lens_compat_gym._specs import LEGACY_GYM_GROUP, LEGACY_GYM_SPECS
from nemo.lens.instruments._legacy_recorder import LegacyRecorder

#: The lens release that no longer has a lens-compat-gym to go with it.
REMOVAL_RELEASE: Final = "0.5.0"
DEPRECATION_MESSAGE: Final = (
    "record_gym_metrics() from nemo.lens.instruments.gym is deprecated and goes away in lens "
    f"{REMOVAL_RELEASE}, together with lens-compat-gym. Declare the series once with "
    "nemo.lens.register_metric_group('gym', specs) (lens_compat_gym.LEGACY_GYM_SPECS keeps "
    "the legacy series names) and record each step with "
    "nemo.lens.record_metrics(meter, 'gym', rollout_duration_ms=..., ...). "
    "See docs/migrating-from-record-gym-metrics.md."
)

_recorder = LegacyRecorder(
    "record_gym_metrics",
    LEGACY_GYM_GROUP,
    LEGACY_GYM_SPECS,
    DEPRECATION_MESSAGE,
    logging.getLogger(__name__),
)


def record_gym_metrics(
    meter: Any,
    server_request_duration_ms: float | None = None,
    rollout_duration_ms: float | None = None,
    verify_duration_ms: float | None = None,
    verify_success_rate: float | None = None,
    active_servers: float | None = None,
) -> None:
    """Record legacy NeMo-Gym metrics into the metric group "gym". Deprecated.

    If no group "gym" is registered, the legacy definition (`LEGACY_GYM_SPECS`) is
    registered first, so the series keep their legacy names, kinds and units. If a
    consumer registered "gym", the values go into that group under these keyword names,
    and a keyword the group does not declare is skipped with lens-core's once-per-key
    warning. `None` values are skipped and create no instrument.

    Never raises an `Exception` of its own. The first call in a process issues one
    `DeprecationWarning` at the caller's line, after the values are recorded; a warning
    filter set to "error" turns that one warning into an exception, as it would for any
    deprecated call.

    The parameters stay positional-or-keyword, in the legacy order and without
    `**kwargs`, because callers filter their keywords against `inspect.signature`.

    Args:
        meter: The meter to record on, usually `handle.meter`.
        server_request_duration_ms: One request's duration, recorded on the
            `gym.server.request_duration_ms` histogram.
        rollout_duration_ms: One rollout's duration, on the `gym.rollout.duration_ms`
            histogram.
        verify_duration_ms: One verification's duration, on the `gym.verify.duration_ms`
            histogram.
        verify_success_rate: The fraction of verifications that succeeded, in [0, 1], set
            on the `gym.verify.success_rate` gauge.
        active_servers: How many Gym servers are serving, set on the `gym.servers.active`
            gauge.
    """
    # Only the values given (see LegacyRecorder.record): plain ifs cost least per step.
    values: dict[str, float] = {}
    if server_request_duration_ms is not None:
        values["server_request_duration_ms"] = server_request_duration_ms
    if rollout_duration_ms is not None:
        values["rollout_duration_ms"] = rollout_duration_ms
    if verify_duration_ms is not None:
        values["verify_duration_ms"] = verify_duration_ms
    if verify_success_rate is not None:
        values["verify_success_rate"] = verify_success_rate
    if active_servers is not None:
        values["active_servers"] = active_servers
    _recorder.record(meter, values)
