"""Each shim's legacy name works wherever its metadata is on sys.path, with no fix.

lens-core's legacy-module finder reads a shim's entry point from the installed metadata, so
wherever the shim's package and its `.dist-info` are on `sys.path` the legacy import works:
no .pth file has to run. Each test runs a real child interpreter in which no .pth file can
help: one with `-S` (no `site`), or one from an empty virtual environment with the copy
under test on PYTHONPATH (PYTHONPATH entries are never site directories). Where that copy
is not this environment's own, the child's path hides this environment's copy (package and
metadata). The child imports the legacy name before anything else of lens and reports where
each module and the entry point's metadata came from, so a test cannot pass on another copy.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib.machinery import PathFinder
from typing import Any

import pytest
from lens_children import run_python
from lens_shims import EACH_SHIM, Shim, python_report

import nemo.lens

# Installing builds the shim from its sources (a few seconds, hatchling from uv's cache or
# PyPI); the bound only matters when something is stuck.
INSTALL_TIMEOUT = 120

# argv: the legacy module, its function, the shim's package. The legacy import comes first.
CHILD_SCRIPT = textwrap.dedent(
    """\
    import importlib, importlib.util, json, sys

    legacy_name, function, package = sys.argv[1:]

    def finders():
        return [getattr(f, "__qualname__", type(f).__qualname__) for f in sys.meta_path]

    report = {
        "site_imported": "site" in sys.modules,
        "lens_at_start": sorted(m for m in sys.modules if m.startswith(("nemo", "lens_compat"))),
        "finders_at_start": finders(),
    }
    try:
        legacy = importlib.import_module(legacy_name)
    except ModuleNotFoundError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["error_name"] = exc.name
        report["shim_findable"] = importlib.util.find_spec(package) is not None
        print(json.dumps(report))
        raise SystemExit(0)

    from importlib.metadata import entry_points
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    import nemo.lens

    shim = importlib.import_module(package)
    (entry,) = [e for e in entry_points(group="nemo.lens.legacy_modules") if e.name == legacy_name]
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("install-mode")
    getattr(legacy, function)(meter, rollout_duration_ms=1.0)
    report.update(
        error=None,
        legacy_loader=type(legacy.__spec__.loader).__qualname__,
        legacy_name=legacy.__name__,
        legacy_all=legacy.__all__,
        legacy_origin=legacy.__spec__.origin,
        legacy_file=legacy.__file__,
        same_function=getattr(legacy, function) is getattr(shim, function),
        shim_file=shim.__file__,
        shim_loader=type(shim.__spec__.loader).__name__,
        lens_core_file=nemo.lens.__file__,
        entry_point=entry.value,
        metadata_location=str(entry.dist.locate_file("")),
        finders=finders(),
        recorded=[
            metric.name
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        ],
    )
    print(json.dumps(report))
    """
)


def _child_report(shim: Shim, cwd: pathlib.Path, *flags: str, **options: Any) -> dict[str, Any]:
    """CHILD_SCRIPT's report on `shim` (the deprecation warning, which test_shim_deprecation.py
    covers, is ignored so that stderr stays empty)."""
    arguments = [*flags, "-W", "ignore::DeprecationWarning", "-c", CHILD_SCRIPT]
    legacy = [shim.legacy_module, shim.legacy_function, shim.package]
    return python_report([*arguments, *legacy], cwd=cwd, **options)


def _assert_served_from(
    report: dict[str, Any],
    shim: Shim,
    package_directory: pathlib.Path,
    metadata_directory: pathlib.Path,
) -> None:
    """Nothing of lens ran at start-up; the legacy import then worked at once, served by
    lens-core's finder (one, behind the path finder) from `package_directory`, by the entry
    point of the metadata in `metadata_directory`, with this environment's lens-core; and
    the legacy function recorded."""
    assert report["lens_at_start"] == []
    assert "LegacyModuleFinder" not in report["finders_at_start"]
    assert report["error"] is None
    assert report["legacy_loader"] == "_LegacyModuleLoader"
    assert report["legacy_name"] == shim.legacy_module
    assert report["legacy_all"] == [shim.legacy_function]
    assert report["same_function"] is True
    assert pathlib.Path(report["shim_file"]).parent == package_directory
    assert pathlib.Path(report["legacy_origin"]).parent == package_directory
    assert report["legacy_file"] == report["legacy_origin"]
    assert report["entry_point"] == shim.served_module
    assert pathlib.Path(report["metadata_location"]) == metadata_directory
    lens_core_file = pathlib.Path(report["lens_core_file"]).resolve()
    assert lens_core_file == pathlib.Path(nemo.lens.__file__).resolve()
    assert report["finders"].count("LegacyModuleFinder") == 1
    assert report["finders"].index("PathFinder") < report["finders"].index("LegacyModuleFinder")
    assert report["recorded"] == [f"{shim.name}.rollout.duration_ms"]


def _parent_path() -> list[str]:
    """lens-core's import root, then every directory on this interpreter's `sys.path`."""
    lens_core_root = pathlib.Path(nemo.lens.__file__).resolve().parents[2]
    entries = [str(lens_core_root), *(entry for entry in sys.path if os.path.isdir(entry))]
    return list(dict.fromkeys(entries))


def _installed_package_directory(shim: Shim) -> pathlib.Path:
    """Where this environment's copy of the shim's package is."""
    return pathlib.Path(str(importlib.import_module(shim.package).__file__)).parent


def _path_without(shim: Shim, mirrors: pathlib.Path) -> list[str]:
    """This interpreter's path with its copy of `shim` hidden: each directory holding the
    package, its metadata or its editable .pth is replaced by a directory of links to
    everything else in it."""
    hidden = (shim.package, f"_editable_impl_{shim.package}")
    path: list[str] = []
    for index, entry in enumerate(_parent_path()):
        children = list(pathlib.Path(entry).iterdir())
        if not any(child.name.startswith(hidden) for child in children):
            path.append(entry)
            continue
        mirror = mirrors / str(index)
        mirror.mkdir(parents=True)
        for child in children:
            if not child.name.startswith(hidden):
                try:
                    (mirror / child.name).symlink_to(child, target_is_directory=child.is_dir())
                except OSError as exc:  # e.g. Windows without the symlink privilege
                    pytest.skip(f"cannot create symbolic links here: {exc}")
        path.append(str(mirror))
    assert PathFinder.find_spec(shim.package, path) is None
    assert not list(importlib.metadata.distributions(name=shim.distribution, path=path))
    return path


@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """This Python in a new, empty virtual environment: `site` runs, nothing is installed."""
    home = tmp_path_factory.mktemp("plain-venv")
    created = run_python("-m", "venv", "--without-pip", home)
    assert created.returncode == 0, created.stderr
    for python in (home / "bin" / "python", home / "Scripts" / "python.exe"):
        if python.exists():
            return python
    pytest.fail(f"no interpreter in the new virtual environment {home}")


@EACH_SHIM
def test_without_the_distribution_the_legacy_import_is_module_not_found(
    shim: Shim, tmp_path: pathlib.Path
) -> None:
    """With lens-core but without the shim's package and metadata, the legacy import fails
    the normal way."""
    path = _path_without(shim, tmp_path / "mirrors")

    report = _child_report(shim, tmp_path, "-S", python_path=path)

    assert report["shim_findable"] is False
    assert report["error"] == f"ModuleNotFoundError: No module named '{shim.legacy_module}'"
    assert report["error_name"] == shim.legacy_module


@EACH_SHIM
@pytest.mark.parametrize("site", [True, False], ids=["site", "no-site"])
def test_this_environments_install_serves_the_legacy_import(
    shim: Shim, site: bool, tmp_path: pathlib.Path
) -> None:
    """A fresh interpreter loads nothing of lens at start-up, with `site` (no .pth file of
    the install runs lens code) or under `python -S` with this interpreter's path on
    PYTHONPATH; the legacy import alone then works, from this environment's metadata."""
    if site:
        report = _child_report(shim, tmp_path)
    else:
        report = _child_report(shim, tmp_path, "-S", python_path=_parent_path())

    assert report["site_imported"] is site
    metadata = importlib.metadata.distribution(shim.distribution).locate_file("")
    _assert_served_from(
        report, shim, _installed_package_directory(shim), pathlib.Path(str(metadata))
    )


