"""Benchmark: metrics recorded in forked children, against the same work in one process.

Figures (each against a baseline measured in the same run):

1. A forked child's `record_metrics` (10 values with 3 attributes: 4 gauges, 3
   histograms, 2 counters, 1 up-down counter, on the parent's `handle.meter`, written to
   the child's shared region) against the parent's own coalesced `record_metrics` of the
   same call. The child and the parent alternate rounds through a pipe, so both sides
   meet the same machine load. Per call, so per value. <= 1.5.
2. One collection of the parent's reader while 8 live children hold 40 series each (320
   series: counters, up-down counters, gauges, histograms), against one collection of a
   second lens pipeline in the same process after the parent recorded the same 320
   series itself. The children are idle between collections, as the parent's series are:
   the parent reads each slot's sequence word and re-reads the values only of slots
   written since. <= 2.0.
3. What a child's region holds: bytes per series of each kind (reported).

Run: `python benchmarks/bench_children.py` (or `nox -s bench`). It always exits 0 and
prints PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import struct
import warnings
from collections.abc import Callable

from harness import Row, Timing, alternate, print_table, print_versions, ratio_row, timed_round
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    TelemetryHandle,
    _forked_children,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.testing import reset_init_guard

KINDS = ["gauge"] * 4 + ["histogram"] * 3 + ["counter"] * 2 + ["up_down_counter"]
STEP_SPECS = [MetricSpec(f"m{i}", f"bench.child.m{i}", kind) for i, kind in enumerate(KINDS)]
STEP_VALUES = {spec.key: float(i + 1) for i, spec in enumerate(STEP_SPECS)}
ATTRIBUTES = {"rank": 3, "role": "policy", "step_kind": "train"}

CHILDREN = 8
SERIES_PER_KIND = 10  # x 4 kinds = 40 series per child
SERIES_KINDS = ("counter", "up_down_counter", "gauge", "histogram")
SERIES_SPECS = [MetricSpec(kind, f"bench.series.{kind}", kind) for kind in SERIES_KINDS]


def step_call(meter: object) -> Callable[[], None]:
    values = STEP_VALUES

    def run() -> None:
        record_metrics(meter, "child_step", attributes=ATTRIBUTES, **values)

    run()  # create the instruments (or the region's slots) before timing
    return run


def child_record_against_parent(handle: TelemetryHandle, rounds: int, number: int) -> Timing:
    """Figure 1: the parent times a round of its own call, then the child one of its own."""
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_write)
            os.close(done_read)
            candidate = step_call(handle.meter)
            while os.read(go_read, 1) == b"g":
                os.write(done_write, struct.pack("d", timed_round(candidate, number)))
        finally:
            os._exit(0)
    os.close(go_read)
    os.close(done_write)
    baseline = step_call(handle.meter)
    candidate_ns: list[float] = []
    baseline_ns: list[float] = []
    ratios: list[float] = []
    try:
        for _ in range(rounds):
            base = timed_round(baseline, number)
            os.write(go_write, b"g")
            (cand,) = struct.unpack("d", _read_exactly(done_read, 8))
            handle.force_flush()  # untimed: the parent's buffer hands its values over
            baseline_ns.append(base)
            candidate_ns.append(cand)
            ratios.append(cand / base)
    finally:
        os.write(go_write, b"q")
        os.close(go_write)
        os.close(done_read)
        os.waitpid(pid, 0)
    return Timing(
        statistics.median(candidate_ns), statistics.median(baseline_ns), statistics.median(ratios)
    )


def _read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise RuntimeError("the benchmark's child ended early")
        data += chunk
    return data


def record_series(meter: object, child: int) -> None:
    """40 series: 10 of each kind, told apart by attributes."""
    for series in range(SERIES_PER_KIND):
        attributes = {"child": child, "series": series, "role": "loader"}
        record_metrics(
            meter,
            "child_series",
            attributes=attributes,
            counter=series + 1,
            up_down_counter=1 - series,
            gauge=float(series),
            histogram=float(series * 7),
        )


def fork_recording_children(handle: TelemetryHandle) -> tuple[list[int], int]:
    """8 children that record their 40 series, then wait; return their pids and the bytes
    one child's region holds."""
    pids = []
    ready_read, ready_write = os.pipe()
    for child in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            try:
                record_series(handle.meter, child)
                writer = _forked_children._writer
                used = 0 if writer is None else int(writer._words[3]) * 8
                os.write(ready_write, struct.pack("q", used))
                signal.pause()  # until the parent ends it
            finally:
                os._exit(0)
        pids.append(pid)
    region_ends = [struct.unpack("q", _read_exactly(ready_read, 8))[0] for _ in pids]
    os.close(ready_read)
    os.close(ready_write)
    return pids, max(region_ends)


def region_bytes_per_series(meter: object) -> dict[str, float]:
    """What one series of each kind takes in a child's region (meta and fields), from 100
    series of each recorded on `meter` in a forked child."""
    sizes: dict[str, float] = {}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            writer = _forked_children._writer
            assert writer is not None
            results = []
            for spec in SERIES_SPECS:
                before = int(writer._words[3])
                for series in range(100):
                    record_metrics(
                        meter,
                        "child_series",
                        attributes={"child": 0, "series": series, "role": "loader"},
                        **{spec.key: 1},
                    )
                results.append((int(writer._words[3]) - before) * 8 / 100)
            os.write(write_fd, struct.pack("4d", *results))
        finally:
            os._exit(0)
    os.close(write_fd)
    values = struct.unpack("4d", _read_exactly(read_fd, 32))
    os.close(read_fd)
    os.waitpid(pid, 0)
    for spec, value in zip(SERIES_SPECS, values, strict=True):
        sizes[spec.kind] = value
    return sizes


def main() -> int:
    # Python 3.12+ warns at every fork of a threaded process; lens's fork hooks are what
    # make that safe here, and the warning would only clutter the table.
    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()

    print_versions()
    register_metric_group("child_step", STEP_SPECS)
    register_metric_group("child_series", SERIES_SPECS)
    children_reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=children_reader,
    )
    rows: list[Row] = []
    timing = child_record_against_parent(handle, args.rounds, args.number)
    rows.append(
        ratio_row(
            "a forked child's record_metrics, 10 values / the parent's coalesced one",
            timing,
            1.5,
        )
    )

    # A second pipeline in this process, for the one-process baseline of figure 2.
    reset_init_guard()
    own_reader = InMemoryMetricReader()
    own = setup_telemetry(
        NemoLensConfig(enabled=True, exporter="console", traces_enabled=False),
        metric_reader=own_reader,
    )
    for child in range(CHILDREN):
        record_series(own.meter, child)
    pids, region_used = fork_recording_children(handle)
    try:
        collect = alternate(
            children_reader.get_metrics_data,
            own_reader.get_metrics_data,
            rounds=args.rounds,
            number=20,
        )
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            os.waitpid(pid, 0)
    rows.append(
        ratio_row(
            f"collect with {CHILDREN} children x 40 series / the same recorded in one process",
            collect,
            2.0,
            unit="us",
        )
    )
    for kind, size in region_bytes_per_series(handle.meter).items():
        rows.append(
            Row(
                f"a child's region: bytes per {kind} series",
                f"{size:.0f} B",
                "-",
                "-",
                "report",
                "-",
            )
        )
    rows.append(
        Row(
            "a child's region after its 40 series (of 4 MiB reserved)",
            f"{region_used:,} B",
            "-",
            "-",
            "report",
            "-",
        )
    )
    print()
    print_table(rows)
    own.shutdown()
    handle.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
