"""`shutdown(timeout_ms=...)` and `force_flush(timeout_ms=...)` accept any value and never raise.

None, NaN and non-numbers mean the default budget (non-numbers and NaN with one
warning); negative means 0; anything above the documented maximum, infinity included,
means the maximum. The handle is marked done only when the work starts, so an odd value
no longer leaves a handle that is "done" with nothing exported.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction

import pytest
from lens_ids import stable_id
from lens_threads import eventually
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nemo.lens import NemoLensConfig, TelemetryHandle, _shutdown, setup_telemetry
from nemo.lens.testing import isolated_telemetry

#: Values that raised (None, NaN, infinity, 10**20, object()) and their relatives.
ODD_TIMEOUTS = [
    None,
    math.nan,
    math.inf,
    -math.inf,
    10**20,
    10**400,
    -5,
    0,
    2.5,
    Decimal("250"),
    Fraction(5, 2),
    True,
    "5000",
    b"5000",
    object(),
    [5000],
]
ODD_IDS = [stable_id(value) for value in ODD_TIMEOUTS]
WAIT_S = 10.0
#: The documented default and maximum (spelled out: a test must not take them on trust).
DEFAULT_TIMEOUT_MS = 5000
MAX_TIMEOUT_MS = 600_000


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry(clear_span_registry=True):
        yield


def exporting_handle() -> tuple[TelemetryHandle, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    handle = setup_telemetry(
        NemoLensConfig(enabled=True), span_exporter=exporter, metric_reader=InMemoryMetricReader()
    )
    return handle, exporter


def shutdown_done(handle: TelemetryHandle) -> bool:
    """Read the private flag consumers name (a call, so mypy does not narrow it)."""
    return handle._shutdown_done


@pytest.mark.parametrize(
    ("timeout_ms", "expected"),
    [
        (None, DEFAULT_TIMEOUT_MS),
        (math.nan, DEFAULT_TIMEOUT_MS),
        (math.inf, MAX_TIMEOUT_MS),
        (10**20, MAX_TIMEOUT_MS),
        (10**400, MAX_TIMEOUT_MS),
        (float(MAX_TIMEOUT_MS) + 0.5, MAX_TIMEOUT_MS),
        (-math.inf, 0),
        (-1, 0),
        (0, 0),
        (2.9, 2),
        (1500, 1500),
        (Decimal("250.7"), 250),
        (Fraction(7, 2), 3),
        (True, DEFAULT_TIMEOUT_MS),
        ("100", DEFAULT_TIMEOUT_MS),
        (object(), DEFAULT_TIMEOUT_MS),
    ],
    ids=stable_id,
)
def test_budget_is_clamped_or_defaulted(timeout_ms: object, expected: int) -> None:
    """The budget rule: None/NaN/non-number -> default, negative -> 0, huge/inf -> maximum."""
    assert (_shutdown.DEFAULT_TIMEOUT_MS, _shutdown.MAX_TIMEOUT_MS) == (5000, 600_000)
    assert _shutdown.budget_ms("test", timeout_ms) == expected


@pytest.mark.parametrize("timeout_ms", ODD_TIMEOUTS, ids=ODD_IDS)
def test_shutdown_with_any_timeout_exports_and_marks_itself_done(timeout_ms: object) -> None:
    """shutdown(timeout_ms=<odd>) never raises, exports what was recorded and ends done."""
    handle, exporter = exporting_handle()
    with handle.tracer.start_as_current_span("before-shutdown"):
        pass
    handle.shutdown(timeout_ms=timeout_ms)  # type: ignore[arg-type]
    assert shutdown_done(handle) is True
    assert eventually(lambda: len(exporter.get_finished_spans()) == 1)
    handle.shutdown()  # a second call is a no-op
    assert [span.name for span in exporter.get_finished_spans()] == ["before-shutdown"]


# A zero budget leaves the export to the batch processor's next tick (5 s): soak sessions only.
@pytest.mark.soak
@pytest.mark.parametrize("timeout_ms", ODD_TIMEOUTS, ids=ODD_IDS)
def test_force_flush_with_any_timeout_flushes_and_leaves_shutdown_to_do(
    timeout_ms: object,
) -> None:
    """force_flush(timeout_ms=<odd>) never raises, exports, and a later shutdown still runs."""
    handle, exporter = exporting_handle()
    with handle.tracer.start_as_current_span("before-flush"):
        pass
    assert handle.force_flush(timeout_ms=timeout_ms) in (True, False)  # type: ignore[arg-type]
    assert eventually(lambda: len(exporter.get_finished_spans()) == 1)
    assert shutdown_done(handle) is False
    with handle.tracer.start_as_current_span("before-shutdown"):
        pass
    handle.shutdown()
    assert shutdown_done(handle) is True
    assert [span.name for span in exporter.get_finished_spans()] == [
        "before-flush",
        "before-shutdown",
    ]


def test_a_non_number_timeout_warns_once_per_call_kind(caplog: pytest.LogCaptureFixture) -> None:
    """Two force_flush(object()) calls log one warning; the default budget is named."""
    handle, _ = exporting_handle()
    caplog.set_level(logging.WARNING, logger="nemo.lens._shutdown")
    assert handle.force_flush(timeout_ms=object()) is True  # type: ignore[arg-type]
    assert handle.force_flush(timeout_ms=object()) is True  # type: ignore[arg-type]
    warnings = [r for r in caplog.records if "timeout_ms must be a number" in r.getMessage()]
    assert len(warnings) == 1
    assert f"using {DEFAULT_TIMEOUT_MS} ms" in warnings[0].getMessage()
    handle.shutdown()


def test_an_infinite_budget_is_bounded_by_the_maximum_and_returns_when_done() -> None:
    """shutdown(timeout_ms=inf) waits only as long as the work takes, not forever."""
    handle, exporter = exporting_handle()
    with handle.tracer.start_as_current_span("inf"):
        pass
    started = time.monotonic()
    handle.shutdown(timeout_ms=math.inf)
    assert time.monotonic() - started < WAIT_S
    assert [span.name for span in exporter.get_finished_spans()] == ["inf"]