@EACH_SHIM
def test_a_zip_archive_serves_the_legacy_import(
    shim: Shim, plain_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A zip archive holding the shim's package and its .dist-info (METADATA,
    entry_points.txt) serves the legacy module from inside the archive, through zipimport."""
    distribution = importlib.metadata.distribution(shim.distribution)
    package_directory = _installed_package_directory(shim)
    archive = tmp_path / f"{shim.package}.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(package_directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(package_directory.parent).as_posix())
        for name in ("METADATA", "entry_points.txt"):
            text = distribution.read_text(name)
            assert text is not None, name
            zipped.writestr(f"{shim.package}-{distribution.version}.dist-info/{name}", text)
    python_path = [archive, *_path_without(shim, tmp_path / "mirrors")]

    report = _child_report(shim, tmp_path, python=plain_python, python_path=python_path)

    _assert_served_from(report, shim, archive / shim.package, archive)
    assert report["shim_loader"] == "zipimporter"


def _installer(shim: Shim, target: pathlib.Path) -> list[str]:
    """The command that installs the shim's sources, without dependencies, into `target`."""
    common = ["install", "--quiet", "--no-deps", "--target", str(target), str(shim.sources)]
    # uv on PATH, else beside this or the base interpreter, where `pip install uv` puts it.
    beside_python = os.pathsep.join(
        os.path.join(prefix, scripts)
        for prefix in dict.fromkeys((sys.prefix, sys.base_prefix))
        for scripts in ("bin", "Scripts")
    )
    uv = shutil.which("uv") or shutil.which("uv", path=beside_python)
    if uv is not None:
        return [uv, "pip", *common, "--python", sys.executable]
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip", *common, "--disable-pip-version-check"]
    pytest.skip("neither uv nor pip is available to install into a --target directory")


@EACH_SHIM
def test_a_target_directory_on_pythonpath_serves_the_legacy_import(
    shim: Shim, plain_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """`install --target DIR` writes the package and its metadata and nothing else (no .pth,
    no hook); with DIR on the PYTHONPATH of an empty virtual environment the legacy module
    is served from DIR."""
    if not (shim.sources / "pyproject.toml").is_file():
        pytest.skip(f"the {shim.distribution} sources are not at {shim.sources}")
    target = tmp_path / "target"
    installed = subprocess.run(
        _installer(shim, target),
        capture_output=True,
        text=True,
        check=False,
        timeout=INSTALL_TIMEOUT,
    )
    assert installed.returncode == 0, installed.stderr
    dist_info = f"{shim.package}-{importlib.metadata.version(shim.distribution)}.dist-info"
    # uv adds a hidden .lock.
    assert {entry.name for entry in target.iterdir()} - {".lock"} == {shim.package, dist_info}
    assert (target / dist_info / "entry_points.txt").is_file()
    python_path = [target, *_path_without(shim, tmp_path / "mirrors")]

    report = _child_report(shim, tmp_path, python=plain_python, python_path=python_path)

    assert report["site_imported"] is True
    _assert_served_from(report, shim, target / shim.package, target)
