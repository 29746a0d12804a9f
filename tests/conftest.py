"""Cross-package tests: lens-core with or without each deprecation shim.

`@pytest.mark.shim("gym")` tests run only when lens-compat-gym is installed,
`@pytest.mark.noshim("gym")` tests only when it is not; the other is reported as skipped.
LENS_TEST_SHIMS names the shims a run must find installed ("rl,gym", "gym", "none"), so a
nox session cannot pass by skipping its half of the tests.
"""

from __future__ import annotations

import importlib
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

#: Shim name (as markers and LENS_TEST_SHIMS spell it) -> (distribution, recording module).
SHIMS = {
    "rl": ("lens-compat-rl", "lens_compat_rl._record"),
    "gym": ("lens-compat-gym", "lens_compat_gym._record"),
}


def _distribution_installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


INSTALLED_SHIMS = frozenset(
    shim for shim, (distribution, _) in SHIMS.items() if _distribution_installed(distribution)
)


def _expected_shims() -> frozenset[str] | None:
    """The shims LENS_TEST_SHIMS says are installed; None when it is not set."""
    expected = os.environ.get("LENS_TEST_SHIMS", "").strip()
    if not expected:
        return None
    if expected == "none":
        return frozenset()
    names = frozenset(name.strip() for name in expected.split(","))
    unknown = names - set(SHIMS)
    if unknown:
        raise pytest.UsageError(
            f"LENS_TEST_SHIMS={expected!r}: {sorted(unknown)} unknown; use 'none' or a "
            f"comma-separated list of {sorted(SHIMS)}"
        )
    return names


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run when LENS_TEST_SHIMS disagrees with what is installed."""
    expected = _expected_shims()
    if expected is not None and expected != INSTALLED_SHIMS:
        raise pytest.UsageError(
            f"LENS_TEST_SHIMS names {sorted(expected)}, but installed are {sorted(INSTALLED_SHIMS)}"
        )


def _marked_shim(item: pytest.Item, marker_name: str) -> str | None:
    marker = item.get_closest_marker(marker_name)
    if marker is None:
        return None
    (shim,) = marker.args
    if shim not in SHIMS:
        raise pytest.UsageError(f"{item.nodeid}: {marker_name}({shim!r}) names no shim")
    return str(shim)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `shim(x)` tests without lens-compat-x and `noshim(x)` tests with it."""
    for item in items:
        needed = _marked_shim(item, "shim")
        if needed is not None and needed not in INSTALLED_SHIMS:
            item.add_marker(pytest.mark.skip(reason=f"needs {SHIMS[needed][0]} installed"))
        refused = _marked_shim(item, "noshim")
        if refused is not None and refused in INSTALLED_SHIMS:
            item.add_marker(pytest.mark.skip(reason=f"needs {SHIMS[refused][0]} absent"))


@pytest.fixture(autouse=True)
def _isolated_registry() -> Iterator[None]:
    """Each test starts and ends with an empty metric registry; each installed shim's
    once-per-process deprecation counts as already issued."""
    reset_metric_registry()
    reset_warning_memory()
    for shim in INSTALLED_SHIMS:
        recorder = importlib.import_module(SHIMS[shim][1])._recorder
        recorder.once.first(recorder.DEPRECATION_KEY)  # as issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline (needs opentelemetry-sdk), shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()
