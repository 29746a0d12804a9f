"""Fixtures for lens-compat-gym's tests, which need the distribution installed.

Without it (a plain lens-core development install) the whole directory is skipped, unless
LENS_TEST_SHIMS, the comma-separated list of shims a run must have ("rl,gym", "gym",
"none"; the nox sessions set it), names "gym": then a missing distribution is an error, so
a session cannot pass by skipping these tests.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    reset_metric_registry,
    reset_warning_memory,
)

DISTRIBUTION = "lens-compat-gym"
#: The names LENS_TEST_SHIMS may list (besides "none").
KNOWN_SHIMS = frozenset({"rl", "gym"})
# A child interpreter that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 60
# Variables that would change what a child imports; each child sets its own PYTHONPATH.
_IMPORT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")


def _required_shims() -> frozenset[str]:
    """The shims LENS_TEST_SHIMS says this run must have; empty when unset or "none"."""
    listed = os.environ.get("LENS_TEST_SHIMS", "").strip()
    if listed in ("", "none"):
        return frozenset()
    names = frozenset(name.strip() for name in listed.split(","))
    if not names <= KNOWN_SHIMS:
        # A typo ("gmy") must not turn this run into one that may skip everything.
        raise RuntimeError(
            f"LENS_TEST_SHIMS={listed!r} lists {sorted(names - KNOWN_SHIMS)}; use 'none' "
            f"or a comma-separated list of {sorted(KNOWN_SHIMS)}"
        )
    return names


def _installed() -> bool:
    try:
        importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


SHIM_INSTALLED = _installed()
if "gym" in _required_shims() and not SHIM_INSTALLED:
    raise RuntimeError(f"LENS_TEST_SHIMS lists 'gym', but {DISTRIBUTION} is not installed")


class _ShimNotInstalled(pytest.File):
    """Stands in for a test module that cannot be imported without lens-compat-gym."""

    def collect(self) -> list[pytest.Item]:
        pytest.skip(f"{DISTRIBUTION} is not installed")


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """Without the shim, report every test module here as skipped instead of failing."""
    if SHIM_INSTALLED:
        return None
    return _ShimNotInstalled.from_parent(parent, path=module_path)


@pytest.fixture(autouse=True)
def _isolated_shim() -> Iterator[None]:
    """Each test starts with an empty registry, the deprecation already issued and no
    failure memory; tests of the warning itself re-arm it with `armed_deprecation`."""
    from lens_compat_gym._record import _recorder
    from nemo.lens.instruments._legacy_recorder import LegacyRecorder

    reset_metric_registry()
    reset_warning_memory()
    _recorder.once.first(LegacyRecorder.DEPRECATION_KEY)  # as issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def armed_deprecation() -> None:
    """Make the next record_gym_metrics call behave as the first one in the process."""
    from lens_compat_gym._record import _recorder

    _recorder.once.clear()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline on the real SDK, shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()


def _run_child(
    arguments: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path,
    python: str | os.PathLike[str] = sys.executable,
    python_path: Sequence[str | os.PathLike[str]] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name not in _IMPORT_VARIABLES}
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in python_path)
    env.update(extra_env or {})
    return subprocess.run(
        [str(python), *(str(argument) for argument in arguments)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=CHILD_TIMEOUT,
    )


@pytest.fixture
def run_child() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs `python ARGUMENTS` (this interpreter unless `python=` says otherwise) in a fresh
    process, bounded by CHILD_TIMEOUT, with `python_path` as its whole PYTHONPATH."""
    return _run_child
