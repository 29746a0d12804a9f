"""The import hook serves nemo.lens.instruments.rl from lens_compat_rl, and nothing else."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import subprocess
import sys
from importlib.machinery import PathFinder

import pytest

import _lens_compat_rl_hook
import lens_compat_rl
import nemo.lens.instruments


def _hook_finders() -> list[object]:
    return [finder for finder in sys.meta_path if _lens_compat_rl_hook._is_installed(finder)]


def test_legacy_module_comes_from_lens_compat_rl() -> None:
    """The module has the legacy name, its origin lies in lens_compat_rl, and lens-core's
    package directory holds no rl module."""
    legacy = importlib.import_module("nemo.lens.instruments.rl")

    shim_directory = pathlib.Path(lens_compat_rl.__file__).parent
    assert legacy.__name__ == "nemo.lens.instruments.rl"
    assert legacy.__spec__ is not None
    assert legacy.__spec__.origin is not None
    assert pathlib.Path(legacy.__spec__.origin).parent == shim_directory
    assert nemo.lens.instruments.rl is legacy
    assert legacy.__all__ == ["record_rl_metrics"]
    for directory in nemo.lens.instruments.__path__:
        assert not (pathlib.Path(directory) / "rl.py").exists()
        assert not (pathlib.Path(directory) / "rl").exists()


def test_the_interpreter_installs_the_hook_at_start_up() -> None:
    """A fresh interpreter has the finder before importing anything of lens (the .pth
    file ran), exactly once, and behind the regular path finder."""
    script = (
        "import json, sys\n"
        "names = [getattr(f, '__qualname__', type(f).__qualname__) for f in sys.meta_path]\n"
        "lens_loaded = any(m.startswith(('nemo', 'lens_compat_rl')) for m in sys.modules)\n"
        "print(json.dumps({'finders': names, 'lens_loaded': lens_loaded}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )

    report = json.loads(result.stdout)
    assert report["lens_loaded"] is False
    assert report["finders"].count("LegacyRLFinder") == 1
    assert report["finders"].index("LegacyRLFinder") > report["finders"].index("PathFinder")


def test_installing_again_adds_no_second_finder() -> None:
    """install() is idempotent, whether called directly or by importing lens_compat_rl."""
    _lens_compat_rl_hook.install()
    importlib.reload(lens_compat_rl)
    _lens_compat_rl_hook.install()

    assert len(_hook_finders()) == 1
    assert sys.meta_path.index(_hook_finders()[0]) > sys.meta_path.index(PathFinder)  # type: ignore[arg-type]  # an entry of sys.meta_path


@pytest.mark.parametrize(
    "name",
    ["nemo.lens.instruments", "nemo.lens.instruments.gym", "lens_compat_rl", "rl", "nemo.rl"],
)
def test_the_finder_answers_only_for_the_legacy_name(name: str) -> None:
    """Any other module name is left to the other finders."""
    assert _lens_compat_rl_hook.LegacyRLFinder.find_spec(name, None) is None


def test_without_the_shim_file_the_import_fails_as_module_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If lens_compat_rl cannot provide the module, the import fails the normal way."""
    monkeypatch.delitem(sys.modules, "nemo.lens.instruments.rl", raising=False)
    monkeypatch.setattr(_lens_compat_rl_hook, "_SHIM_MODULE", "missing_module")

    assert importlib.util.find_spec("nemo.lens.instruments.rl") is None
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module("nemo.lens.instruments.rl")
    assert raised.value.name == "nemo.lens.instruments.rl"


def test_without_the_shim_package_the_finder_returns_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook left behind without its package finds nothing rather than failing."""
    monkeypatch.setattr(_lens_compat_rl_hook, "_SHIM_PACKAGE", "lens_compat_rl_not_here")

    found = _lens_compat_rl_hook.LegacyRLFinder.find_spec("nemo.lens.instruments.rl", None)

    assert found is None
