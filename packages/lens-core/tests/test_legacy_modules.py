"""The legacy-module finder: `nemo.lens.*` names served from the shims that declare them.

No shim needs to be installed: each test writes a real throwaway distribution (a package
and a `<name>-1.0.dist-info/` with METADATA and entry_points.txt) into its own directory
and puts that directory on `sys.path`, where `importlib.metadata` finds it as it finds an
installed one. What the tests import is removed from `sys.modules` afterwards.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from importlib.machinery import PathFinder

import pytest
from lens_children import run_python

import nemo.lens
from nemo.lens import _legacy_modules
from nemo.lens._legacy_modules import (
    ENTRY_POINT_GROUP,
    LegacyModuleFinder,
    install,
    legacy_module_targets,
)

# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 30
# What the tests import: the throwaway packages and the legacy names they declare.
THROWAWAY_PREFIXES = ("lens_throwaway", "nemo.lens.instruments.throwaway", "nemo.lens.throwaway")

LEGACY_SOURCE = '''\
"""A throwaway shim's legacy module."""

__all__ = ["VALUE", "record_throwaway"]

VALUE = 2
NOT_EXPORTED = 3


def record_throwaway() -> int:
    return 1
'''

#: (distribution name, {legacy name: module}, {file: source}) -> the directory put on sys.path
Distribute = Callable[[str, Mapping[str, str], Mapping[str, str]], pathlib.Path]


@pytest.fixture(autouse=True)
def _forget_throwaway_modules() -> Iterator[None]:
    """Remove every throwaway module, and its attribute on its parent package, afterwards."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if not name.startswith(THROWAWAY_PREFIXES):
            continue
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            vars(sys.modules[parent]).pop(child, None)


@pytest.fixture
def distribute(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Distribute:
    """Write a throwaway distribution into a new directory and put it on sys.path."""

    def write(name: str, legacy: Mapping[str, str], files: Mapping[str, str]) -> pathlib.Path:
        root = tmp_path / name
        for relative, source in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source, encoding="utf-8")
        dist_info = root / f"{name.replace('-', '_')}-1.0.dist-info"
        dist_info.mkdir(parents=True)
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        (dist_info / "METADATA").write_text(metadata, encoding="utf-8")
        lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{key} = {value}" for key, value in legacy.items())]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        monkeypatch.syspath_prepend(str(root))  # also invalidates the import caches
        return root

    return write


def test_a_declared_name_is_served_from_the_shims_module(distribute: Distribute) -> None:
    """The legacy module keeps its name, takes the shim module's `__doc__` and `__all__`
    names (the same objects, nothing else), and its origin and `__file__` are the shim's."""
    name = "nemo.lens.instruments.throwaway_served"
    root = distribute(
        "lens-throwaway-served",
        {name: "lens_throwaway_served.legacy"},
        {"lens_throwaway_served/__init__.py": "", "lens_throwaway_served/legacy.py": LEGACY_SOURCE},
    )

    legacy = importlib.import_module(name)
    real = importlib.import_module("lens_throwaway_served.legacy")

    assert legacy is not real
    assert legacy.__name__ == name
    assert legacy.__doc__ == "A throwaway shim's legacy module."
    assert legacy.__all__ == ["VALUE", "record_throwaway"]
    assert legacy.record_throwaway is real.record_throwaway
    assert legacy.VALUE == 2
    assert not hasattr(legacy, "NOT_EXPORTED")
    assert legacy.__spec__ is not None
    assert legacy.__spec__.name == name
    assert legacy.__spec__.origin == str(root / "lens_throwaway_served" / "legacy.py")
    assert legacy.__spec__.has_location is True
    assert legacy.__spec__.submodule_search_locations is None  # a module, not a package
    assert legacy.__file__ == legacy.__spec__.origin
    assert nemo.lens.instruments.throwaway_served is legacy  # type: ignore[attr-defined]  # served at run time


def test_a_shim_installed_while_the_process_runs_is_seen_after_invalidate_caches(
    distribute: Distribute,
) -> None:
    """A shim that appears while the process runs is seen once the import caches are
    invalidated (which `distribute`, through `syspath_prepend`, does, as installers do)."""
    name = "nemo.lens.throwaway_late"
    assert name not in legacy_module_targets()
    assert LegacyModuleFinder.find_spec(name) is None

    distribute(
        "lens-throwaway-late",
        {name: "lens_throwaway_late"},
        {"lens_throwaway_late/__init__.py": LEGACY_SOURCE},
    )

    assert legacy_module_targets()[name] == "lens_throwaway_late"
    assert importlib.import_module(name).VALUE == 2


def test_failed_look_ups_read_the_metadata_once_until_caches_are_invalidated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A guarded legacy import on a hot path costs one metadata scan, not one per attempt;
    `importlib.invalidate_caches()` makes the next look-up read it again."""
    scans: list[int] = []
    real = _legacy_modules.legacy_module_targets

    def counting() -> dict[str, str]:
        scans.append(1)
        return real()

    monkeypatch.setattr(_legacy_modules, "legacy_module_targets", counting)
    importlib.invalidate_caches()
    for _ in range(5):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("nemo.lens.instruments.throwaway_never_declared")
    assert len(scans) == 1
    importlib.invalidate_caches()
    assert LegacyModuleFinder.find_spec("nemo.lens.instruments.throwaway_never_declared") is None
    assert len(scans) == 2


@pytest.mark.parametrize(
    "name", ["lens_throwaway_elsewhere", "nemo.lensx.throwaway", "nemo.lens", "nemo.throwaway"]
)
def test_only_names_below_nemo_lens_are_served(distribute: Distribute, name: str) -> None:
    """A shim cannot take over a module outside `nemo.lens.`, nor the package itself."""
    distribute(
        "lens-throwaway-outside",
        {name: "lens_throwaway_outside"},
        {"lens_throwaway_outside/__init__.py": LEGACY_SOURCE},
    )

    assert name not in legacy_module_targets()
    assert LegacyModuleFinder.find_spec(name) is None


NEAR = "nemo.lens.instruments.throwaway_near"


def _distribute_near(distribute: Distribute) -> None:
    """Declare NEAR, served from lens_throwaway_near.legacy."""
    distribute(
        "lens-throwaway-near",
        {NEAR: "lens_throwaway_near.legacy"},
        {"lens_throwaway_near/__init__.py": "", "lens_throwaway_near/legacy.py": LEGACY_SOURCE},
    )


@pytest.mark.parametrize(
    "name",
    [
        "nemo.lens",
        "nemo.lens.instruments",
        f"{NEAR}_v2",
        f"{NEAR}.extra",
        "throwaway_near",
        "lens_throwaway_near.legacy",
    ],
)
def test_the_finder_answers_only_for_declared_names(distribute: Distribute, name: str) -> None:
    """Names above, beside or below a declared legacy name, its last part alone and the
    module serving it are left to the other finders."""
    _distribute_near(distribute)

    assert LegacyModuleFinder.find_spec(name) is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (f"{NEAR}_v2", f"No module named '{NEAR}_v2'"),
        (f"{NEAR}.extra", f"No module named '{NEAR}.extra'; '{NEAR}' is not a package"),
    ],
)
def test_a_name_beside_or_below_a_legacy_module_fails_as_module_not_found(
    distribute: Distribute, name: str, message: str
) -> None:
    """Importing a name next to or below a served legacy module fails the normal way."""
    _distribute_near(distribute)

    with pytest.raises(ModuleNotFoundError, match=re.escape(message)) as raised:
        importlib.import_module(name)

    assert raised.value.name == name
    assert name not in sys.modules


def test_reloading_a_legacy_module_refills_the_same_module(distribute: Distribute) -> None:
    """importlib.reload finds the legacy spec again and refills the same module object with
    the serving module's names."""
    _distribute_near(distribute)
    legacy = importlib.import_module(NEAR)

    reloaded = importlib.reload(legacy)

    assert reloaded is legacy
    assert (
        reloaded.record_throwaway
        is importlib.import_module("lens_throwaway_near.legacy").record_throwaway
    )
    assert reloaded.__all__ == ["VALUE", "record_throwaway"]


def test_a_module_lens_core_ships_always_wins(
    distribute: Distribute, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shim declaring a real lens-core module changes nothing: the finder comes last."""
    distribute(
        "lens-throwaway-usurper",
        {"nemo.lens.semconv": "lens_throwaway_usurper"},
        {"lens_throwaway_usurper/__init__.py": LEGACY_SOURCE},
    )
    monkeypatch.delitem(sys.modules, "nemo.lens.semconv", raising=False)

    spec = importlib.util.find_spec("nemo.lens.semconv")

    assert spec is not None
    assert spec.origin == str(pathlib.Path(nemo.lens.__file__).parent / "semconv.py")


def test_metadata_left_without_its_package_finds_nothing(distribute: Distribute) -> None:
    """An entry point whose package is gone (a half-removed shim) means "not found": the
    legacy import fails as if no shim declared it."""
    name = "nemo.lens.instruments.throwaway_orphan"
    distribute("lens-throwaway-orphan", {name: "lens_throwaway_gone.legacy"}, {})

    assert legacy_module_targets()[name] == "lens_throwaway_gone.legacy"
    assert LegacyModuleFinder.find_spec(name) is None
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(name)
    assert raised.value.name == name


@pytest.mark.parametrize(
    ("files", "error", "message"),
    [
        pytest.param(
            {
                "lens_throwaway_broken/__init__.py": "",
                "lens_throwaway_broken/legacy.py": "import lens_throwaway_missing_dependency\n",
            },
            ModuleNotFoundError,
            "No module named 'lens_throwaway_missing_dependency'",
            id="module-imports-a-missing-dependency",
        ),
        pytest.param(
            {"lens_throwaway_broken/__init__.py": "import lens_throwaway_missing_dependency\n"},
            ModuleNotFoundError,
            "No module named 'lens_throwaway_missing_dependency'",
            id="package-imports-a-missing-dependency",
        ),
        pytest.param(
            {"lens_throwaway_broken/__init__.py": "raise RuntimeError('the shim is broken')\n"},
            RuntimeError,
            "the shim is broken",
            id="package-raises",
        ),
    ],
)
def test_a_broken_shim_raises_its_own_error(
    distribute: Distribute, files: Mapping[str, str], error: type[Exception], message: str
) -> None:
    """A shim that is installed but fails to import shows why, not "no module named" the
    legacy name, and leaves no half-made legacy module behind."""
    name = "nemo.lens.instruments.throwaway_broken"
    distribute("lens-throwaway-broken", {name: "lens_throwaway_broken.legacy"}, files)

    with pytest.raises(error, match=message) as raised:
        importlib.import_module(name)

    if isinstance(raised.value, ModuleNotFoundError):
        assert raised.value.name == "lens_throwaway_missing_dependency"
    assert name not in sys.modules


def test_the_first_declaration_on_sys_path_wins(distribute: Distribute) -> None:
    """Two distributions declaring one legacy name: the one earlier on sys.path serves it,
    as the earlier copy of a module would."""
    name = "nemo.lens.instruments.throwaway_twice"
    files = {"lens_throwaway_{0}/__init__.py": "", "lens_throwaway_{0}/legacy.py": LEGACY_SOURCE}
    for which in ("later", "earlier"):  # each syspath_prepend goes in front
        distribute(
            f"lens-throwaway-{which}",
            {name: f"lens_throwaway_{which}.legacy"},
            {path.format(which): source for path, source in files.items()},
        )

    assert legacy_module_targets()[name] == "lens_throwaway_earlier.legacy"
    legacy = importlib.import_module(name)
    assert legacy.__spec__ is not None
    assert "lens_throwaway_earlier" in str(legacy.__spec__.origin)


def test_an_entry_point_naming_an_attribute_is_ignored(distribute: Distribute) -> None:
    """Only a module can serve a legacy module: `module:attribute` declares nothing."""
    name = "nemo.lens.instruments.throwaway_attribute"
    distribute(
        "lens-throwaway-attribute",
        {name: "lens_throwaway_attribute.legacy:record_throwaway"},
        {
            "lens_throwaway_attribute/__init__.py": "",
            "lens_throwaway_attribute/legacy.py": LEGACY_SOURCE,
        },
    )

    assert name not in legacy_module_targets()
    assert LegacyModuleFinder.find_spec(name) is None


def test_a_declared_module_missing_from_its_package_names_that_module(
    distribute: Distribute,
) -> None:
    """The shim's package is there but the declared module is not: the error names the
    module the shim forgot, not the legacy name."""
    name = "nemo.lens.instruments.throwaway_forgot"
    distribute(
        "lens-throwaway-forgot",
        {name: "lens_throwaway_forgot.legacy"},
        {"lens_throwaway_forgot/__init__.py": ""},
    )

    with pytest.raises(ModuleNotFoundError, match=r"lens_throwaway_forgot\.legacy") as raised:
        importlib.import_module(name)
    assert raised.value.name == "lens_throwaway_forgot.legacy"
    assert name not in sys.modules


def test_a_module_without_all_is_refused_by_name(distribute: Distribute) -> None:
    """A shim module that declares no `__all__` fails with an ImportError saying so."""
    name = "nemo.lens.instruments.throwaway_no_all"
    distribute(
        "lens-throwaway-no-all",
        {name: "lens_throwaway_no_all.legacy"},
        {"lens_throwaway_no_all/__init__.py": "", "lens_throwaway_no_all/legacy.py": "X = 1\n"},
    )

    with pytest.raises(ImportError, match="declares no __all__") as raised:
        importlib.import_module(name)
    assert raised.value.name == name
    assert name not in sys.modules


def _finders() -> list[object]:
    return [finder for finder in sys.meta_path if _legacy_modules._is_installed(finder)]


def test_install_appends_one_finder_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """install() adds the finder behind the regular path finder, and only once."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in _finders()])

    install()
    install()

    assert len(_finders()) == 1
    assert _legacy_modules._is_installed(sys.meta_path[-1])
    assert sys.meta_path.index(PathFinder) < len(sys.meta_path) - 1


def test_a_second_copy_of_the_module_adds_no_second_finder() -> None:
    """A reloaded or duplicated copy of the module recognises the finder by name."""
    spec = importlib.util.spec_from_file_location(
        _legacy_modules.__name__, _legacy_modules.__file__
    )
    assert spec is not None
    assert spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)

    copy.install()
    install()

    assert copy.LegacyModuleFinder is not LegacyModuleFinder
    assert _legacy_modules._is_installed(copy.LegacyModuleFinder)
    (installed,) = _finders()  # the original's finder: the class, or an instance of it
    assert installed is LegacyModuleFinder or isinstance(installed, LegacyModuleFinder)


def test_invalidating_the_import_caches_works() -> None:
    """importlib.invalidate_caches() (pip, pytest's syspath_prepend, ...) still works with
    the finder installed: as a class in sys.meta_path it must not inherit MetaPathFinder's
    instance method invalidate_caches(), which raises TypeError when called on the class."""
    assert _finders() != []

    importlib.invalidate_caches()


def test_importing_nemo_lens_installs_the_finder() -> None:
    """A fresh interpreter has no finder until `import nemo.lens`, then exactly one, behind
    every finder it had before (what the OpenTelemetry API imports may add its own, as the
    importlib-metadata backport does on older releases)."""
    script = (
        "import json, sys\n"
        "def finders():\n"
        "    return [getattr(f, '__qualname__', type(f).__qualname__) for f in sys.meta_path]\n"
        "before = finders()\n"
        "import nemo.lens\n"
        "print(json.dumps({'before': before, 'after': finders()}))\n"
    )
    result = run_python("-c", script, timeout_s=CHILD_TIMEOUT)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    before, after = report["before"], report["after"]
    assert "LegacyModuleFinder" not in before
    assert after.count("LegacyModuleFinder") == 1
    assert after[: len(before)] == before


def test_the_loader_names_its_module_in_its_repr(distribute: Distribute) -> None:
    """The spec's loader says which shim module it fills the legacy module from."""
    name = "nemo.lens.throwaway_repr"
    distribute(
        "lens-throwaway-repr",
        {name: "lens_throwaway_repr"},
        {"lens_throwaway_repr/__init__.py": LEGACY_SOURCE},
    )

    spec = LegacyModuleFinder.find_spec(name)

    assert spec is not None
    assert repr(spec.loader) == "<_LegacyModuleLoader for 'lens_throwaway_repr'>"
