"""Fixtures for lens-compat-rl's tests, which need the distribution installed.

Without it (a plain lens-core development install) the whole directory is skipped, unless
LENS_TEST_SHIMS says this run must have it: a comma-separated list of the shims a nox
session installed ("rl", "gym", "rl,gym") or "none". Listing "rl" without lens-compat-rl
installed is an error, so a session cannot pass by skipping everything here.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nemo.lens.instruments._legacy_recorder import LegacyRecorder
from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    reset_metric_registry,
    reset_warning_memory,
)

#: The names LENS_TEST_SHIMS may list (besides "none").
KNOWN_SHIMS = frozenset({"rl", "gym"})


def _shim_installed() -> bool:
    try:
        importlib.metadata.distribution("lens-compat-rl")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _listed_shims() -> frozenset[str]:
    """The shims LENS_TEST_SHIMS lists; empty when it is unset or "none"."""
    listed = os.environ.get("LENS_TEST_SHIMS", "").strip()
    if listed in ("", "none"):
        return frozenset()
    names = frozenset(name.strip() for name in listed.split(","))
    unknown = names - KNOWN_SHIMS
    if unknown:
        raise RuntimeError(
            f"LENS_TEST_SHIMS={listed!r} lists {sorted(unknown)}; use 'none' or a "
            f"comma-separated list of {sorted(KNOWN_SHIMS)}"
        )
    return names


SHIM_INSTALLED = _shim_installed()
if not SHIM_INSTALLED and "rl" in _listed_shims():
    raise RuntimeError("LENS_TEST_SHIMS lists 'rl', but lens-compat-rl is not installed")


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
    from lens_compat_rl._record import _recorder

    reset_metric_registry()
    reset_warning_memory()
    _recorder.once.first(LegacyRecorder.DEPRECATION_KEY)  # as if issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def armed_deprecation() -> None:
    """Make the next record_rl_metrics call behave as the first one in the process."""
    from lens_compat_rl._record import _recorder

    _recorder.once.clear()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline, shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()
