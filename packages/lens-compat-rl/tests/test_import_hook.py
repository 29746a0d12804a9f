"""lens-core's legacy-module finder serves nemo.lens.instruments.rl from lens_compat_rl.

The finder itself (install, prefix, metadata without its package, a broken shim) is tested
in lens-core's tests/test_legacy_modules.py, with a throwaway distribution; these tests
pin what lens-compat-rl's own entry point makes of it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pathlib
import re
import subprocess
import sys

import pytest

import lens_compat_rl
import nemo.lens
import nemo.lens.instruments
from nemo.lens._legacy_modules import ENTRY_POINT_GROUP, LegacyModuleFinder, legacy_module_targets

LEGACY_NAME = "nemo.lens.instruments.rl"
SHIM_MODULE = "lens_compat_rl._nemo_lens_instruments_rl"
# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 30


def test_legacy_module_comes_from_lens_compat_rl() -> None:
    """The module has the legacy name, its origin lies in lens_compat_rl, and lens-core's
    package directory holds no rl module."""
    legacy = importlib.import_module(LEGACY_NAME)

    shim_directory = pathlib.Path(lens_compat_rl.__file__).parent
    assert legacy.__name__ == LEGACY_NAME
    assert legacy.__spec__ is not None
    assert legacy.__spec__.origin is not None
    assert pathlib.Path(legacy.__spec__.origin).parent == shim_directory
    assert legacy.__file__ == legacy.__spec__.origin
    assert nemo.lens.instruments.rl is legacy
    assert legacy.__all__ == ["record_rl_metrics"]
    assert legacy.record_rl_metrics is lens_compat_rl.record_rl_metrics
    for directory in nemo.lens.instruments.__path__:
        assert not (pathlib.Path(directory) / "rl.py").exists()
        assert not (pathlib.Path(directory) / "rl").exists()


def test_the_finders_spec_points_at_the_shims_module() -> None:
    """The spec keeps the legacy name, is not a package, and has the shim module's origin."""
    real = importlib.import_module(SHIM_MODULE)

    spec = LegacyModuleFinder.find_spec(LEGACY_NAME)

    assert spec is not None
    assert spec.name == LEGACY_NAME
    assert spec.origin == real.__file__
    assert spec.has_location is True
    assert spec.submodule_search_locations is None


def test_a_fresh_interpreter_loads_nothing_of_lens_until_the_legacy_import() -> None:
    """No .pth file runs anything of lens at start-up; the legacy import alone then loads
    lens-core (whose import appends the finder once, last) and the shim."""
    script = (
        "import json, sys\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.startswith(('nemo', 'lens_compat')))\n"
        "def finders():\n"
        "    return [getattr(f, '__qualname__', type(f).__qualname__) for f in sys.meta_path]\n"
        "at_start = {'loaded': loaded(), 'finders': finders()}\n"
        "import nemo.lens.instruments.rl as legacy\n"
        "print(json.dumps({'at_start': at_start, 'finders': finders(),\n"
        "                  'shim_loaded': 'lens_compat_rl' in sys.modules,\n"
        "                  'legacy_file': legacy.__file__}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=CHILD_TIMEOUT,
    )

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["at_start"]["loaded"] == []
    assert "LegacyModuleFinder" not in report["at_start"]["finders"]
    assert report["finders"].count("LegacyModuleFinder") == 1
    # Behind the regular path finder, so a module lens-core ships always wins.
    assert report["finders"].index("PathFinder") < report["finders"].index("LegacyModuleFinder")
    assert report["shim_loaded"] is True
    assert (
        pathlib.Path(report["legacy_file"]).parent == pathlib.Path(lens_compat_rl.__file__).parent
    )


def test_the_installed_distribution_declares_the_legacy_module() -> None:
    """lens-compat-rl's metadata has one entry point in lens-core's group, naming the legacy
    module and the shim's module, and pins lens-core to its own release."""
    distribution = importlib.metadata.distribution("lens-compat-rl")

    (entry,) = distribution.entry_points.select(group=ENTRY_POINT_GROUP)

    assert (entry.name, entry.value) == (LEGACY_NAME, SHIM_MODULE)
    assert legacy_module_targets()[LEGACY_NAME] == SHIM_MODULE
    assert distribution.version == lens_compat_rl.__version__ == nemo.lens.__version__
    assert f"lens-core=={nemo.lens.__version__}" in (distribution.requires or [])


@pytest.mark.parametrize(
    "name",
    [
        "nemo.lens.instruments",
        "nemo.lens.instruments.rl_v2",
        "nemo.lens.instruments.rl.extra",
        "nemo.lens",
        "nemo.rl",
        "rl",
        SHIM_MODULE,
    ],
)
def test_the_finder_answers_only_for_declared_names(name: str) -> None:
    """Any name no installed shim declares, the shim's real module included, is left to
    the other finders."""
    assert LegacyModuleFinder.find_spec(name) is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nemo.lens.instruments.rl_v2", "No module named 'nemo.lens.instruments.rl_v2'"),
        ("nemo.lens.instruments.rl.extra", "'nemo.lens.instruments.rl' is not a package"),
    ],
)
def test_an_undeclared_name_fails_as_module_not_found(name: str, message: str) -> None:
    """Importing a name next to or below the legacy module fails the normal way."""
    with pytest.raises(ModuleNotFoundError, match=re.escape(message)) as raised:
        importlib.import_module(name)

    assert raised.value.name == name
    assert name not in sys.modules


def test_reloading_the_legacy_module_keeps_the_shims_function() -> None:
    """importlib.reload finds the spec again and refills the same module object."""
    legacy = importlib.import_module(LEGACY_NAME)

    reloaded = importlib.reload(legacy)

    assert reloaded is legacy
    assert reloaded.record_rl_metrics is lens_compat_rl.record_rl_metrics
    assert reloaded.__all__ == ["record_rl_metrics"]
