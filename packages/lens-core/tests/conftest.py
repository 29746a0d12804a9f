"""Shared fixtures for lens-core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
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
