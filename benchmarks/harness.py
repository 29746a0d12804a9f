"""What every benchmark shares: the versions it measured, the same-run baseline, the table.

A benchmark's figures are ratios against a baseline measured in the same run, so a busy or
slow machine moves both sides together (timing targets live here, never in unit tests).
`alternate` times candidate and baseline in alternating rounds and takes the median of the
per-round ratios; `ratio_row` turns that into a table row with its target and verdict, and
`print_table` prints the rows under a header. `print_versions` opens every output with the
interpreter and the OpenTelemetry and lens releases it ran against; `release` gives an
installed release as numbers, for a target that depends on it.

The scripts import it as `harness` (their own directory is first on `sys.path`); nox's
`bench` session runs only the `bench_*.py` files, so it never runs this module itself.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import pathlib
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

#: The distributions whose releases every benchmark reports.
MEASURED = ("opentelemetry-api", "opentelemetry-sdk", "lens-core")


def installed(distribution: str) -> str:
    """The installed release of `distribution`, or "not installed"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def release(distribution: str) -> tuple[int, ...]:
    """The installed release of `distribution` as numbers, e.g. (1, 45, 1) for 1.45.1 and
    (0, 44) for 0.44b0, for a target that depends on it; () when it is not installed."""
    numbers = []
    for part in installed(distribution).split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.group() != part:  # a pre-release tail ("44b0") ends the numbers
            break
    return tuple(numbers)


def print_versions() -> None:
    """The interpreter, the releases measured and where nemo.lens was imported from."""
    import nemo.lens

    print(f"python {sys.version.split()[0]} ({sys.executable})")
    releases = ", ".join(f"{name} {installed(name)}" for name in MEASURED)
    print(f"{releases} ({pathlib.Path(nemo.lens.__file__).parent})")
    print(load_average("at the start"))


def load_average(when: str) -> str:
    """The machine's 1, 5 and 15 minute load averages, for the record of a run."""
    one, five, fifteen = os.getloadavg()
    return f"load average {when}: {one:.2f}, {five:.2f}, {fifteen:.2f}"


@dataclass(frozen=True)
class Timing:
    """One figure: ns per call of each side, and their ratio (`alternate` gives medians)."""

    candidate_ns: float
    baseline_ns: float
    ratio: float


def timed_round(
    call: Callable[[], object], number: int, clock: Callable[[], int] = time.perf_counter_ns
) -> float:
    """ns per call of `number` calls on `clock`, with the garbage collector off."""
    gc.disable()
    try:
        start = clock()
        for _ in range(number):
            call()
        return (clock() - start) / number
    finally:
        gc.enable()


def alternate(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    rounds: int,
    number: int,
    clock: Callable[[], int] = time.perf_counter_ns,
    after_round: Callable[[str], None] | None = None,
) -> Timing:
    """Alternate `rounds` baseline and candidate rounds of `number` calls each; return the
    median ns/call of each side and the median of the per-round ratios (robust against a
    round disturbed by other load). `after_round("baseline")` and
    `after_round("candidate")` run untimed after each side's round."""
    candidate_ns: list[float] = []
    baseline_ns: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
        base = timed_round(baseline, number, clock)
        if after_round is not None:
            after_round("baseline")
        cand = timed_round(candidate, number, clock)
        if after_round is not None:
            after_round("candidate")
        baseline_ns.append(base)
        candidate_ns.append(cand)
        ratios.append(cand / base)
    return Timing(
        statistics.median(candidate_ns), statistics.median(baseline_ns), statistics.median(ratios)
    )


def verdict(passed: bool) -> str:
    """A row's last cell: whether its figure met its target."""
    return "PASS" if passed else "MISS"


class Row(NamedTuple):
    """One line of a ratio table."""

    figure: str
    lens: str
    baseline: str
    ratio: str
    target: str
    verdict: str


#: The header of a ratio table; a benchmark may name its two sides otherwise.
HEADER = Row("figure", "lens", "baseline", "ratio", "target", "result")

#: How a time in ns is shown in each unit a table uses.
_UNITS: dict[str, Callable[[float], str]] = {
    "ns": lambda ns: f"{ns:,.1f} ns" if ns < 1000 else f"{ns:,.0f} ns",
    "us": lambda ns: f"{ns / 1e3:,.2f} us",
    "ms": lambda ns: f"{ns / 1e6:,.1f} ms",
}


def duration(ns: float, unit: str = "ns") -> str:
    """`ns` nanoseconds as a table cell in `unit` ("ns", "us" or "ms")."""
    return _UNITS[unit](ns)


def ratio_row(figure: str, timing: Timing, target: float, unit: str = "ns") -> Row:
    """The row of a figure whose target is a ratio of at most `target`."""
    return Row(
        figure,
        duration(timing.candidate_ns, unit),
        duration(timing.baseline_ns, unit),
        f"{timing.ratio:.3f}",
        f"<= {target}",
        verdict(timing.ratio <= target),
    )


def print_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> None:
    """`rows` under `header`, each column as wide as its widest cell."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    for number, line in enumerate(lines):
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print(" | ".join(cells).rstrip())
        if number == 0:
            print("-|-".join("-" * width for width in widths))
    print(load_average("after the table"))


def print_report(rows: Sequence[Sequence[str]], notes: Sequence[str]) -> None:
    """A script's table between blank lines, then its notes, one a line."""
    print()
    print_table(rows)
    print()
    for note in notes:
        print(note)


def lens_in_memory(service_name: str) -> tuple[Any, Any] | None:
    """lens's pipeline over an `InMemoryMetricReader` (no traces): (handle, reader), or
    None, said on stdout, where setup gave a handle that does not export."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from nemo.lens import NemoLensConfig, setup_telemetry

    reader = InMemoryMetricReader()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True, service_name=service_name, traces_enabled=False),
        metric_reader=reader,
    )
    if handle.is_exporting:
        return handle, reader
    print("no figures: setup_telemetry returned a handle that does not export")
    handle.shutdown()
    return None
