"""The session installed what it says: LENS_TEST_INSTALL=wheel or =editable.

A wheel session must import lens and the shims from site-packages, never from the source
tree, or it would not be testing the built wheels at all.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sysconfig

import pytest

import nemo.lens

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
SOURCES = REPOSITORY / "packages"
INSTALL_MODE = os.environ.get("LENS_TEST_INSTALL", "")
SITE_PACKAGES = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()


def _origin(module_name: str) -> pathlib.Path | None:
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        return None
    return pathlib.Path(spec.origin).resolve()


# Each shim's import package -> its source directory.
SHIM_PACKAGES = {
    "lens_compat_rl": SOURCES / "lens-compat-rl" / "src",
    "lens_compat_gym": SOURCES / "lens-compat-gym" / "src",
}


@pytest.mark.skipif(INSTALL_MODE != "wheel", reason="LENS_TEST_INSTALL is not 'wheel'")
def test_wheel_install_imports_from_site_packages() -> None:
    """lens-core, and each shim that is installed, come from site-packages."""
    lens_file = pathlib.Path(nemo.lens.__file__).resolve()
    assert lens_file.is_relative_to(SITE_PACKAGES), lens_file
    assert not lens_file.is_relative_to(SOURCES), lens_file
    for package in SHIM_PACKAGES:
        origin = _origin(package)
        if origin is not None:
            assert origin.is_relative_to(SITE_PACKAGES), origin


@pytest.mark.skipif(INSTALL_MODE != "editable", reason="LENS_TEST_INSTALL is not 'editable'")
def test_editable_install_imports_from_the_source_tree() -> None:
    """lens-core, and each shim that is installed, are the repository's own sources."""
    lens_file = pathlib.Path(nemo.lens.__file__).resolve()
    assert lens_file.is_relative_to(SOURCES / "lens-core" / "src"), lens_file
    for package, sources in SHIM_PACKAGES.items():
        origin = _origin(package)
        if origin is not None:
            assert origin.is_relative_to(sources), origin


def test_no_start_up_hook_is_installed() -> None:
    """The shims ship no .pth file or top-level hook module any more: nothing of lens runs
    at interpreter start-up (lens-core's finder serves their legacy names)."""
    leftovers = [
        path.name
        for pattern in ("lens_compat_*_hook.pth", "_lens_compat_*_hook.py")
        for path in SITE_PACKAGES.glob(pattern)
    ]
    assert leftovers == []


def test_install_mode_is_one_the_sessions_use() -> None:
    """LENS_TEST_INSTALL, when set, names a mode these tests check."""
    assert INSTALL_MODE in ("", "wheel", "editable")
