"""nemo.lens.instruments.gym is served from lens_compat_gym through its entry point."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pathlib

from packaging.requirements import Requirement

import lens_compat_gym
import lens_compat_gym._nemo_lens_instruments_gym
import nemo.lens
import nemo.lens.instruments

LEGACY_NAME = "nemo.lens.instruments.gym"


def test_the_legacy_module_is_lens_compat_gym_code() -> None:
    """The module has the legacy name, its origin and file lie in lens_compat_gym, and it
    hands out the shim's own function."""
    legacy = importlib.import_module(LEGACY_NAME)

    shim_directory = pathlib.Path(lens_compat_gym.__file__).parent
    assert legacy.__name__ == LEGACY_NAME
    assert legacy.__spec__ is not None
    assert legacy.__spec__.origin is not None
    assert pathlib.Path(legacy.__spec__.origin).parent == shim_directory
    assert legacy.__file__ == legacy.__spec__.origin
    assert nemo.lens.instruments.gym is legacy
    assert legacy.__all__ == ["record_gym_metrics"]
    assert legacy.__doc__ == lens_compat_gym._nemo_lens_instruments_gym.__doc__
    assert legacy.record_gym_metrics is lens_compat_gym.record_gym_metrics


def test_lens_core_ships_no_gym_module() -> None:
    """lens-core's instruments package holds no gym module or package of its own."""
    for directory in nemo.lens.instruments.__path__:
        assert not (pathlib.Path(directory) / "gym.py").exists()
        assert not (pathlib.Path(directory) / "gym").exists()


def test_the_distribution_declares_the_legacy_name() -> None:
    """lens-compat-gym's metadata maps the legacy name to its module in lens-core's group."""
    (entry,) = [
        entry
        for entry in importlib.metadata.entry_points(group="nemo.lens.legacy_modules")
        if entry.name == LEGACY_NAME
    ]

    assert entry.value == "lens_compat_gym._nemo_lens_instruments_gym"
    assert entry.dist is not None
    assert entry.dist.metadata["Name"] == "lens-compat-gym"


def test_the_distribution_writes_nothing_outside_its_package() -> None:
    """No file under nemo/ (lens-core's), no start-up hook: every Python file the
    distribution installs lies in lens_compat_gym/, and only an editable install has a .pth."""
    distribution = importlib.metadata.distribution("lens-compat-gym")
    names = [file.as_posix() for file in distribution.files or []]
    direct_url = json.loads(distribution.read_text("direct_url.json") or "{}")
    editable = direct_url.get("dir_info", {}).get("editable", False)

    assert names
    assert not [name for name in names if name.startswith("nemo/")]
    python_files = [name for name in names if name.endswith(".py")]
    assert all(name.startswith("lens_compat_gym/") for name in python_files), python_files
    # Only an editable install has a .pth file: the installer's, pointing at src/.
    pth_files = [name for name in names if name.endswith(".pth")]
    assert len(pth_files) == (1 if editable else 0), pth_files


def test_version_and_lens_core_pin_match_the_metadata() -> None:
    """__version__ is the installed version, and lens-core is required at exactly the
    release that is installed next to it."""
    (requirement,) = [
        Requirement(line) for line in importlib.metadata.requires("lens-compat-gym") or []
    ]

    assert lens_compat_gym.__version__ == importlib.metadata.version("lens-compat-gym")
    assert requirement.name == "lens-core"
    assert str(requirement.specifier) == f"=={nemo.lens.__version__}"


def test_every_public_name_imports() -> None:
    """__all__ is sorted and each of its names is an attribute of the package."""
    assert lens_compat_gym.__all__ == sorted(lens_compat_gym.__all__)
    for name in lens_compat_gym.__all__:
        assert getattr(lens_compat_gym, name) is not None
