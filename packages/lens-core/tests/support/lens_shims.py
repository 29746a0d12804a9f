"""What the deprecation shims' tests share: which shims exist, which are installed, the run's
LENS_TEST_SHIMS, their fixtures, and the JSON report of a child interpreter.

Used by the root tests/conftest.py and by each shim's tests/conftest.py. Only the standard
library, pytest and lens-core's API-only modules are imported here: the API-only session
(`nox -s nooptionals`) loads the root conftest too.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lens_children import child_env, run_python

from nemo.lens.instruments import MetricSpec
from nemo.lens.instruments._legacy_recorder import LegacyRecorder
from nemo.lens.testing import (
    InMemoryMetrics,
    in_memory_metrics,
    reset_metric_registry,
    reset_warning_memory,
)

#: The monorepo's packages/ directory, where each shim's sources are.
PACKAGES = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Shim:
    """One deprecation shim and the names it goes by."""

    #: As markers and LENS_TEST_SHIMS spell it: "rl", "gym".
    name: str
    distribution: str
    #: The import package, e.g. lens_compat_rl.
    package: str
    #: The name lens-core's finder serves, e.g. nemo.lens.instruments.rl.
    legacy_module: str
    legacy_function: str
    #: The module the shim's entry point names, which the finder serves the legacy name from.
    served_module: str
    #: The module holding the shim's LegacyRecorder (`_recorder`) and REMOVAL_RELEASE.
    recording_module: str
    #: The package's names of its legacy group and of the specs it registers there.
    group_attribute: str
    specs_attribute: str

    @property
    def sources(self) -> Path:
        """The shim's source tree (its pyproject.toml) in this checkout."""
        return PACKAGES / self.distribution

    def installed(self) -> bool:
        """Whether this interpreter sees the distribution's metadata."""
        try:
            importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def function(self) -> Callable[..., None]:
        """The legacy function, as the shim's package exports it."""
        function: Callable[..., None] = getattr(
            importlib.import_module(self.package), self.legacy_function
        )
        return function

    def specs(self) -> tuple[MetricSpec, ...]:
        """The legacy definition the shim registers when no one else has."""
        specs: tuple[MetricSpec, ...] = getattr(
            importlib.import_module(self.package), self.specs_attribute
        )
        return specs

    def recorder(self) -> LegacyRecorder:
        """The shim's recorder, which holds its once-per-process deprecation."""
        recorder: LegacyRecorder = importlib.import_module(self.recording_module)._recorder
        return recorder


def _shim(name: str) -> Shim:
    package = f"lens_compat_{name}"
    return Shim(
        name=name,
        distribution=f"lens-compat-{name}",
        package=package,
        legacy_module=f"nemo.lens.instruments.{name}",
        legacy_function=f"record_{name}_metrics",
        served_module=f"{package}._nemo_lens_instruments_{name}",
        recording_module=f"{package}._record",
        group_attribute=f"LEGACY_{name.upper()}_GROUP",
        specs_attribute=f"LEGACY_{name.upper()}_SPECS",
    )


SHIMS = {name: _shim(name) for name in ("rl", "gym")}
INSTALLED_SHIMS = frozenset(name for name, shim in SHIMS.items() if shim.installed())
#: Runs a test once per shim, each only where that shim is installed (tests/conftest.py).
EACH_SHIM = pytest.mark.parametrize(
    "shim",
    [pytest.param(shim, marks=pytest.mark.shim(name), id=name) for name, shim in SHIMS.items()],
)
#: Runs a test once per shim, each only where that shim is absent.
EACH_ABSENT_SHIM = pytest.mark.parametrize(
    "shim",
    [pytest.param(shim, marks=pytest.mark.noshim(name), id=name) for name, shim in SHIMS.items()],
)


def listed_shims() -> frozenset[str] | None:
    """The shims LENS_TEST_SHIMS says this run has installed ("rl,gym", "gym", "none"; the
    nox sessions set it); None when it is not set."""
    listed = os.environ.get("LENS_TEST_SHIMS", "").strip()
    if not listed:
        return None
    if listed == "none":
        return frozenset()
    names = frozenset(name.strip() for name in listed.split(","))
    unknown = names - set(SHIMS)
    if unknown:
        # A typo ("gmy") must not turn this run into one that may skip everything.
        raise pytest.UsageError(
            f"LENS_TEST_SHIMS={listed!r}: {sorted(unknown)} unknown; use 'none' or a "
            f"comma-separated list of {sorted(SHIMS)}"
        )
    return names


def check_listed_shims() -> None:
    """Refuse a run whose LENS_TEST_SHIMS disagrees with what is installed, so a session
    cannot pass by skipping the tests of a shim it failed to install."""
    listed = listed_shims()
    if listed is not None and listed != INSTALLED_SHIMS:
        raise pytest.UsageError(
            f"LENS_TEST_SHIMS names {sorted(listed)}, but installed are {sorted(INSTALLED_SHIMS)}"
        )


class _ShimNotInstalled(pytest.File):
    """Stands in for a test module that cannot be imported without its shim."""

    def __init__(self, *, distribution: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.distribution = distribution

    def collect(self) -> list[pytest.Item]:
        pytest.skip(f"{self.distribution} is not installed")


def skip_modules_without(name: str) -> Callable[[Path, pytest.Collector], pytest.File | None]:
    """The `pytest_pycollect_makemodule` hook of shim `name`'s tests directory: without the
    shim, every test module there is reported as skipped instead of failing to import."""
    shim = SHIMS[name]

    def pytest_pycollect_makemodule(
        module_path: Path, parent: pytest.Collector
    ) -> pytest.File | None:
        if name in INSTALLED_SHIMS:
            return None
        return _ShimNotInstalled.from_parent(
            parent, path=module_path, distribution=shim.distribution
        )

    return pytest_pycollect_makemodule


@pytest.fixture(autouse=True)
def isolated_registry() -> Iterator[None]:
    """Each test starts and ends with an empty metric registry and no warning memory, and
    each installed shim's once-per-process deprecation counts as already issued (tests of
    the warning itself re-arm it with `armed_deprecation`)."""
    reset_metric_registry()
    reset_warning_memory()
    for name in INSTALLED_SHIMS:
        SHIMS[name].recorder().once.first(LegacyRecorder.DEPRECATION_KEY)  # as if issued
    yield
    reset_metric_registry()
    reset_warning_memory()


@pytest.fixture
def armed_deprecation() -> None:
    """The next call of each installed shim's legacy function behaves as the first one in
    the process: it issues the deprecation."""
    for name in INSTALLED_SHIMS:
        SHIMS[name].recorder().once.clear()


@pytest.fixture
def pipeline() -> Iterator[InMemoryMetrics]:
    """An in-memory metrics pipeline on the real SDK, shut down after the test."""
    built = in_memory_metrics()
    yield built
    built.shutdown()


def python_report(
    arguments: Sequence[str | os.PathLike[str]],
    *,
    python: str | os.PathLike[str] = sys.executable,
    python_path: Sequence[str | os.PathLike[str]] = (),
    cwd: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """What `python ARGUMENTS` (this interpreter unless `python` says otherwise), run by
    `lens_children.run_python` with `python_path` as its whole PYTHONPATH, printed as JSON;
    it must exit 0 with nothing on stderr (no warning, no traceback)."""
    result = run_python(*arguments, env=child_env(python_path=python_path), python=python, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report: dict[str, Any] = json.loads(result.stdout)
    return report
