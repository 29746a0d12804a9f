"""Benchmark: what lens's span gate costs when a group is off, and what `import nemo.lens` costs.

Three figures, each a ratio against a baseline measured in the same run:

1. `with managed_span(<disabled group>, "x", iteration=1): pass` against
   `with contextlib.nullcontext(): pass` (target <= 1.0).
2. A `@trace_fn`-decorated `a + b` with its group disabled against the bare function
   (target <= 3.0).
3. `import nemo.lens` against `import opentelemetry.trace, opentelemetry.metrics`, each
   timed inside a fresh interpreter (target <= 1.3).

Figures 1 and 2 use `timeit`: baseline and candidate alternate, repeat by repeat, and
each side keeps its fastest repeat (the least disturbed by the rest of the machine).
Both sides include timeit's own loop. Figure 3 runs many fresh interpreters, alternating
the two imports, and compares medians. The interpreters may write bytecode caches (to a
private temporary prefix, never into the tree) and a few warm-up runs fill them first,
because an installed package is normally byte-compiled.

Run: `python benchmarks/bench_spans.py` (or `nox -s bench`). It always exits 0 and prints
PASS or MISS per target.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import timeit

from harness import Row, Timing, installed, print_table, print_versions, ratio_row

from nemo.lens import managed_span, set_enabled_span_groups, trace_fn

DISABLED_GROUP = "bench_disabled"

# Each timed program prints the seconds its imports took, then whether any SDK module loaded.
LENS_IMPORT = (
    "import time, sys\n"
    "start = time.perf_counter()\n"
    "import nemo.lens\n"
    "print(time.perf_counter() - start)\n"
    "print(any(m.startswith('opentelemetry.sdk') for m in sys.modules))\n"
)
API_IMPORT = (
    "import time, sys\n"
    "start = time.perf_counter()\n"
    "import opentelemetry.trace, opentelemetry.metrics\n"
    "print(time.perf_counter() - start)\n"
    "print(any(m.startswith('opentelemetry.sdk') for m in sys.modules))\n"
)


def add(a: int, b: int) -> int:
    """The trivial function of figure 2, called bare."""
    return a + b


@trace_fn(DISABLED_GROUP, "add")
def traced_add(a: int, b: int) -> int:
    """The same function behind a disabled `trace_fn`."""
    return a + b


def fastest(
    baseline: str, candidate: str, namespace: dict[str, object], number: int, repeats: int
) -> Timing:
    """Time two statements in alternating repeats; each side's fastest ns per run. (Not
    `harness.alternate`: a statement timed inline costs no function call on either side.)"""
    base_timer = timeit.Timer(baseline, globals=namespace)
    cand_timer = timeit.Timer(candidate, globals=namespace)
    base_times: list[float] = []
    cand_times: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            base_times.append(base_timer.timeit(number))
            cand_times.append(cand_timer.timeit(number))
    finally:
        if gc_was_enabled:
            gc.enable()
    base, cand = min(base_times) / number * 1e9, min(cand_times) / number * 1e9
    return Timing(cand, base, cand / base)


def disabled_managed_span(number: int, repeats: int) -> Row:
    namespace: dict[str, object] = {"contextlib": contextlib, "managed_span": managed_span}
    timing = fastest(
        "with contextlib.nullcontext():\n    pass",
        f"with managed_span({DISABLED_GROUP!r}, 'x', iteration=1):\n    pass",
        namespace,
        number,
        repeats,
    )
    return ratio_row("disabled managed_span / nullcontext()", timing, 1.0)


def disabled_trace_fn(number: int, repeats: int) -> Row:
    namespace: dict[str, object] = {"add": add, "traced_add": traced_add}
    timing = fastest("add(1, 2)", "traced_add(1, 2)", namespace, number, repeats)
    return ratio_row("disabled @trace_fn a+b / bare a+b", timing, 3.0)


def import_time(runs: int, warmups: int) -> tuple[Row, bool]:
    """Median import times in fresh interpreters, and whether `import nemo.lens` loaded an SDK."""
    with tempfile.TemporaryDirectory(prefix="lens-bench-pycache-") as cache:
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache

        def run(program: str) -> tuple[float, bool]:
            out = subprocess.run(
                [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
            return float(out[0]), out[1] == "True"

        for _ in range(warmups):
            run(LENS_IMPORT)
            run(API_IMPORT)
        lens_times: list[float] = []
        api_times: list[float] = []
        sdk_loaded = False
        for _ in range(runs):
            seconds, loaded = run(LENS_IMPORT)
            lens_times.append(seconds)
            sdk_loaded = sdk_loaded or loaded
            api_times.append(run(API_IMPORT)[0])
    lens_ns, api_ns = statistics.median(lens_times) * 1e9, statistics.median(api_times) * 1e9
    timing = Timing(lens_ns, api_ns, lens_ns / api_ns)
    return ratio_row("import nemo.lens / import the OTel API", timing, 1.3, "ms"), sdk_loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--number", type=int, default=200_000, help="calls per timeit repeat")
    parser.add_argument("--repeats", type=int, default=15, help="timeit repeats per side")
    parser.add_argument("--import-runs", type=int, default=40, help="fresh interpreters per side")
    parser.add_argument("--warmups", type=int, default=3, help="untimed interpreter runs per side")
    args = parser.parse_args(argv)

    print_versions()
    set_enabled_span_groups(frozenset())
    rows = [
        disabled_managed_span(args.number, args.repeats),
        disabled_trace_fn(args.number, args.repeats),
    ]
    row, sdk_loaded = import_time(args.import_runs, args.warmups)
    rows.append(row)
    print()
    print_table(rows)
    print()
    print(f"import nemo.lens loaded an SDK module: {'yes (MISS)' if sdk_loaded else 'no'}")
    if installed("opentelemetry-sdk") != "not installed":
        print("note: the SDK is installed here; figure 3 shows no SDK module is imported anyway")
    return 0


if __name__ == "__main__":
    sys.exit(main())
