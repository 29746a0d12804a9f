"""lens-core without a shim: its legacy module is gone and lens-core carries none of its code.

Each test runs once per shim, and only in sessions where that shim is not installed (the
`compat` sessions install one shim without the other, too).
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import nemo.lens.instruments
from nemo.lens import registered_metric_groups

# shim -> (legacy module, legacy function, the shim's import package)
LEGACY = {
    "rl": ("nemo.lens.instruments.rl", "record_rl_metrics", "lens_compat_rl"),
    "gym": ("nemo.lens.instruments.gym", "record_gym_metrics", "lens_compat_gym"),
}
EACH_ABSENT_SHIM = pytest.mark.parametrize(
    "shim", [pytest.param(shim, marks=pytest.mark.noshim(shim), id=shim) for shim in LEGACY]
)
# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 60


@EACH_ABSENT_SHIM
def test_importing_the_legacy_module_raises_module_not_found(shim: str) -> None:
    """`import nemo.lens.instruments.<shim>` fails with ModuleNotFoundError naming the module."""
    module, _, _ = LEGACY[shim]
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(module)

    assert raised.value.name == module


@EACH_ABSENT_SHIM
def test_a_fresh_interpreter_cannot_import_the_legacy_function(shim: str) -> None:
    """Legacy code run in a new process stops at its import with ModuleNotFoundError."""
    module, function, _ = LEGACY[shim]
    result = subprocess.run(
        [sys.executable, "-c", f"from {module} import {function}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=CHILD_TIMEOUT,
    )

    assert result.returncode == 1
    assert f"ModuleNotFoundError: No module named '{module}'" in result.stderr


@EACH_ABSENT_SHIM
def test_the_shim_package_is_absent(shim: str) -> None:
    """The shim's package cannot be imported."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(LEGACY[shim][2])


@EACH_ABSENT_SHIM
def test_lens_core_ships_no_legacy_module_and_registers_no_legacy_group(shim: str) -> None:
    """No module named after the shim exists anywhere under nemo.lens, and importing
    lens-core's metric registry registers no group of that name."""
    module_names = [info.name for info in pkgutil.walk_packages(nemo.lens.__path__, "nemo.lens.")]
    assert module_names, "walk_packages found no lens-core modules"
    assert not [name for name in module_names if name.rsplit(".", 1)[-1] == shim]
    for directory in nemo.lens.__path__:
        assert not list(pathlib.Path(directory).rglob(f"{shim}.py"))
    assert shim not in registered_metric_groups()
