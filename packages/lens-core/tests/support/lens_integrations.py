"""Finding a third-party runtime (Ray, torch, mypy, the prometheus server) for a test.

The sessions that install such a runtime set `LENS_TEST_REQUIRE` to a comma list of the
ones they installed (the integrations sessions: ray or torch; typecheck: mypy; `.ci/run`,
which installs Debian's prometheus and chromium: prometheus,chromium); there a missing
runtime fails the test instead of skipping it, so a broken install cannot pass as
"skipped". Everywhere else (a development venv without them) such a test skips.
"""

from __future__ import annotations

import importlib
import os
import shutil
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


def require_program(name: str) -> str:
    """The path of the program `name` on PATH; skip the test without it, unless this run
    requires it."""
    found = shutil.which(name)
    if found is not None:
        return found
    if name in required_runtimes():
        pytest.fail(f"LENS_TEST_REQUIRE lists {name}, but no {name} program is on PATH")
    pytest.skip(f"no {name} program on PATH (Debian: apt-get install {name}; .ci/run does)")
