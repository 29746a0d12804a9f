"""Shared fixtures for lens-core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nemo.lens.testing import (
    InMemoryMetrics,
    InMemorySpans,
    in_memory_metrics,
    in_memory_spans,
    reset_metric_registry,
    reset_warning_memory,
)


@pytest.fixture(autouse=True)
def _fresh_metric_registry() -> Iterator[None]:
    """Every test starts and ends with an empty metric registry and no warning memory."""
    reset_metric_registry()
    reset_warning_memory()
    yield
    reset_metric_registry()
    reset_warning_memory()


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
