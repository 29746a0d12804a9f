"""Benchmark: what one recorded value costs through lens, against prometheus_client.

prometheus_client is the Python anchor: a metric library whose `Gauge.set` is a lock and
a float store. Its side records into its own `CollectorRegistry` (never the global one),
on metrics created up front, one straight-line call per value. lens's side records with
`record_metrics` on `handle.meter` of one `setup_telemetry(NemoLensConfig(enabled=True,
...), metric_reader=InMemoryMetricReader())`, so gauges and sums coalesce as in a real
pipeline. Every figure is per value: a call's time divided by the values it records.

Figures (each against a baseline measured in the same run):

a. A gauge value through `record_metrics` (one call recording 10 gauge keys) /
   prometheus_client `Gauge.set`. <= 0.7.
b. The realistic step's 40 values (bench_step's specs: 20 gauges, 10 histograms, 8
   counters, 2 up-down counters) through one `record_metrics` call / the same 40 values
   through prometheus_client (`Gauge.set`; `Histogram.observe` with the boundaries the
   OpenTelemetry SDK gives these histograms; `Counter.inc`; `Gauge.inc` for the up-down
   counters). <= 1.5 on OpenTelemetry >= 1.24, <= 1.0 on 1.23 (the target follows the
   installed SDK).
c. An int on a counter / a float on a gauge, both through lens (10 keys a call). <= 1.1.
d. One attribute / no attributes on the same 10 gauge keys through lens. <= 1.1. The same
   for prometheus_client (a `.labels()` child fetched once, outside the loop, against the
   unlabelled gauge), reported.
e. A lens gauge value / a plain dict store per value (`d[key] = value`, the physical
   floor), reported.
f. A histogram value through lens / a direct SDK `Histogram.record` on instruments created
   up front on a hand-made `MeterProvider` over an `InMemoryMetricReader`, reported.

Without prometheus_client (`lens-core[prometheus]` brings it) figures a, b and d's
prometheus row are left out and the others still run. Baseline and candidate alternate
round by round (`harness.alternate`, the garbage collector off inside a round), each
figure the median of the per-round ratios; both metric readers collect between rounds,
untimed. `--clock cpu` times the process's CPU time instead of wall time.

Run: `python benchmarks/bench_per_value.py` (or `nox -s bench`). It always exits 0 and
prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import harness
from bench_step import (
    STEP_GROUP,
    STEP_SPECS,
    STEP_VALUES,
    lens_keywords_call,
    lens_step_metrics,
    specs_of,
    values_of,
)
from harness import Row, Timing, duration, print_table, print_versions, ratio_row
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import MetricSpec, register_metric_group
from nemo.lens.instruments._spec import SDK_DEFAULT_BUCKETS

GAUGE_GROUP = "bench_per_value_gauges"
COUNTER_GROUP = "bench_per_value_counters"
HISTOGRAM_GROUP = "bench_per_value_histograms"
GAUGE_SPECS = specs_of("bench.pv", {"gauge": 10})
GAUGE_VALUES = values_of(GAUGE_SPECS)  # floats
COUNTER_SPECS = specs_of("bench.pv", {"counter": 10})
COUNTER_VALUES = values_of(COUNTER_SPECS)  # ints
HISTOGRAM_SPECS = specs_of("bench.pv", {"histogram": 10})
HISTOGRAM_VALUES = values_of(HISTOGRAM_SPECS)
ONE_ATTRIBUTE: dict[str, object] = {"rank": 3}

#: What `--clock` selects: wall time, or the CPU time of the whole process.
CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}


def straight_line(calls: list[tuple[Callable[..., object], object]]) -> Callable[[], None]:
    """A function making each `(method, value)` call in turn, one line per call.

    Generated so that 40 lines need not be written out: it runs exactly the bytecode of
    `loss_gauge.set(loss)` written once per value, with no loop and no list.
    """
    namespace: dict[str, object] = {}
    lines = []
    for n, (method, value) in enumerate(calls):
        namespace[f"call{n}"] = method
        namespace[f"value{n}"] = value
        lines.append(f"    call{n}(value{n})")
    exec(compile("def run():\n" + "\n".join(lines), "<straight line>", "exec"), namespace)
    run: Callable[[], None] = namespace["run"]  # type: ignore[assignment]  # defined above
    return run


def dict_stores(values: dict[str, float | int]) -> Callable[[], None]:
    """`d[key] = value` once per value, one line each: the floor of keeping a value."""
    namespace: dict[str, object] = {"d": {}}
    lines = []
    for n, (key, value) in enumerate(values.items()):
        namespace[f"value{n}"] = value
        lines.append(f"    d[{key!r}] = value{n}")
    exec(compile("def run():\n" + "\n".join(lines), "<dict stores>", "exec"), namespace)
    run: Callable[[], None] = namespace["run"]  # type: ignore[assignment]  # defined above
    return run


class Prometheus:
    """prometheus_client's side: its own registry, metrics created up front."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.registry = client.CollectorRegistry()
        self._metrics: dict[tuple[str, tuple[str, ...]], Any] = {}

    def metric(self, spec: MetricSpec, labels: tuple[str, ...] = ()) -> Any:
        """The prometheus_client metric standing for `spec` (named after it), created once."""
        found = self._metrics.get((spec.name, labels))
        if found is not None:
            return found
        client = self.client
        name = spec.name.replace(".", "_") + ("_by_" + "_".join(labels) if labels else "")
        common: dict[str, Any] = {"labelnames": labels, "registry": self.registry}
        if spec.kind == "histogram":
            buckets = spec.buckets if spec.buckets is not None else SDK_DEFAULT_BUCKETS
            found = client.Histogram(name, spec.description, buckets=buckets, **common)
        elif spec.kind == "counter":
            found = client.Counter(name, spec.description, **common)
        else:  # a gauge, or an up-down counter (prometheus_client's Gauge.inc)
            found = client.Gauge(name, spec.description, **common)
        self._metrics[(spec.name, labels)] = found
        return found

    def calls(self, specs: list[MetricSpec], values: dict[str, float | int]) -> Callable[[], None]:
        """One call per value, each on its own metric, as bench_step's 40 direct calls."""
        methods = {
            "gauge": "set",
            "histogram": "observe",
            "counter": "inc",
            "up_down_counter": "inc",
        }
        return straight_line(
            [(getattr(self.metric(spec), methods[spec.kind]), values[spec.key]) for spec in specs]
        )

    def labelled_gauges(self, attributes: dict[str, object]) -> Callable[[], None]:
        """`Gauge.set` on a `.labels()` child of each gauge, fetched once up front."""
        labels = tuple(attributes)
        children = [
            self.metric(spec, labels).labels(**{key: str(v) for key, v in attributes.items()})
            for spec in GAUGE_SPECS
        ]
        return straight_line(
            [
                (child.set, GAUGE_VALUES[spec.key])
                for child, spec in zip(children, GAUGE_SPECS, strict=True)
            ]
        )


