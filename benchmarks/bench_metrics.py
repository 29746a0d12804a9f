"""Benchmark: the cost of record_metrics against calling the SDK instruments directly.

Every figure is a ratio against a baseline measured in the same run, so a busy or slow
machine moves both sides together. Baseline and candidate alternate, round by round, and
the figure is the median of the per-round ratios (`harness.alternate`).

Run: `python benchmarks/bench_metrics.py` (or `nox -s bench`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from harness import Row, alternate, duration, print_table, print_versions, ratio_row
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()

    print_versions()
    register_metric_group("bench", SPECS)
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    sdk_meter = provider.get_meter("bench")
    noop_meter = NoOpMeter("bench")

    rows: list[Row] = []
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
        timing = alternate(candidate, baseline, rounds=args.rounds, number=args.number)
        rows.append(ratio_row(label, timing, target))
    none_call = all_none_call(sdk_meter)
    none_ns = alternate(none_call, none_call, rounds=args.rounds, number=args.number).candidate_ns
    rows.append(
        Row("a call whose 10 values are all None", duration(none_ns), "-", "-", "report", "-")
    )
    print()
    print_table(rows)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
