"""`lens demo`: a simulated RL training loop instrumented with lens, end to end.

It uses only the public API, exactly as a framework would: declare a metric group, set up
telemetry from a `NemoLensConfig`, open `managed_span` spans per step, record every step
with `record_metrics(handle.meter, "lens_demo", ...)`, shut down. The simulated run is
deterministic for a seed. On a terminal a progress bar and a table of the latest values
redraw in place, fitted to the terminal's width; anywhere else (a pipe, a file, `TERM=dumb`,
a terminal narrower than `MIN_LIVE_WIDTH` columns) one plain line per step.

The console file is OTLP/JSON, one export request a line (`nemo.lens._sdk._console`): what
the OpenTelemetry Collector's file exporter writes and its `otlpjsonfile` receiver reads.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

from nemo.lens import _otel_env
from nemo.lens.cli import _view
from nemo.lens.cli._common import (
    EXIT_BAD_INPUT,
    bind_problem,
    connect_problem,
    non_negative_float,
    positive_int,
    tcp_port,
)
from nemo.lens.instruments import MetricSpec, register_metric_group

HELP = "run a simulated RL training loop that exports lens traces and metrics"
DESCRIPTION = """\
Run a simulated RL training loop instrumented with lens: it declares a `lens_demo`
metric group, opens a span per step (span groups "job" and "step") and records the
lens_demo.* series every step.

  console     (default) spans and metrics go to a file (--out) as OTLP/JSON, one
              export request per line, as the OpenTelemetry Collector's file
              exporter writes them; no server needed.
  prometheus  metrics are served at http://127.0.0.1:9464/metrics (--port) while the
              run lasts; spans go to the --out file.
  otlp        spans and metrics go to an OTLP collector (--endpoint, or the
              OTEL_EXPORTER_OTLP_* variables).
"""
EPILOG = """\
examples:
  lens demo
  lens demo --view            (then an HTML report of the run: lens-demo.html)
  lens demo --steps 200 --exporter prometheus --port 9464
  lens demo --exporter otlp --endpoint http://localhost:4317

Ctrl-C stops the run cleanly: spans still open are ended, everything recorded so far is
flushed, and the exit status is 130.

exit status: 0 finished; 1 the exporter cannot start (missing package, unreachable
collector, port in use); 2 bad input; 130 interrupted by Ctrl-C.
"""

#: 128 + SIGINT, the shell's status for a run stopped with Ctrl-C.
EXIT_INTERRUPTED: Final = 130
DEFAULT_OUT: Final = "lens-demo.jsonl"
# console first: the default, which needs no server.
_EXPORTERS: Final = ("console", "prometheus", "otlp")
# The demo is short, so metrics export every second unless the user chose otherwise.
_DEMO_EXPORT_INTERVAL_MS: Final = "1000"


def _endpoint_url(text: str) -> str:
    parsed = urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(
            "expected a URL such as http://localhost:4317 (http or https, with a host), "
            f"got {text!r}"
        )
    try:
        parsed.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a URL with a valid port, got {text!r}") from exc
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `lens demo`."""
    parser.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        default=20,
        help="training steps to simulate (default: %(default)s)",
    )
    parser.add_argument(
        "--exporter",
        choices=_EXPORTERS,
        default="console",
        help="where telemetry goes (default: %(default)s)",
    )
    parser.add_argument(
        "--endpoint",
        type=_endpoint_url,
        metavar="URL",
        help="OTLP collector URL for --exporter otlp (sets OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help=f"OTLP/JSON file for the console and prometheus exporters (default: ./{DEFAULT_OUT})",
    )
    parser.add_argument(
        "--port",
        type=tcp_port,
        help="port for --exporter prometheus (default: OTEL_EXPORTER_PROMETHEUS_PORT or 9464)",
    )
    parser.add_argument(
        "--interval",
        type=non_negative_float,
        default=0.2,
        metavar="SECONDS",
        help="simulated work per step (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated run (default: %(default)s)"
    )
    parser.add_argument(
        "--view",
        action="store_true",
        help="then write an HTML report of the --out file, as `lens view` does",
    )


def _bad_input(message: str) -> int:
    print(f"lens demo: error: {message} (see 'lens demo --help')", file=sys.stderr)
    return EXIT_BAD_INPUT


