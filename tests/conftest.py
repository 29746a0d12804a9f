"""Cross-package tests: lens-core together with, or without, lens-compat-rl.

Tests marked `shim` run only when lens-compat-rl is installed, tests marked `noshim` only
when it is not; the other is reported as skipped. LENS_TEST_SHIM=installed or =absent makes
a run insist on one mode, so a nox session cannot pass by skipping its half of the tests.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator

import pytest

from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    reset_metric_registry,
    reset_warning_memory,
)


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
def _isolated_registry() -> Iterator[None]:
    """Each test starts and ends with an empty metric registry; with the shim installed,
    its once-per-process deprecation counts as already issued."""
    reset_metric_registry()
    reset_warning_memory()
    if SHIM_INSTALLED:
        import lens_compat_rl._record

        lens_compat_rl._record._once.first(lens_compat_rl._record._DEPRECATION)  # as issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline (needs opentelemetry-sdk), shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()
