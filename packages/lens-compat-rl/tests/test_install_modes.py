"""Install modes without a site directory: `python -S`, `pip install --target`, a zip archive.

lens-core's legacy-module finder reads the shim's entry point from the installed metadata,
so wherever `lens_compat_rl` and its `.dist-info` are on `sys.path` the legacy import works
with no fix: no .pth file has to run. Each test runs a real child interpreter with a
PYTHONPATH that puts the copy under test first and this interpreter's own path entries
after it, so lens-core and OpenTelemetry import as they do here (PYTHONPATH entries are
never site directories: no .pth file among them runs). Every child reports where
lens_compat_rl, the legacy module, lens-core and the entry point's metadata came from, so a
test cannot pass on another copy.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Sequence
from typing import Any

import pytest

import lens_compat_rl
import nemo.lens

# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 30
# Installing builds the shim from its sources (a few seconds, hatchling from uv's cache or
# PyPI); the bound only matters when something is stuck.
INSTALL_TIMEOUT = 120
SHIM_SOURCES = pathlib.Path(__file__).resolve().parents[1]
SHIM_DIRECTORY = pathlib.Path(lens_compat_rl.__file__).parent

# The legacy import is the first thing the child does with lens; then it reports.
CHILD_SCRIPT = textwrap.dedent(
    """\
    import json, sys

    report = {
        "site_imported": "site" in sys.modules,
        "lens_at_start": sorted(m for m in sys.modules if m.startswith(("nemo", "lens_compat"))),
    }

    import nemo.lens.instruments.rl as legacy

    from importlib.metadata import entry_points
    import lens_compat_rl
    import nemo.lens

    (entry,) = [
        entry for entry in entry_points(group="nemo.lens.legacy_modules")
        if entry.name == legacy.__name__
    ]
    report.update(
        legacy_all=legacy.__all__,
        legacy_origin=legacy.__spec__.origin,
        legacy_file=legacy.__file__,
        same_function=legacy.record_rl_metrics is lens_compat_rl.record_rl_metrics,
        shim_file=lens_compat_rl.__file__,
        shim_loader=type(lens_compat_rl.__spec__.loader).__name__,
        lens_core_file=nemo.lens.__file__,
        entry_point=entry.value,
        metadata_location=str(entry.dist.locate_file("")),
        finders=[getattr(f, "__qualname__", type(f).__qualname__) for f in sys.meta_path],
    )
    print(json.dumps(report))
    """
)


def _parent_path() -> list[str]:
    """lens-core's import root, then every directory on this interpreter's `sys.path`."""
    lens_core_root = pathlib.Path(nemo.lens.__file__).resolve().parents[2]
    entries = [str(lens_core_root), *(entry for entry in sys.path if os.path.isdir(entry))]
    return list(dict.fromkeys(entries))


def _run_child(
    python: str | os.PathLike[str],
    flags: Sequence[str],
    first_on_path: Sequence[os.PathLike[str]],
    cwd: pathlib.Path,
) -> dict[str, Any]:
    """Run CHILD_SCRIPT in a fresh interpreter, `first_on_path` before the parent's path."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")
    }
    python_path = [*map(str, first_on_path), *_parent_path()]
    env["PYTHONPATH"] = os.pathsep.join(python_path)
    result = subprocess.run(
        [str(python), *flags, "-c", CHILD_SCRIPT],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=CHILD_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _assert_served_from(
    report: dict[str, Any], shim_directory: pathlib.Path, metadata_directory: pathlib.Path
) -> None:
    """Nothing of lens ran at start-up; the legacy module came from `shim_directory`, by
    the entry point of the metadata in `metadata_directory`, through one finder placed last,
    with lens-core from this checkout's import root."""
    assert report["lens_at_start"] == []
    assert report["legacy_all"] == ["record_rl_metrics"]
    assert report["same_function"] is True
    assert pathlib.Path(report["shim_file"]).parent == shim_directory
    assert pathlib.Path(report["legacy_origin"]).parent == shim_directory
    assert report["legacy_file"] == report["legacy_origin"]
    assert report["entry_point"] == "lens_compat_rl._nemo_lens_instruments_rl"
    assert pathlib.Path(report["metadata_location"]) == metadata_directory
    assert pathlib.Path(report["lens_core_file"]) == pathlib.Path(nemo.lens.__file__)
    assert report["finders"].count("LegacyModuleFinder") == 1
    assert report["finders"].index("PathFinder") < report["finders"].index("LegacyModuleFinder")


def _installed_metadata_directory() -> pathlib.Path:
    """The directory holding this interpreter's lens-compat-rl `.dist-info`."""
    return pathlib.Path(str(importlib.metadata.distribution("lens-compat-rl").locate_file("")))


def test_without_site_the_legacy_import_works(tmp_path: pathlib.Path) -> None:
    """Under `python -S` (no `site`, no .pth file) the legacy import works unaided: the
    environment's metadata is on sys.path through PYTHONPATH."""
    report = _run_child(sys.executable, ["-S"], [], tmp_path)

    assert report["site_imported"] is False
    _assert_served_from(report, SHIM_DIRECTORY, _installed_metadata_directory())


@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """This Python in a new, empty virtual environment: `site` runs, nothing is installed."""
    home = tmp_path_factory.mktemp("plain-venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(home)],
        capture_output=True,
        check=True,
        timeout=CHILD_TIMEOUT,
    )
    for python in (home / "bin" / "python", home / "Scripts" / "python.exe"):
        if python.exists():
            return python
    pytest.fail(f"no interpreter in the new virtual environment {home}")


def _installer(target: pathlib.Path) -> list[str]:
    """The command that installs the shim's sources, without dependencies, into `target`."""
    common = ["install", "--quiet", "--no-deps", "--target", str(target), str(SHIM_SOURCES)]
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


@pytest.fixture(scope="module")
def target_install(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """lens-compat-rl, built from its sources, installed with `--target` into a new directory."""
    if not (SHIM_SOURCES / "pyproject.toml").is_file():
        pytest.skip(f"the lens-compat-rl sources are not at {SHIM_SOURCES}")
    target = tmp_path_factory.mktemp("target")
    result = subprocess.run(
        _installer(target), capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    return target


def test_a_target_directory_on_pythonpath_serves_the_legacy_import(
    target_install: pathlib.Path, plain_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A `--target` directory holds the package and its metadata, and no .pth file; on
    PYTHONPATH of an empty environment the legacy import works unaided."""
    assert list(target_install.glob("*.pth")) == []
    assert list(target_install.glob("lens_compat_rl-*.dist-info/entry_points.txt")) != []

    report = _run_child(plain_python, [], [target_install], tmp_path)

    assert report["site_imported"] is True
    _assert_served_from(report, target_install / "lens_compat_rl", target_install)


def test_a_zip_archive_serves_the_legacy_import(
    plain_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A zip archive holding lens_compat_rl/ and its .dist-info (METADATA, entry_points.txt)
    serves the legacy module from the archive, through zipimport."""
    distribution = importlib.metadata.distribution("lens-compat-rl")
    dist_info = f"lens_compat_rl-{distribution.version}.dist-info"
    archive = tmp_path / "lens_compat_rl.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(SHIM_DIRECTORY.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(SHIM_DIRECTORY.parent).as_posix())
        for name in ("METADATA", "entry_points.txt"):
            text = distribution.read_text(name)
            assert text is not None, name
            zipped.writestr(f"{dist_info}/{name}", text)

    report = _run_child(plain_python, [], [archive], tmp_path)

    _assert_served_from(report, archive / "lens_compat_rl", archive)
    assert report["shim_loader"] == "zipimporter"
