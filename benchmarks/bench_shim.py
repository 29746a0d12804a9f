"""Benchmark: the cost of lens-compat-rl's record_rl_metrics against record_metrics.

The shim only makes sure the "rl" group exists and hands its values to record_metrics, so
each figure is record_rl_metrics over record_metrics(meter, "rl", ...) with the same
keyword values, measured in the same run: with all eleven legacy values, with one (legacy
callers pass a few), on a no-op meter (every rank that does not export), and with 50 more
groups registered, as a framework with many groups has (a per-call look-up that grows with
the registry shows up there). Baseline and candidate alternate, round by round, and the
figure is the median of the per-round ratios.

Run: `python benchmarks/bench_shim.py` (or `nox -s bench`). It needs lens-compat-rl
installed; without it, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import timeit
import warnings
from collections.abc import Callable
from typing import Any

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


def measure(
    candidate: Callable[[], None], baseline: Callable[[], None], rounds: int, number: int
) -> tuple[float, float, float]:
    """Alternate baseline and candidate rounds; return median ns/call of each and the
    median of the per-round ratios (robust against a round disturbed by other load)."""
    candidate_ns: list[float] = []
    baseline_ns: list[float] = []
    ratios: list[float] = []
    gc.disable()
    try:
        for _ in range(rounds):
            base = timeit.timeit(baseline, number=number) / number
            cand = timeit.timeit(candidate, number=number) / number
            baseline_ns.append(base * 1e9)
            candidate_ns.append(cand * 1e9)
            ratios.append(cand / base)
    finally:
        gc.enable()
    return (
        statistics.median(candidate_ns),
        statistics.median(baseline_ns),
        statistics.median(ratios),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()

    if importlib.util.find_spec("lens_compat_rl") is None:
        print("bench_shim: lens-compat-rl is not installed; nothing to measure")
        return 0
    import opentelemetry.sdk.version

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk_meter = provider.get_meter("bench")
    noop_meter = NoOpMeter("bench")

    rows = []
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
        shim_ns, core_ns, ratio = measure(candidate, baseline, args.rounds, args.number)
        rows.append(
            (
                label,
                f"{shim_ns:,.0f} / {core_ns:,.0f}",
                f"{ratio:.3f}",
                f"<= {target}",
                "PASS" if ratio <= target else "MISS",
            )
        )

    sdk_version = opentelemetry.sdk.version.__version__
    print(f"Python {sys.version.split()[0]}, opentelemetry-sdk {sdk_version}")
    headers = ("figure", "shim ns / record_metrics ns", "ratio", "target", "")
    widths = [max(len(str(row[i])) for row in (*rows, headers)) for i in range(5)]
    for row in (headers, tuple("-" * w for w in widths), *rows):
        print(" | ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    provider.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
