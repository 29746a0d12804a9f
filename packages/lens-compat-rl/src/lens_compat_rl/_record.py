"""`record_rl_metrics`: the legacy per-step call, mapped onto lens-core's metric registry.

The shim never creates an instrument itself: lens-core's `LegacyRecorder`, shared by every
deprecation shim, registers the legacy "rl" group only when no one else has, records
through `record_metrics`, never raises and issues the one `DeprecationWarning`.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from lens_compat_rl._specs import LEGACY_RL_GROUP, LEGACY_RL_SPECS
from nemo.lens.instruments._legacy_recorder import LegacyRecorder

#: The lens release that no longer has a lens-compat-rl to go with it.
REMOVAL_RELEASE: Final = "0.5.0"
DEPRECATION_MESSAGE: Final = (
    "record_rl_metrics() from nemo.lens.instruments.rl is deprecated and goes away in lens "
    f"{REMOVAL_RELEASE}, together with lens-compat-rl. Declare the series once with "
    "nemo.lens.register_metric_group('rl', specs) (lens_compat_rl.LEGACY_RL_SPECS keeps the "
    "legacy series names) and record each step with "
    "nemo.lens.record_metrics(meter, 'rl', reward_mean=..., ...). "
    "See docs/migrating-from-record-rl-metrics.md."
)

_recorder = LegacyRecorder(
    "record_rl_metrics",
    LEGACY_RL_GROUP,
    LEGACY_RL_SPECS,
    DEPRECATION_MESSAGE,
    logging.getLogger(__name__),
)


def record_rl_metrics(
    meter: Any,
    reward_mean: float | None = None,
    kl_divergence: float | None = None,
    policy_loss: float | None = None,
    value_loss: float | None = None,
    entropy: float | None = None,
    response_length_mean: float | None = None,
    grad_norm: float | None = None,
    learning_rate: float | None = None,
    throughput_tokens_per_sec: float | None = None,
    generation_duration_ms: float | None = None,
    rollout_duration_ms: float | None = None,
    tokens_per_sec: float | None = None,
) -> None:
    """Record legacy RL metrics into the metric group "rl". Deprecated.

    If no group "rl" is registered, the legacy definition (`LEGACY_RL_SPECS`) is
    registered first, so the series keep their legacy names, kinds and units. If a
    consumer registered "rl", the values go into that group under these keyword names,
    and a keyword the group does not declare is skipped with lens-core's once-per-key
    warning. `None` values are skipped.

    Never raises an `Exception` of its own. The first call in a process issues one
    `DeprecationWarning` at the caller's line, after the values are recorded; a warning
    filter set to "error" turns that one warning into an exception, as it would for any
    deprecated call.

    The parameters stay positional-or-keyword, in the legacy order and without
    `**kwargs`, because callers filter their keywords against `inspect.signature`.

    Args:
        meter: The meter to record on, usually `handle.meter`.
        reward_mean: Each keyword after `meter` is one value for the `LEGACY_RL_SPECS`
            entry whose key is that keyword (`reward_mean` -> `rl.reward.mean`, ...,
            `rollout_duration_ms` -> `rl.rollout.duration_ms`).
        tokens_per_sec: The keyword of the first registry revision, which set its own
            gauge: recorded as `rl.tokens_per_sec`, beside (not instead of)
            `throughput_tokens_per_sec`'s `rl.throughput.tokens_per_sec`.
    """
    # Only the values given (see LegacyRecorder.record): plain ifs cost least per step.
    values: dict[str, float] = {}
    if reward_mean is not None:
        values["reward_mean"] = reward_mean
    if kl_divergence is not None:
        values["kl_divergence"] = kl_divergence
    if policy_loss is not None:
        values["policy_loss"] = policy_loss
    if value_loss is not None:
        values["value_loss"] = value_loss
    if entropy is not None:
        values["entropy"] = entropy
    if response_length_mean is not None:
        values["response_length_mean"] = response_length_mean
    if grad_norm is not None:
        values["grad_norm"] = grad_norm
    if learning_rate is not None:
        values["learning_rate"] = learning_rate
    if throughput_tokens_per_sec is not None:
        values["throughput_tokens_per_sec"] = throughput_tokens_per_sec
    if generation_duration_ms is not None:
        values["generation_duration_ms"] = generation_duration_ms
    if rollout_duration_ms is not None:
        values["rollout_duration_ms"] = rollout_duration_ms
    if tokens_per_sec is not None:
        values["tokens_per_sec"] = tokens_per_sec
    _recorder.record(meter, values)
