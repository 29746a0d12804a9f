"""`record_rl_metrics`: the legacy per-step call, mapped onto lens-core's metric registry.

The shim never creates an instrument itself. It makes sure a group named "rl" exists (the
legacy definition, unless a consumer registered its own) and hands the values to
`record_metrics`, so validation, caching, fork safety and the once-per-key warnings are
lens-core's, and a consumer's own "rl" definition always wins.

Whether "rl" exists is asked of the registry's own table on every call: one dict look-up
without the lock, the same look-up `record_metrics` makes next. (`registered_metric_groups()`
would copy every group under the registry lock on every step.) Asking each time, instead of
remembering that the group was registered, keeps the two cases a cached answer gets wrong:
a consumer's own "rl" registered later is found, and a group dropped by a test's registry
reset is registered again on the next call.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Final

from lens_compat_rl._specs import LEGACY_RL_GROUP, LEGACY_RL_SPECS
from nemo.lens._warn_once import WarnOnce
from nemo.lens.instruments import record_metrics, register_metric_group

# The registry's table itself, mutated in place and never rebound (lens-core binds it once
# for record_metrics the same way), so a membership test always sees the current groups.
from nemo.lens.instruments._registry import GROUPS as _GROUPS

__all__ = ["DEPRECATION_MESSAGE", "REMOVAL_RELEASE", "record_rl_metrics"]

_logger = logging.getLogger(__name__)

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

# lens-core's warn-once memory: the deprecation is issued by the first call only (exactly
# one, even when several threads make their first call together), and a broken set-up logs
# once per failure kind instead of every step. nemo.lens.testing.reset_all() forgets both.
_once = WarnOnce(_logger, "record_rl_metrics")
_DEPRECATION: Final = "deprecation"


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
    """
    try:
        if LEGACY_RL_GROUP not in _GROUPS:
            _register_legacy_group()
        # Only the values given: each None passed on would cost record_metrics a slow
        # look-up of its own, and legacy callers usually pass a few of the eleven.
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
        record_metrics(meter, LEGACY_RL_GROUP, values)
    except Exception as exc:  # never break the training step
        if _once.first(("failure", type(exc).__name__)):
            _logger.warning(
                "record_rl_metrics: unexpected %s (%s); the call was skipped",
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
    if _once.first(_DEPRECATION):
        warnings.warn(DEPRECATION_MESSAGE, DeprecationWarning, stacklevel=2)


def _register_legacy_group() -> None:
    # ValueError: another thread, or the consumer, registered "rl" since we looked; use theirs.
    with contextlib.suppress(ValueError):
        register_metric_group(LEGACY_RL_GROUP, LEGACY_RL_SPECS)
