"""Shared fixtures for lens-core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nemo.lens.instruments import _registry
from nemo.lens.testing import InMemoryMetrics, in_memory_metrics


@pytest.fixture(autouse=True)
def _fresh_metric_registry() -> Iterator[None]:
    """Every test starts and ends with an empty metric registry and no warning memory."""
    _registry.clear()
    yield
    _registry.clear()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline, shut down after the test."""
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    del sdk
    built = in_memory_metrics()
    yield built
    built.shutdown()