def _check_options(args: argparse.Namespace) -> str | None:
    if args.endpoint is not None and args.exporter != "otlp":
        return f"--endpoint applies to --exporter otlp only, got --exporter {args.exporter}"
    if args.port is not None and args.exporter != "prometheus":
        return f"--port applies to --exporter prometheus only, got --exporter {args.exporter}"
    if args.view and args.exporter == "otlp":
        return "--view reports on the --out file; otlp sends to the collector instead"
    if args.out is not None and args.exporter == "otlp":
        return "--out applies to --exporter console or prometheus; otlp sends to the collector"
    if args.out is not None:
        if args.out.is_dir():
            return f"--out {str(args.out)!r} is a directory; give the path of a file to write"
        if not args.out.resolve().parent.is_dir():
            return (
                f"--out {str(args.out)!r}: the directory {str(args.out.resolve().parent)!r} "
                "does not exist; create it first or choose another path"
            )
    return None


def _prepare_environment(args: argparse.Namespace) -> str | None:
    """Point the exporters at their destination and check it; return a problem or None."""
    os.environ.setdefault("OTEL_METRIC_EXPORT_INTERVAL", _DEMO_EXPORT_INTERVAL_MS)
    if args.exporter == "otlp":
        if args.endpoint is not None:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.endpoint
        try:
            targets = _otel_env.otlp_targets(("traces", "metrics"))
        except ValueError as exc:
            return str(exc)
        for target in targets:
            problem = connect_problem(target.host, target.port, timeout=2.0)
            if problem is not None:
                return (
                    f"cannot reach the OTLP collector at {target.endpoint}: {problem}; start one "
                    "(see 'Exporters and backends' in the docs) or run 'lens demo' with the "
                    "default console exporter"
                )
    if args.exporter == "prometheus":
        if args.port is not None:
            os.environ["OTEL_EXPORTER_PROMETHEUS_PORT"] = str(args.port)
        try:
            host, port = _otel_env.prometheus_address()
        except ValueError as exc:
            return str(exc)
        problem = bind_problem(host, port)
        if problem is not None:
            return (
                f"cannot serve Prometheus metrics on {host}:{port}: {problem}; "
                "choose another --port"
            )
    return None


def _view_rows(
    result: StepResult, tokens_total: int, buffer_size: int
) -> list[tuple[str, str, str]]:
    units = {spec.key: spec.unit for spec in DEMO_SPECS}
    names = {spec.key: spec.name for spec in DEMO_SPECS}
    latest = {
        "reward_mean": f"{result.reward_mean:.4f}",
        "kl_divergence": f"{result.kl_divergence:.4f}",
        "policy_loss": f"{result.policy_loss:.4f}",
        "entropy": f"{result.entropy:.4f}",
        "tokens_generated": f"{tokens_total}",
        "generation_duration_ms": f"{result.generation_mean_ms:.1f}",
        "replay_buffer_size": f"{buffer_size}",
    }
    return [(names[key], value, units[key]) for key, value in latest.items()]


def _on_main_thread() -> bool:
    # Signal handlers can only be changed from the main thread.
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    # A second Ctrl-C must not abort the flush that makes the first one clean.
    if not _on_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Training:
    """The simulated loop; `completed` counts the steps that finished."""

    def __init__(self, handle: Any, args: argparse.Namespace, view: LiveView) -> None:
        self.handle = handle
        self.args = args
        self.view = view
        self.completed = 0

    def run(self) -> None:
        from nemo.lens import managed_span, record_metrics, semconv

        tracer, meter = self.handle.tracer, self.handle.meter
        steps, pause = self.args.steps, self.args.interval
        tokens_total = 0
        buffer_size = 0
        with managed_span(
            "job",
            f"{DEMO_GROUP}.job",
            tracer=tracer,
            **{semconv.RL_ALGORITHM: "grpo", "demo.steps": steps},
        ):
            for result in simulate(steps, seed=self.args.seed):
                with managed_span(
                    "step",
                    f"{DEMO_GROUP}.step",
                    tracer=tracer,
                    **{semconv.DL_ITERATION: result.step},
                ):
                    with managed_span(
                        "step",
                        f"{DEMO_GROUP}.generate",
                        tracer=tracer,
                        **{
                            semconv.RL_NUM_ROLLOUTS: len(result.generation_durations_ms),
                            semconv.RL_GENERATION_BACKEND: "simulated",
                        },
                    ):
                        time.sleep(pause * 0.7)
                    with managed_span("step", f"{DEMO_GROUP}.train", tracer=tracer):
                        time.sleep(pause * 0.3)
                    record_metrics(
                        meter,
                        DEMO_GROUP,
                        reward_mean=result.reward_mean,
                        kl_divergence=result.kl_divergence,
                        policy_loss=result.policy_loss,
                        entropy=result.entropy,
                        tokens_generated=result.tokens_generated,
                        replay_buffer_size=result.replay_buffer_change,
                    )
                    for duration_ms in result.generation_durations_ms:
                        record_metrics(meter, DEMO_GROUP, generation_duration_ms=duration_ms)
                tokens_total += result.tokens_generated
                buffer_size += result.replay_buffer_change
                self.completed += 1
                self.view.update(self.completed, _view_rows(result, tokens_total, buffer_size))


