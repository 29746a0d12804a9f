"""Importing a third-party runtime (Ray, torch) for a test that needs it.

The integrations sessions install these runtimes and set `LENS_TEST_REQUIRE` to a comma
list of the ones they installed; there a missing runtime fails the test instead of
skipping it, so a broken install cannot pass as "skipped". Everywhere else (the matrix
cells, a development venv without them) such a test skips.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def required_runtimes() -> frozenset[str]:
    """The runtimes this run must have (`LENS_TEST_REQUIRE`, comma-separated)."""
    listed = os.environ.get("LENS_TEST_REQUIRE", "")
    return frozenset(part.strip() for part in listed.split(",") if part.strip())


def require(module_name: str) -> ModuleType:
    """Import `module_name`; skip the test without it, unless this run requires it."""
    if module_name in required_runtimes():
        return importlib.import_module(module_name)
    module: ModuleType = pytest.importorskip(module_name)
    return module
