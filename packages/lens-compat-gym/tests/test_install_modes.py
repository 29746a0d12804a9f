"""The legacy name works wherever the distribution's metadata is on sys.path, with no fix.

Each test runs a real child interpreter in which no `.pth` file can help: started with `-S`
(no `site`), or from an empty virtual environment with the install under test on
PYTHONPATH (PYTHONPATH entries are never site directories). The child imports the legacy
name first, before anything of the shim, and reports where each module came from, so a
test cannot pass on another copy. Where the copy under test is not this environment's
own, the child's path hides this environment's lens-compat-gym (package and metadata).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable, Sequence
from importlib.machinery import PathFinder
from typing import Any

import pytest

import lens_compat_gym
import nemo.lens

RunChild = Callable[..., subprocess.CompletedProcess[str]]

SHIM_SOURCES = pathlib.Path(__file__).resolve().parents[1]
# Building the shim from its sources takes a few seconds (hatchling from uv's cache); the
# bound only matters when something is stuck.
INSTALL_TIMEOUT = 60
# Names of this environment's lens-compat-gym in a path directory: package, metadata, and
# hatchling's editable .pth.
_SHIM_ENTRY_PREFIXES = ("lens_compat_gym", "_editable_impl_lens_compat_gym")

CHILD_SCRIPT = textwrap.dedent(
    """\
    import importlib.util, json, sys

    report = {"site_imported": "site" in sys.modules}
    try:
        import nemo.lens.instruments.gym as legacy
    except ModuleNotFoundError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["error_name"] = exc.name
        report["shim_findable"] = importlib.util.find_spec("lens_compat_gym") is not None
        print(json.dumps(report))
        raise SystemExit(0)
    report["error"] = None
    report["legacy_loader"] = type(legacy.__spec__.loader).__qualname__

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import lens_compat_gym

    reader = InMemoryMetricReader()
    legacy.record_gym_metrics(MeterProvider(metric_readers=[reader]).get_meter("t"), 1.0)
    recorded = [
        metric.name
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    ]
    report.update(
        legacy_name=legacy.__name__,
        legacy_all=legacy.__all__,
        legacy_origin=legacy.__spec__.origin,
        legacy_file=legacy.__file__,
        same_function=legacy.record_gym_metrics is lens_compat_gym.record_gym_metrics,
        shim_file=lens_compat_gym.__file__,
        shim_loader=type(lens_compat_gym.__spec__.loader).__name__,
        recorded=recorded,
    )
    print(json.dumps(report))
    """
)


def _parent_path() -> list[str]:
    """lens-core's import root, then every directory on this interpreter's `sys.path`."""
    lens_core_root = pathlib.Path(nemo.lens.__file__).resolve().parents[2]
    entries = [str(lens_core_root), *(entry for entry in sys.path if os.path.isdir(entry))]
    return list(dict.fromkeys(entries))


def _child_report(
    run_child: RunChild, cwd: pathlib.Path, flags: Sequence[str] = (), **options: Any
) -> dict[str, Any]:
    """Run CHILD_SCRIPT in a fresh interpreter and return its report (the deprecation
    warning, which test_deprecation.py covers, is ignored to keep stderr empty)."""
    ignore = ["-W", "ignore::DeprecationWarning"]
    result = run_child([*flags, *ignore, "-c", CHILD_SCRIPT], cwd=cwd, **options)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _assert_served_from(report: dict[str, Any], shim_directory: pathlib.Path) -> None:
    """The legacy import worked at once, served by lens-core's finder from `shim_directory`,
    and its function recorded."""
    assert report["error"] is None
    assert report["legacy_loader"] == "_LegacyModuleLoader"
    assert report["legacy_name"] == "nemo.lens.instruments.gym"
    assert report["legacy_all"] == ["record_gym_metrics"]
    assert report["same_function"] is True
    assert pathlib.Path(report["shim_file"]).parent == shim_directory
    assert pathlib.Path(report["legacy_origin"]).parent == shim_directory
    assert report["legacy_file"] == report["legacy_origin"]
    assert report["recorded"] == ["gym.server.request_duration_ms"]


@pytest.fixture(scope="module")
def path_without_shim(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """This interpreter's path with its lens-compat-gym hidden: each directory holding the
    package or its metadata is replaced by a directory of links to everything else in it."""
    mirrors = tmp_path_factory.mktemp("without-shim")
    path: list[str] = []
    for index, entry in enumerate(_parent_path()):
        children = list(pathlib.Path(entry).iterdir())
        if not any(child.name.startswith(_SHIM_ENTRY_PREFIXES) for child in children):
            path.append(entry)
            continue
        mirror = mirrors / str(index)
        mirror.mkdir()
        for child in children:
            if not child.name.startswith(_SHIM_ENTRY_PREFIXES):
                try:
                    (mirror / child.name).symlink_to(child, target_is_directory=child.is_dir())
                except OSError as exc:  # e.g. Windows without the symlink privilege
                    pytest.skip(f"cannot create symbolic links here: {exc}")
        path.append(str(mirror))
    assert PathFinder.find_spec("lens_compat_gym", path) is None
    assert not list(importlib.metadata.distributions(name="lens-compat-gym", path=path))
    return path


def test_without_the_distribution_the_legacy_import_is_module_not_found(
    run_child: RunChild, path_without_shim: list[str], tmp_path: pathlib.Path
) -> None:
    """With lens-core but no lens-compat-gym, the import fails the normal way."""
    report = _child_report(run_child, tmp_path, ["-S"], python_path=path_without_shim)

    assert report["shim_findable"] is False
    assert report["error"] == "ModuleNotFoundError: No module named 'nemo.lens.instruments.gym'"
    assert report["error_name"] == "nemo.lens.instruments.gym"


def test_without_site_the_legacy_import_works(run_child: RunChild, tmp_path: pathlib.Path) -> None:
    """Under `python -S`, with this interpreter's site directories on PYTHONPATH, the legacy
    import works as it is: no .pth file ran, the metadata there was enough."""
    report = _child_report(run_child, tmp_path, ["-S"], python_path=_parent_path())

    assert report["site_imported"] is False
    _assert_served_from(report, pathlib.Path(lens_compat_gym.__file__).parent)


def test_a_zip_archive_with_the_metadata_serves_the_legacy_module(
    run_child: RunChild, path_without_shim: list[str], tmp_path: pathlib.Path
) -> None:
    """A zip archive holding lens_compat_gym/ and its .dist-info (entry_points.txt included)
    serves the legacy module from inside the archive."""
    distribution = importlib.metadata.distribution("lens-compat-gym")
    dist_info = f"lens_compat_gym-{distribution.version}.dist-info"
    package_directory = pathlib.Path(lens_compat_gym.__file__).parent
    archive = tmp_path / "lens_compat_gym.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(package_directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(package_directory.parent).as_posix())
        for name in ("METADATA", "entry_points.txt"):
            text = distribution.read_text(name)
            assert text is not None, name
            zipped.writestr(f"{dist_info}/{name}", text)

    report = _child_report(run_child, tmp_path, ["-S"], python_path=[archive, *path_without_shim])

    _assert_served_from(report, archive / "lens_compat_gym")
    assert report["shim_loader"] == "zipimporter"


def _installer(target: pathlib.Path) -> list[str]:
    """uv (on PATH or beside the base interpreter) installing the sources into `target`."""
    beside_python = os.pathsep.join(
        os.path.join(sys.base_prefix, scripts) for scripts in ("bin", "Scripts")
    )
    uv = shutil.which("uv") or shutil.which("uv", path=beside_python)
    if uv is None:
        pytest.skip("uv is not available to install into a --target directory")
    return [uv, "pip", "install", "--quiet", "--no-deps", "--target", str(target),
            "--python", sys.executable, str(SHIM_SOURCES)]  # fmt: skip


def test_a_target_directory_on_pythonpath_works(
    run_child: RunChild,
    path_without_shim: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: pathlib.Path,
) -> None:
    """`uv pip install --target DIR`, with DIR on the PYTHONPATH of an empty virtual
    environment, serves the legacy module from DIR: DIR is no site directory, and nothing
    there needs to run at start-up."""
    if not (SHIM_SOURCES / "pyproject.toml").is_file():
        pytest.skip(f"the lens-compat-gym sources are not at {SHIM_SOURCES}")
    target = tmp_path_factory.mktemp("target")
    installed = subprocess.run(
        _installer(target), capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT
    )
    assert installed.returncode == 0, installed.stderr
    dist_info = f"lens_compat_gym-{lens_compat_gym.__version__}.dist-info"
    # Nothing but the package and its metadata (uv adds a hidden .lock): no .pth, no hook.
    installed_names = {entry.name for entry in target.iterdir()} - {".lock"}
    assert installed_names == {"lens_compat_gym", dist_info}
    assert (target / dist_info / "entry_points.txt").is_file()
    home = tmp_path_factory.mktemp("plain-venv")
    created = run_child(["-m", "venv", "--without-pip", home], cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    python = home / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    report = _child_report(
        run_child, tmp_path, python=python, python_path=[target, *path_without_shim]
    )

    assert report["site_imported"] is True
    _assert_served_from(report, target / "lens_compat_gym")