def _open_sink(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Open the OTLP/JSON-lines file and build the exporters that write into it."""
    from nemo.lens._sdk._console import JsonLinesFile, console_metric_reader, console_span_exporter

    if args.exporter == "otlp":
        return None, {}
    sink = JsonLinesFile((args.out or Path(DEFAULT_OUT)).resolve())
    injected: dict[str, Any] = {"span_exporter": console_span_exporter(sink)}
    if args.exporter == "console":
        injected["metric_reader"] = console_metric_reader(sink)
    return sink, injected


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when it finished, 130 when Ctrl-C stopped it."""
    problem = _check_options(args)
    if problem is not None:
        return _bad_input(problem)
    if not _otel_env.is_importable("opentelemetry.sdk"):
        problem = (
            f"the OpenTelemetry SDK is not installed; {_otel_env.install_hint(_otel_env.SDK_EXTRA)}"
        )
    else:
        problem = _prepare_environment(args)
    if problem is not None:
        print(f"lens demo: {problem}", file=sys.stderr)
        return 1
    if _on_main_thread():
        # A shell starts background jobs with SIGINT ignored; the demo promises Ctrl-C works.
        signal.signal(signal.SIGINT, signal.default_int_handler)

    from nemo.lens import NemoLensConfig, setup_telemetry

    config = NemoLensConfig(
        enabled=True,
        service_name="lens-demo",
        exporter=args.exporter,
        export_strategy="all_ranks",
        span_groups="job,step",
    )
    declare_demo_metrics()
    view = LiveView(sys.stdout, args.steps, live=is_live_terminal(sys.stdout))
    sink = handle = training = None
    interrupted = False
    try:
        sink, injected = _open_sink(args)
        handle = setup_telemetry(config, **injected)
        _announce(args, sink)
        training = _Training(handle, args, view)
        training.run()
    except KeyboardInterrupt:
        interrupted = True
    except (ImportError, OSError, ValueError) as exc:
        # The file cannot be written, or setup cannot build the exporter (a package
        # missing, a port taken since the check).
        print(f"lens demo: cannot start: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    finally:
        with _sigint_ignored():
            if handle is not None:
                handle.shutdown()
            if sink is not None:
                sink.close()
    completed = training.completed if training is not None else 0
    status = (
        f"interrupted after {completed} of {args.steps} steps"
        if interrupted
        else f"finished {completed} steps"
    )
    view.message(f"lens demo: {status}; telemetry flushed")
    if sink is not None:
        view.message(f"lens demo: {_what_was_written(sink, args.exporter)}")
    if args.view and sink is not None:
        sys.stdout.flush()
        viewed = _view.write_report([sink.path], _view.default_out(sink.path))
        if viewed != 0 and not interrupted:
            return viewed
    return EXIT_INTERRUPTED if interrupted else 0


def _what_was_written(sink: Any, exporter: str) -> str:
    """`'wrote 104 spans and 56 metric points to PATH (3 OTLP/JSON lines)'`."""
    kinds = ("spans", "metric points") if exporter == "console" else ("spans",)
    held = " and ".join(f"{sink.records_written.get(kind, 0)} {kind}" for kind in kinds)
    lines = sink.lines_written
    return f"wrote {held} to {sink.path} ({lines} OTLP/JSON line{'' if lines == 1 else 's'})"


def _announce(args: argparse.Namespace, sink: Any) -> None:
    if args.exporter == "prometheus":
        host, port = _otel_env.prometheus_address()
        print(f"lens demo: Prometheus metrics at http://{host}:{port}/metrics while the run lasts")
    if args.exporter == "otlp":
        targets = _otel_env.otlp_targets(("traces", "metrics"))
        endpoints = ", ".join(sorted({target.endpoint for target in targets}))
        print(f"lens demo: sending spans and metrics over OTLP to {endpoints}")
    if sink is not None:
        what = "spans and metrics" if args.exporter == "console" else "spans"
        print(f"lens demo: writing {what} as OTLP/JSON lines to {sink.path}")
    sys.stdout.flush()


# --- the simulated run ----------------------------------------------------------------

# Not "rl": lens-compat-rl records the legacy rl.* series into a group of that name.
DEMO_GROUP: Final = "lens_demo"
ROLLOUTS_PER_STEP: Final = 8

#: The group the demo declares, as a framework would declare its own.
DEMO_SPECS: Final = (
    MetricSpec(
        "reward_mean",
        "lens_demo.reward.mean",
        "gauge",
        description="Mean reward of the step's rollouts.",
    ),
    MetricSpec(
        "kl_divergence",
        "lens_demo.kl_divergence",
        "gauge",
        description="KL divergence between the policy and the reference policy.",
    ),
    MetricSpec(
        "policy_loss",
        "lens_demo.policy_loss",
        "gauge",
        description="Policy-gradient loss of the step.",
    ),
    MetricSpec(
        "entropy", "lens_demo.entropy", "gauge", description="Mean token entropy of the policy."
    ),
    MetricSpec(
        "tokens_generated",
        "lens_demo.tokens.generated",
        "counter",
        unit="{token}",
        description="Tokens generated by rollouts, summed over the run.",
    ),
    MetricSpec(
        "generation_duration_ms",
        "lens_demo.generation.duration",
        "histogram",
        unit="ms",
        description="Time to generate one rollout.",
    ),
    MetricSpec(
        "replay_buffer_size",
        "lens_demo.replay_buffer.size",
        "up_down_counter",
        unit="{rollout}",
        description="Rollouts waiting in the replay buffer.",
    ),
)


def declare_demo_metrics() -> None:
    """Register the demo's group (what `lens metrics --import` can list).

    Every run declares it again: a second `main(["demo"])` in one process (a notebook)
    replaces the group with the same specs instead of failing.
    """
    register_metric_group(DEMO_GROUP, DEMO_SPECS, allow_override=True)


@dataclass(frozen=True)
class StepResult:
    """What one simulated step produced."""

    step: int
    reward_mean: float
    kl_divergence: float
    policy_loss: float
    entropy: float
    tokens_generated: int
    generation_durations_ms: tuple[float, ...]
    replay_buffer_change: int

    @property
    def generation_mean_ms(self) -> float:
        """The mean rollout generation time of the step."""
        return sum(self.generation_durations_ms) / len(self.generation_durations_ms)


def simulate(steps: int, seed: int = 0) -> Iterator[StepResult]:
    """Yield `steps` steps of a run whose reward climbs while the policy drifts away."""
    rng = random.Random(seed)
    buffer_size = 0
    for step in range(steps):
        progress = 1.0 - math.exp(-step / max(steps / 4.0, 1.0))
        lengths = [
            max(16, int(rng.gauss(220.0 + 80.0 * progress, 40.0))) for _ in range(ROLLOUTS_PER_STEP)
        ]
        # About 0.6 ms per generated token, with a long tail from slow batches.
        durations = tuple(length * 0.6 * rng.lognormvariate(0.0, 0.25) for length in lengths)
        # A batch of rollouts arrives; the trainer drains more of the buffer as it fills.
        consumed = min(buffer_size + ROLLOUTS_PER_STEP, rng.randint(4, 7) + buffer_size // 4)
        change = ROLLOUTS_PER_STEP - consumed
        buffer_size += change
        yield StepResult(
            step=step,
            reward_mean=0.15 + 0.7 * progress + rng.gauss(0.0, 0.03),
            kl_divergence=max(0.0, 0.002 + 0.04 * progress + rng.gauss(0.0, 0.002)),
            policy_loss=0.9 * (1.0 - progress) + 0.05 + rng.gauss(0.0, 0.02),
            entropy=max(0.05, 1.6 - 0.8 * progress + rng.gauss(0.0, 0.04)),
            tokens_generated=sum(lengths),
            generation_durations_ms=durations,
            replay_buffer_change=change,
        )


# --- the terminal view --------------------------------------------------------------------

_BAR_WIDTH: Final = 30
# The latest-value column's width when the terminal has room (values change width per step).
_VALUE_WIDTH: Final = 12
# Narrower than this, a bar is no help: the progress line shows the percentage alone.
_MIN_BAR_WIDTH: Final = 5
_CLEAR_LINE: Final = "\x1b[2K"
#: Terminals narrower than this get plain lines instead of the live view.
MIN_LIVE_WIDTH: Final = 40


def is_live_terminal(stream: TextIO) -> bool:
    """True when `stream` is a terminal that understands cursor movement."""
    try:
        is_tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return is_tty and os.environ.get("TERM", "") != "dumb"


def terminal_width() -> int:
    """The terminal's width in columns: `COLUMNS` when set, else the terminal's own, else 80."""
    return shutil.get_terminal_size().columns


def _ellipsis_for(stream: TextIO) -> str:
    # A terminal whose encoding lacks the ellipsis character still gets a marker.
    try:
        "\u2026".encode(getattr(stream, "encoding", None) or "ascii")
    except (LookupError, UnicodeEncodeError):
        return "..."
    return "\u2026"


def fit(line: str, width: int, ellipsis: str = "\u2026") -> str:
    """`line` cut to `width` characters, ending in `ellipsis` when something was cut."""
    if len(line) <= width:
        return line
    return line[: max(width - len(ellipsis), 0)] + ellipsis[:width]


class LiveView:
    """Shows the progress of a run of `total` steps on `stream`.

    The live view redraws in place and fits every line to the terminal's width, read at
    each update (a resized terminal is followed); below `MIN_LIVE_WIDTH` columns it prints
    plain lines instead, as it does off a terminal.

    Args:
        stream: Where to draw, usually `sys.stdout`.
        total: The number of steps the run will make.
        live: Redraw in place (a terminal) instead of printing one line per step.
        width: Returns the terminal's width in columns (default: `terminal_width`).
    """

    def __init__(
        self,
        stream: TextIO,
        total: int,
        *,
        live: bool,
        width: Callable[[], int] = terminal_width,
    ) -> None:
        self._stream = stream
        self._total = total
        self._live = live
        self._width = width
        self._ellipsis = _ellipsis_for(stream)
        self._drawn_lines = 0
        self._started = time.monotonic()

    def update(self, done: int, rows: Sequence[tuple[str, str, str]]) -> None:
        """Show that `done` steps finished; `rows` are (series, latest value, unit)."""
        columns = self._width() if self._live else 0
        if columns >= MIN_LIVE_WIDTH:
            # One column spare: a line that fills the last column makes some terminals wrap.
            usable = columns - 1
            lines = self._live_lines(done, rows, usable)
            self._redraw([fit(line, usable, self._ellipsis) for line in lines])
        else:
            values = "  ".join(f"{series}={value}" for series, value, _ in rows)
            self._stream.write(f"step {done}/{self._total}  {values}\n")
            self._drawn_lines = 0  # a later live view starts below these lines
        self._stream.flush()

    def _progress_line(self, done: int, width: int) -> str:
        percent = 100 * done // max(self._total, 1)
        elapsed = max(time.monotonic() - self._started, 1e-9)
        head = f"step {done}/{self._total} "
        tail = f" {percent:3d}%  {done / elapsed:.1f} steps/s"
        bar_width = min(_BAR_WIDTH, width - len(head) - len(tail) - 2)
        if bar_width < _MIN_BAR_WIDTH:
            return head + tail.lstrip()
        filled = bar_width * done // max(self._total, 1)
        return f"{head}[{'#' * filled}{'-' * (bar_width - filled)}]{tail}"

    def _live_lines(self, done: int, rows: Sequence[tuple[str, str, str]], width: int) -> list[str]:
        return [self._progress_line(done, width), *self._table_lines(rows, width)]

    def _table_lines(self, rows: Sequence[tuple[str, str, str]], width: int) -> list[str]:
        # The values are what a reader watches: a narrow terminal shortens the series
        # names first, then the value column's padding, and only then cuts lines.
        names = max([len("series"), *(len(series) for series, _, _ in rows)])
        values = max([len("latest"), *(len(value) for _, value, _ in rows)])
        units = max([len("unit"), *(len(unit) for _, _, unit in rows)])
        spare = width - (2 + names + 2 + 2 + units)
        if spare >= values:
            value_width = min(spare, _VALUE_WIDTH)
            name_width = names
        else:
            value_width = values
            name_width = max(len("series"), width - (2 + 2 + value_width + 2 + units))
        lines = [f"  {'series':<{name_width}}  {'latest':>{value_width}}  unit"]
        lines += [
            f"  {fit(series, name_width, self._ellipsis):<{name_width}}  "
            f"{value:>{value_width}}  {unit}".rstrip()
            for series, value, unit in rows
        ]
        return lines

    def _redraw(self, lines: list[str]) -> None:
        if self._drawn_lines:
            # Move to the start of the first line drawn last time, then overwrite.
            self._stream.write(f"\x1b[{self._drawn_lines}F")
        self._stream.write("".join(f"{_CLEAR_LINE}{line}\n" for line in lines))
        self._drawn_lines = len(lines)

    def message(self, text: str) -> None:
        """Print a line below the view; the next update draws a fresh view under it."""
        self._stream.write(f"{text}\n")
        self._stream.flush()
        self._drawn_lines = 0
