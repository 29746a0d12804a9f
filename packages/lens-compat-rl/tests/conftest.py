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

from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    reset_metric_registry,
    reset_warning_memory,
)


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


@pytest.fixture(autouse=True)
def _isolated_shim() -> Iterator[None]:
    """Each test starts with an empty registry, the deprecation already issued and no
    failure memory; tests of the warning itself re-arm it with `armed_deprecation`."""
    import lens_compat_rl._record

    reset_metric_registry()
    reset_warning_memory()
    lens_compat_rl._record._once.first(lens_compat_rl._record._DEPRECATION)  # as issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def armed_deprecation() -> None:
    """Make the next record_rl_metrics call behave as the first one in the process."""
    import lens_compat_rl._record

    lens_compat_rl._record._once.clear()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline, shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()