def per_value(timing: Timing, values: int) -> Timing:
    """A per-call timing as per value (the ratio is the same when both sides record as
    many values a call)."""
    return Timing(timing.candidate_ns / values, timing.baseline_ns / values, timing.ratio)


@dataclass
class Bench:
    """What every figure needs: lens's meter, the hand-made SDK meter, the readers to
    settle between rounds, the clock and the run's counts."""

    args: argparse.Namespace
    clock: Callable[[], int]
    meter: Any
    raw_meter: Any
    readers: tuple[InMemoryMetricReader, ...]

    def settle(self, _side: str) -> None:
        """Every reader collects (lens's flushes its buffer into the SDK), untimed."""
        for reader in self.readers:
            reader.get_metrics_data()
        gc.collect()

    def alternate(
        self, candidate: Callable[[], None], baseline: Callable[[], None], values: int
    ) -> Timing:
        """Per value: `values` values a call on each side, alternating rounds."""
        timing = harness.alternate(
            candidate,
            baseline,
            rounds=self.args.rounds,
            number=self.args.number,
            clock=self.clock,
            after_round=self.settle,
        )
        return per_value(timing, values)

    def lens_call(
        self,
        group: str,
        specs: list[MetricSpec],
        values: dict[str, float | int],
        attributes: dict[str, object] | None = None,
    ) -> Callable[[], None]:
        """`record_metrics(meter, group, key=value, ...)` on lens's meter."""
        return lens_keywords_call(self.meter, group, specs, values, attributes)

    def lens_gauges(self) -> Callable[[], None]:
        """The 10 gauge keys through lens: the candidate or baseline of most figures."""
        return self.lens_call(GAUGE_GROUP, GAUGE_SPECS, GAUGE_VALUES)


def report_row(figure: str, timing: Timing) -> Row:
    return Row(
        figure,
        duration(timing.candidate_ns),
        duration(timing.baseline_ns),
        f"{timing.ratio:.3f}",
        "report",
        "-",
    )


def gauge_row(bench: Bench, prometheus: Prometheus) -> Row:
    """(a) a gauge value: lens / prometheus_client."""
    timing = bench.alternate(bench.lens_gauges(), prometheus.calls(GAUGE_SPECS, GAUGE_VALUES), 10)
    return ratio_row("(a) a gauge value: record_metrics (10 keys) / Gauge.set", timing, 0.7)


