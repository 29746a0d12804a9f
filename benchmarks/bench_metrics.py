"""Benchmark: the cost of record_metrics against calling the SDK instruments directly.

Every figure is a ratio against a baseline measured in the same run, so a busy or slow
machine moves both sides together. Baseline and candidate alternate, round by round, and
the figure is the median of the per-round ratios.

Run: `python benchmarks/bench_metrics.py` (or `nox -s bench`).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import timeit
from collections.abc import Callable

from opentelemetry.metrics import NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import MetricSpec, record_metrics, register_metric_group

KINDS = ["gauge"] * 4 + ["histogram"] * 3 + ["counter"] * 2 + ["up_down_counter"]
SPECS = [MetricSpec(f"m{i}", f"bench.m{i}", kind) for i, kind in enumerate(KINDS)]
VALUES = {spec.key: float(i + 1) for i, spec in enumerate(SPECS)}
ATTRIBUTES = {"rank": 3, "role": "policy", "step_kind": "train"}
CREATE = {
    "gauge": "create_gauge",
    "histogram": "create_histogram",
    "counter": "create_counter",
    "up_down_counter": "create_up_down_counter",
}
RECORD = {"gauge": "set", "histogram": "record", "counter": "add", "up_down_counter": "add"}


def direct_calls(meter: object, attributes: dict[str, object] | None) -> Callable[[], None]:
    """Ten calls on instruments created up front: what a hand-written loop would do."""
    m = [
        # One instrument name per attribute case: the SDK warns about a name created twice.
        getattr(
            getattr(meter, CREATE[spec.kind])(f"direct.{len(attributes or ())}.{spec.name}"),
            RECORD[spec.kind],
        )
        for spec in SPECS
    ]
    m0, m1, m2, m3, m4, m5, m6, m7, m8, m9 = m
    a = attributes

    def run() -> None:
        m0(1.0, a)
        m1(2.0, a)
        m2(3.0, a)
        m3(4.0, a)
        m4(5.0, a)
        m5(6.0, a)
        m6(7.0, a)
        m7(8.0, a)
        m8(9.0, a)
        m9(10.0, a)

    return run


def lens_calls(meter: object, attributes: dict[str, object] | None) -> Callable[[], None]:
    """The same ten values through record_metrics, as keyword arguments."""
    record = record_metrics

    def run() -> None:
        record(
            meter,
            "bench",
            attributes=attributes,
            m0=1.0,
            m1=2.0,
            m2=3.0,
            m3=4.0,
            m4=5.0,
            m5=6.0,
            m6=7.0,
            m7=8.0,
            m8=9.0,
            m9=10.0,
        )

    run()  # create the instruments before timing
    return run


def all_none_call(meter: object) -> Callable[[], None]:
    """A call whose ten values are all None."""

    def run() -> None:
        record_metrics(
            meter,
            "bench",
            m0=None,
            m1=None,
            m2=None,
            m3=None,
            m4=None,
            m5=None,
            m6=None,
            m7=None,
            m8=None,
            m9=None,
        )

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

    import opentelemetry.sdk.version

    register_metric_group("bench", SPECS)
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk_meter = provider.get_meter("bench")
    noop_meter = NoOpMeter("bench")

    rows = []
    for label, target, candidate, baseline in (
        (
            "record_metrics, 10 keyword values / 10 direct calls",
            1.05,
            lens_calls(sdk_meter, None),
            direct_calls(sdk_meter, None),
        ),
        (
            "the same with 3 attributes / 10 direct calls with them",
            1.03,
            lens_calls(sdk_meter, ATTRIBUTES),
            direct_calls(sdk_meter, ATTRIBUTES),
        ),
        (
            "record_metrics on a no-op meter / 10 direct no-op calls",
            0.5,
            lens_calls(noop_meter, None),
            direct_calls(noop_meter, None),
        ),
    ):
        lens_ns, direct_ns, ratio = measure(candidate, baseline, args.rounds, args.number)
        rows.append(
            (
                label,
                f"{lens_ns:,.0f} / {direct_ns:,.0f}",
                f"{ratio:.3f}",
                f"<= {target}",
                "PASS" if ratio <= target else "MISS",
            )
        )
    none_call = all_none_call(sdk_meter)
    none_ns, _, _ = measure(none_call, none_call, args.rounds, args.number)
    rows.append(
        ("a call whose 10 values are all None", f"{none_ns:,.0f} ns/call", "-", "report", "-")
    )

    sdk_version = opentelemetry.sdk.version.__version__
    print(f"Python {sys.version.split()[0]}, opentelemetry-sdk {sdk_version}")
    headers = ("figure", "lens ns / baseline ns", "ratio", "target", "")
    widths = [max(len(str(row[i])) for row in (*rows, headers)) for i in range(5)]
    for row in (headers, tuple("-" * w for w in widths), *rows):
        print(" | ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    provider.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
