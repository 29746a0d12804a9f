"""Cross-package tests: lens-core together with, or without, lens-compat-rl.

Tests marked `shim` run only when lens-compat-rl is installed, tests marked `noshim` only
when it is not; the other is reported as skipped. LENS_TEST_SHIM=installed or =absent makes
a run insist on one mode, so a nox session cannot pass by skipping its half of the tests.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from typing import Any

import pytest

from nemo.lens.instruments import _registry


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


SHIM_INSTALLED = _distribution_installed("lens-compat-rl")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run when LENS_TEST_SHIM disagrees with what is installed."""
    expected = os.environ.get("LENS_TEST_SHIM", "")
    if expected not in ("", "installed", "absent"):
        raise pytest.UsageError(f"LENS_TEST_SHIM={expected!r}: use 'installed' or 'absent'")
    if expected and (expected == "installed") != SHIM_INSTALLED:
        actual = "installed" if SHIM_INSTALLED else "absent"
        raise pytest.UsageError(f"LENS_TEST_SHIM={expected}, but lens-compat-rl is {actual}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `shim` tests without lens-compat-rl and `noshim` tests with it."""
    for item in items:
        if not SHIM_INSTALLED and item.get_closest_marker("shim") is not None:
            item.add_marker(pytest.mark.skip(reason="needs lens-compat-rl installed"))
        if SHIM_INSTALLED and item.get_closest_marker("noshim") is not None:
            item.add_marker(pytest.mark.skip(reason="needs lens-compat-rl absent"))


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts and ends with an empty metric registry; with the shim installed,
    its once-per-process deprecation counts as already issued."""
    _registry.clear()
    if SHIM_INSTALLED:
        import lens_compat_rl._record

        monkeypatch.setattr(lens_compat_rl._record, "_deprecation_pending", [])
    yield
    _registry.clear()


class Pipeline:
    """A real SDK MeterProvider over an InMemoryMetricReader."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.meter = self.provider.get_meter("lens-cross-package-tests")

    def metrics(self) -> dict[str, Any]:
        """Return series name -> SDK metric, from one collection (collect once per check:
        older SDKs report a gauge only in the first collection after it was set)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return {}
        return {
            metric.name: metric
            for resource_metrics in data.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    """An in-memory metrics pipeline (needs opentelemetry-sdk), shut down after the test."""
    built = Pipeline()
    yield built
    built.provider.shutdown()
