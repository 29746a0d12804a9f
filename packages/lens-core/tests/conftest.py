"""Shared fixtures for lens-core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lens_pipeline import MetricsPipeline

from nemo.lens.instruments import _registry


@pytest.fixture(autouse=True)
def _fresh_metric_registry() -> Iterator[None]:
    """Every test starts and ends with an empty metric registry and no warning memory."""
    _registry.clear()
    yield
    _registry.clear()


@pytest.fixture
def pipeline() -> Iterator[MetricsPipeline]:
    """An in-memory metrics pipeline, shut down after the test."""
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    del sdk
    built = MetricsPipeline()
    yield built
    built.provider.shutdown()
