"""lens-core without a shim: its legacy module is gone and lens-core carries none of its code.

Each test runs once per shim, and only in sessions where that shim is not installed (the
`compat` sessions install one shim without the other, too).
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil

import pytest
from lens_children import run_python
from lens_shims import EACH_ABSENT_SHIM, Shim

import nemo.lens.instruments
from nemo.lens import registered_metric_groups


@EACH_ABSENT_SHIM
def test_importing_the_legacy_module_raises_module_not_found(shim: Shim) -> None:
    """`import nemo.lens.instruments.<shim>` fails with ModuleNotFoundError naming the module."""
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(shim.legacy_module)

    assert raised.value.name == shim.legacy_module


@EACH_ABSENT_SHIM
def test_a_fresh_interpreter_cannot_import_the_legacy_function(shim: Shim) -> None:
    """Legacy code run in a new process stops at its import with ModuleNotFoundError."""
    result = run_python("-c", f"from {shim.legacy_module} import {shim.legacy_function}")

    assert result.returncode == 1
    assert f"ModuleNotFoundError: No module named '{shim.legacy_module}'" in result.stderr


@EACH_ABSENT_SHIM
def test_the_shim_package_is_absent(shim: Shim) -> None:
    """The shim's package cannot be imported."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(shim.package)


@EACH_ABSENT_SHIM
def test_lens_core_ships_no_legacy_module_and_registers_no_legacy_group(shim: Shim) -> None:
    """No module named after the shim exists anywhere under nemo.lens, and importing
    lens-core's metric registry registers no group of that name."""
    module_names = [info.name for info in pkgutil.walk_packages(nemo.lens.__path__, "nemo.lens.")]
    assert module_names, "walk_packages found no lens-core modules"
    assert not [name for name in module_names if name.rsplit(".", 1)[-1] == shim.name]
    for directory in nemo.lens.__path__:
        assert not list(pathlib.Path(directory).rglob(f"{shim.name}.py"))
    assert shim.name not in registered_metric_groups()
