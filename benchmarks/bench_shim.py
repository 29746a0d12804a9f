"""Benchmark: the cost of lens-compat-rl's record_rl_metrics against record_metrics.

The shim only makes sure the "rl" group exists and hands its values to record_metrics, so
each figure is record_rl_metrics over record_metrics(meter, "rl", ...) with the same
keyword values, measured in the same run: with all eleven legacy values, with one (legacy
callers pass a few), on a no-op meter (every rank that does not export), and with 50 more
groups registered, as a framework with many groups has (a per-call look-up that grows with
the registry shows up there). Baseline and candidate alternate, round by round, and the
figure is the median of the per-round ratios (`harness.alternate`).

Run: `python benchmarks/bench_shim.py` (or `nox -s bench`). It needs lens-compat-rl
installed; without it, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

from harness import Row, alternate, print_table, print_versions, ratio_row
from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import MetricSpec, record_metrics, register_metric_group

# The legacy keywords with one value each, as a training step passes them.
VALUES = {
    "reward_mean": 0.5,
    "kl_divergence": 0.01,
    "policy_loss": 0.2,
    "value_loss": 0.3,
    "entropy": 1.5,
    "response_length_mean": 512.0,
    "grad_norm": 3.0,
    "learning_rate": 1e-5,
    "throughput_tokens_per_sec": 9000.0,
    "generation_duration_ms": 412.0,
    "rollout_duration_ms": 950.0,
}
ONE_VALUE = {"reward_mean": 0.5}
EXTRA_GROUPS = 50


def shim_call(meter: object, values: dict[str, Any]) -> Callable[[], None]:
    """record_rl_metrics with `values` as keyword arguments."""
    from lens_compat_rl import record_rl_metrics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        record_rl_metrics(meter, **values)  # registers "rl", creates the instruments

    def run() -> None:
        record_rl_metrics(meter, **values)

    return run


def core_call(meter: object, values: dict[str, Any]) -> Callable[[], None]:
    """record_metrics into the same "rl" group with the same keyword arguments."""
    record = record_metrics

    def run() -> None:
        record(meter, "rl", **values)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()

    print_versions()
    if importlib.util.find_spec("lens_compat_rl") is None:
        print("bench_shim: lens-compat-rl is not installed; nothing to measure")
        return 0
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk_meter = provider.get_meter("bench")
    noop_meter = NoOpMeter("bench")

    rows: list[Row] = []
    for label, target, extra_groups, candidate, baseline in (
        (
            "record_rl_metrics / record_metrics, 11 values",
            1.05,
            0,
            shim_call(sdk_meter, VALUES),
            core_call(sdk_meter, VALUES),
        ),
        (
            "the same, 1 value",
            1.15,
            0,
            shim_call(sdk_meter, ONE_VALUE),
            core_call(sdk_meter, ONE_VALUE),
        ),
        (
            "the same, 11 values on a no-op meter (a rank that does not export)",
            1.5,
            0,
            shim_call(noop_meter, VALUES),
            core_call(noop_meter, VALUES),
        ),
        (
            f"the same, 1 value, with {EXTRA_GROUPS} more groups registered",
            1.15,
            EXTRA_GROUPS,
            shim_call(sdk_meter, ONE_VALUE),
            core_call(sdk_meter, ONE_VALUE),
        ),
        (
            f"the same, no-op meter, with {EXTRA_GROUPS} more groups registered",
            1.5,
            0,  # already registered by the row above
            shim_call(noop_meter, VALUES),
            core_call(noop_meter, VALUES),
        ),
    ):
        for index in range(extra_groups):
            register_metric_group(
                f"bench_extra_{index}", [MetricSpec("x", f"bench.extra{index}.x", "gauge")]
            )
        timing = alternate(candidate, baseline, rounds=args.rounds, number=args.number)
        rows.append(ratio_row(label, timing, target))

    print()
    print_table(rows, Row("figure", "shim", "record_metrics", "ratio", "target", "result"))
    provider.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
