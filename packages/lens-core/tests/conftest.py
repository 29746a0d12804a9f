"""Shared fixtures for lens-core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import lens_hypothesis
import pytest
from lens_env import clear_settings
from lens_ids import refuse_unstable_ids

from nemo.lens.testing import (
    InMemoryMetrics,
    InMemorySpans,
    in_memory_metrics,
    in_memory_spans,
    reset_metric_registry,
    reset_warning_memory,
)

lens_hypothesis.load_profile()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse ids that differ between collections (pytest-xdist's workers compare them)."""
    refuse_unstable_ids(items)


@pytest.fixture(autouse=True)
def _fresh_metric_registry() -> Iterator[None]:
    """Every test starts and ends with an empty metric registry and no warning memory."""
    reset_metric_registry()
    reset_warning_memory()
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """`os.environ` without lens or OpenTelemetry settings for this test (`lens_env`); the
    monkeypatch it returns sets the test's own, and everything is undone after the test."""
    return clear_settings(monkeypatch)


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline, shut down after the test."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    built = in_memory_metrics()
    yield built
    built.shutdown()


@pytest.fixture
def spans() -> Iterator[InMemorySpans]:
    """An in-memory span pipeline (not installed globally), shut down after the test."""
    pytest.importorskip("opentelemetry.sdk.trace")
    built = in_memory_spans()
    yield built
    built.shutdown()
