"""lens-core alone: the legacy RL module is gone and lens-core carries no RL code."""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import nemo.lens.instruments
from nemo.lens import registered_metric_groups

pytestmark = pytest.mark.noshim


def test_importing_the_legacy_module_raises_module_not_found() -> None:
    """`import nemo.lens.instruments.rl` fails with ModuleNotFoundError naming the module."""
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module("nemo.lens.instruments.rl")

    assert raised.value.name == "nemo.lens.instruments.rl"


def test_a_fresh_interpreter_cannot_import_the_legacy_function() -> None:
    """Legacy code run in a new process stops at its import with ModuleNotFoundError."""
    result = subprocess.run(
        [sys.executable, "-c", "from nemo.lens.instruments.rl import record_rl_metrics"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'nemo.lens.instruments.rl'" in result.stderr


def test_the_shim_package_is_absent() -> None:
    """Neither lens_compat_rl nor its start-up hook can be imported."""
    for name in ("lens_compat_rl", "_lens_compat_rl_hook"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(name)


def test_lens_core_ships_no_rl_module_and_registers_no_rl_group() -> None:
    """No module named rl exists anywhere under nemo.lens, and importing lens-core's
    metric registry registers no "rl" group."""
    module_names = [info.name for info in pkgutil.walk_packages(nemo.lens.__path__, "nemo.lens.")]
    assert module_names, "walk_packages found no lens-core modules"
    assert not [name for name in module_names if name.rsplit(".", 1)[-1] == "rl"]
    for directory in nemo.lens.__path__:
        assert not list(pathlib.Path(directory).rglob("rl.py"))
    assert "rl" not in registered_metric_groups()
