"""Cross-package tests: lens-core with or without each deprecation shim.

`@pytest.mark.shim("gym")` tests run only when lens-compat-gym is installed,
`@pytest.mark.noshim("gym")` tests only when it is not; the other is reported as skipped
(`lens_shims.EACH_SHIM` and `EACH_ABSENT_SHIM` parametrize a test over the shims so).
LENS_TEST_SHIMS names the shims a run must find installed ("rl,gym", "gym", "none"), so a
nox session cannot pass by skipping its half of the tests.
"""

from __future__ import annotations

import lens_hypothesis
import pytest
from lens_ids import refuse_unstable_ids
from lens_shims import (  # noqa: F401  (the fixtures these tests use)
    INSTALLED_SHIMS,
    SHIMS,
    armed_deprecation,
    check_listed_shims,
    isolated_registry,
    pipeline,
)

lens_hypothesis.load_profile()


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run when LENS_TEST_SHIMS disagrees with what is installed."""
    check_listed_shims()


def _marked_shim(item: pytest.Item, marker_name: str) -> str | None:
    marker = item.get_closest_marker(marker_name)
    if marker is None:
        return None
    (shim,) = marker.args
    if shim not in SHIMS:
        raise pytest.UsageError(f"{item.nodeid}: {marker_name}({shim!r}) names no shim")
    return str(shim)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `shim(x)` tests without lens-compat-x and `noshim(x)` tests with it; refuse ids
    that differ between collections (pytest-xdist's workers compare them)."""
    refuse_unstable_ids(items)
    for item in items:
        needed = _marked_shim(item, "shim")
        if needed is not None and needed not in INSTALLED_SHIMS:
            item.add_marker(
                pytest.mark.skip(reason=f"needs {SHIMS[needed].distribution} installed")
            )
        refused = _marked_shim(item, "noshim")
        if refused is not None and refused in INSTALLED_SHIMS:
            item.add_marker(pytest.mark.skip(reason=f"needs {SHIMS[refused].distribution} absent"))
