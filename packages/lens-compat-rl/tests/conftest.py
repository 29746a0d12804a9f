"""Fixtures for lens-compat-rl's tests, which need the distribution installed.

Without it (a plain lens-core development install) the whole directory is skipped,
unless LENS_TEST_SHIM=installed says this run must have it, as the nox `compat` sessions do.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _shim_installed() -> bool:
    try:
        importlib.metadata.distribution("lens-compat-rl")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


SHIM_INSTALLED = _shim_installed()
if not SHIM_INSTALLED and os.environ.get("LENS_TEST_SHIM") == "installed":
    raise RuntimeError("LENS_TEST_SHIM=installed, but lens-compat-rl is not installed")


class _ShimNotInstalled(pytest.File):
    """Stands in for a test module that cannot be imported without lens-compat-rl."""

    def collect(self) -> list[pytest.Item]:
        pytest.skip("lens-compat-rl is not installed")


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """Without the shim, report every test module here as skipped instead of failing."""
    if SHIM_INSTALLED:
        return None
    return _ShimNotInstalled.from_parent(parent, path=module_path)


class Collected(dict[str, Any]):
    """One collection: series name -> SDK metric."""

    def points(self, name: str) -> list[Any]:
        """The data points of one series (empty when it does not exist)."""
        metric = self.get(name)
        return [] if metric is None else list(metric.data.data_points)


class Pipeline:
    """A real SDK MeterProvider over an InMemoryMetricReader.

    Collect once per check: older SDKs report a gauge only in the first collection after
    it was set.
    """

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.meter = self.provider.get_meter("lens-compat-rl-tests")

    def collect(self) -> Collected:
        """Collect every series once."""
        data = self.reader.get_metrics_data()
        collected = Collected()
        if data is not None:
            for resource_metrics in data.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        collected[metric.name] = metric
        return collected


@pytest.fixture(autouse=True)
def _isolated_shim(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with an empty registry, the deprecation already issued and no
    failure memory; tests of the warning itself re-arm it with `armed_deprecation`."""
    import lens_compat_rl._record
    from nemo.lens.instruments import _registry

    _registry.clear()
    monkeypatch.setattr(lens_compat_rl._record, "_deprecation_pending", [])
    monkeypatch.setattr(lens_compat_rl._record, "_logged_failures", set())
    yield
    _registry.clear()


@pytest.fixture
def armed_deprecation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next record_rl_metrics call behave as the first one in the process."""
    import lens_compat_rl._record

    monkeypatch.setattr(lens_compat_rl._record, "_deprecation_pending", [True])


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    """An in-memory metrics pipeline, shut down after the test."""
    built = Pipeline()
    yield built
    built.provider.shutdown()