def step_row(bench: Bench, prometheus: Prometheus) -> Row:
    """(b) the realistic step's 40 values: lens / prometheus_client."""
    timing = bench.alternate(
        lens_step_metrics(bench.meter), prometheus.calls(STEP_SPECS, STEP_VALUES), 40
    )
    target = 1.5 if harness.release("opentelemetry-sdk") >= (1, 24) else 1.0
    return ratio_row("(b) the step's 40 values: lens / prometheus_client", timing, target)


def kinds_row(bench: Bench) -> Row:
    """(c) an int on a counter / a float on a gauge, both through lens."""
    counters = bench.lens_call(COUNTER_GROUP, COUNTER_SPECS, COUNTER_VALUES)
    timing = bench.alternate(counters, bench.lens_gauges(), 10)
    return ratio_row("(c) lens: an int on a counter / a float on a gauge", timing, 1.1)


def attribute_row(bench: Bench) -> Row:
    """(d) one attribute / none, on the same gauge keys through lens."""
    attributed = bench.lens_call(GAUGE_GROUP, GAUGE_SPECS, GAUGE_VALUES, ONE_ATTRIBUTE)
    timing = bench.alternate(attributed, bench.lens_gauges(), 10)
    return ratio_row("(d) lens gauge: one attribute / no attributes", timing, 1.1)


def labels_row(bench: Bench, prometheus: Prometheus) -> Row:
    """(d) prometheus_client's own cost of a label, reported."""
    timing = bench.alternate(
        prometheus.labelled_gauges(ONE_ATTRIBUTE), prometheus.calls(GAUGE_SPECS, GAUGE_VALUES), 10
    )
    return report_row("(d) prometheus_client: cached .labels() child / no labels", timing)


def floor_row(bench: Bench) -> Row:
    """(e) a lens gauge value against a plain dict store, reported."""
    timing = bench.alternate(bench.lens_gauges(), dict_stores(GAUGE_VALUES), 10)
    return report_row("(e) a lens gauge value / a dict store d[key] = value", timing)


def histogram_row(bench: Bench) -> Row:
    """(f) a histogram value: lens / a direct SDK call, reported."""
    direct = straight_line(
        [
            (bench.raw_meter.create_histogram(spec.name, unit=spec.unit).record, value)
            for spec, value in zip(HISTOGRAM_SPECS, HISTOGRAM_VALUES.values(), strict=True)
        ]
    )
    lens = bench.lens_call(HISTOGRAM_GROUP, HISTOGRAM_SPECS, HISTOGRAM_VALUES)
    timing = bench.alternate(lens, direct, 10)
    return report_row("(f) a histogram value: lens / direct SDK record", timing)


def prometheus_client_or_none() -> Any:
    try:
        import prometheus_client
    except ImportError:
        return None
    return prometheus_client


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds per figure")
    parser.add_argument("--number", type=int, default=1000, help="calls per round")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="what a round's time is"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print_versions()
    client = prometheus_client_or_none()
    print(f"prometheus-client {harness.installed('prometheus-client')}")
    for group, specs in (
        (STEP_GROUP, STEP_SPECS),
        (GAUGE_GROUP, GAUGE_SPECS),
        (COUNTER_GROUP, COUNTER_SPECS),
        (HISTOGRAM_GROUP, HISTOGRAM_SPECS),
    ):
        register_metric_group(group, specs)
    lens = harness.lens_in_memory("bench-per-value")
    if lens is None:
        return 0
    handle, lens_reader = lens
    raw_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[raw_reader])
    bench = Bench(
        args,
        CLOCKS[args.clock],
        handle.meter,
        provider.get_meter("bench.raw"),
        (lens_reader, raw_reader),
    )
    prometheus = None if client is None else Prometheus(client)
    started = time.perf_counter()
    rows: list[Row] = []
    try:
        if prometheus is not None:
            rows += [gauge_row(bench, prometheus), step_row(bench, prometheus)]
        rows += [kinds_row(bench), attribute_row(bench)]
        if prometheus is not None:
            rows.append(labels_row(bench, prometheus))
        rows += [floor_row(bench), histogram_row(bench)]
    finally:
        handle.shutdown()
        provider.shutdown()
    print()
    print_table(rows)
    print()
    if prometheus is None:
        print(
            "left out, prometheus_client is not installed (lens-core[prometheus] brings it): "
            "(a), (b) and the prometheus_client row of (d)"
        )
    print(
        f"per value: ns of one call / the values it records; {args.rounds} rounds of "
        f"{args.number} calls per side; clock: {args.clock}; "
        f"measured in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
