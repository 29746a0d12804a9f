"""Where no .pth file runs at start-up: a zipped install, `python -S`, `pip install --target`.

Each test runs a real child interpreter that sees lens-compat-rl without its hook installed:
started with `-S` (no `site`), or from an empty virtual environment, with a PYTHONPATH that
puts the copy of lens-compat-rl under test first and this interpreter's own path entries
after it, so lens-core and OpenTelemetry import as they do here. PYTHONPATH entries are
never site directories, so no .pth file among them runs. Every child reports where
lens_compat_rl, the hook and the legacy module came from, so a test cannot pass on another
copy.
"""

from __future__ import annotations

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

import _lens_compat_rl_hook
import lens_compat_rl
import nemo.lens

# A child that hangs is killed well before pytest's patience runs out.
CHILD_TIMEOUT = 20
# Installing builds the shim from its sources (a few seconds, hatchling from uv's cache or
# PyPI); the bound only matters when something is stuck.
INSTALL_TIMEOUT = 60
SHIM_SOURCES = pathlib.Path(__file__).resolve().parents[1]
LEGACY_ERROR = "ModuleNotFoundError: No module named 'nemo.lens.instruments.rl'"

# Shared by the children: try the legacy import, apply FIX, try again, then report what was
# loaded from where. FIX is substituted per test.
CHILD_SCRIPT = textwrap.dedent(
    """\
    import json, sys

    def hook_finders():
        return [
            index for index, finder in enumerate(sys.meta_path)
            if getattr(finder, "__qualname__", "") == "LegacyRLFinder"
        ]

    report = {"site_imported": "site" in sys.modules, "finders_before": hook_finders()}
    try:
        import nemo.lens.instruments.rl
    except ModuleNotFoundError as exc:
        report["error_before"] = f"{type(exc).__name__}: {exc}"
    else:
        report["error_before"] = None

    FIX
    report["finders_after_fix"] = hook_finders()
    report["shim_imported_by_fix"] = "lens_compat_rl" in sys.modules

    import nemo.lens.instruments.rl as legacy
    from nemo.lens.instruments.rl import record_rl_metrics
    import _lens_compat_rl_hook
    import lens_compat_rl

    report.update(
        legacy_name=legacy.__name__,
        legacy_all=legacy.__all__,
        legacy_origin=legacy.__spec__.origin,
        legacy_file=legacy.__file__,
        same_function=record_rl_metrics is lens_compat_rl.record_rl_metrics,
        shim_file=lens_compat_rl.__file__,
        shim_loader=type(lens_compat_rl.__spec__.loader).__name__,
        hook_file=_lens_compat_rl_hook.__file__,
        finders_after=hook_finders(),
        meta_path_length=len(sys.meta_path),
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
    fix: str,
    python_path: Sequence[str | os.PathLike[str]],
    cwd: pathlib.Path,
) -> dict[str, Any]:
    """Run CHILD_SCRIPT with `fix` in a fresh interpreter and return its report."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")
    }
    env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in python_path)
    result = subprocess.run(
        [str(python), *flags, "-c", CHILD_SCRIPT.replace("FIX", fix)],
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
    report: dict[str, Any], shim_directory: pathlib.Path, hook_file: pathlib.Path
) -> None:
    """Before the fix the legacy import failed; after it, the legacy module works, served
    from `shim_directory` by the hook in `hook_file`, through one finder placed last."""
    assert report["error_before"] == LEGACY_ERROR
    assert report["finders_before"] == []
    assert report["legacy_name"] == "nemo.lens.instruments.rl"
    assert report["legacy_all"] == ["record_rl_metrics"]
    assert report["same_function"] is True
    assert pathlib.Path(report["shim_file"]).parent == shim_directory
    assert pathlib.Path(report["legacy_origin"]).parent == shim_directory
    assert report["legacy_file"] == report["legacy_origin"]
    assert pathlib.Path(report["hook_file"]) == hook_file
    assert report["finders_after"] == [report["meta_path_length"] - 1]


def test_a_zipped_install_serves_the_legacy_module(tmp_path: pathlib.Path) -> None:
    """A zipped install serves the legacy module from the archive after import lens_compat_rl."""
    archive = tmp_path / "lens_compat_rl.zip"
    package_directory = pathlib.Path(lens_compat_rl.__file__).parent
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(_lens_compat_rl_hook.__file__, "_lens_compat_rl_hook.py")
        for path in sorted(package_directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(package_directory.parent).as_posix())

    report = _run_child(
        sys.executable, ["-S"], "import lens_compat_rl", [archive, *_parent_path()], tmp_path
    )

    _assert_served_from(report, archive / "lens_compat_rl", archive / "_lens_compat_rl_hook.py")
    assert report["shim_loader"] == "zipimporter"


def test_without_site_the_legacy_import_needs_lens_compat_rl_first(
    tmp_path: pathlib.Path,
) -> None:
    """Under `python -S` the legacy import fails until `import lens_compat_rl`, then works."""
    report = _run_child(sys.executable, ["-S"], "import lens_compat_rl", _parent_path(), tmp_path)

    assert report["site_imported"] is False
    _assert_served_from(
        report,
        pathlib.Path(lens_compat_rl.__file__).parent,
        pathlib.Path(_lens_compat_rl_hook.__file__),
    )


def _installer(target: pathlib.Path) -> list[str]:
    """The command that installs the shim's sources, without dependencies, into `target`."""
    common = ["install", "--quiet", "--no-deps", "--target", str(target), str(SHIM_SOURCES)]
    # uv on PATH, else beside the base interpreter, where `pip install uv` puts it.
    beside_python = os.pathsep.join(
        os.path.join(sys.base_prefix, scripts) for scripts in ("bin", "Scripts")
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


@pytest.mark.parametrize(
    "fix",
    ["import lens_compat_rl", "import site; site.addsitedir(TARGET)"],
    ids=["import-lens_compat_rl", "site-addsitedir"],
)
def test_a_target_directory_on_pythonpath_needs_an_explicit_fix(
    target_install: pathlib.Path, plain_python: pathlib.Path, tmp_path: pathlib.Path, fix: str
) -> None:
    """A --target directory's .pth never runs: the legacy import needs `fix` first, then works."""
    assert (target_install / "lens_compat_rl_hook.pth").read_text().strip() == (
        "import _lens_compat_rl_hook"
    )

    report = _run_child(
        plain_python,
        [],
        fix.replace("TARGET", repr(str(target_install))),
        [target_install, *_parent_path()],
        tmp_path,
    )

    assert report["site_imported"] is True
    # site.addsitedir ran the .pth file, which installed the hook without the package.
    assert report["shim_imported_by_fix"] is fix.startswith("import lens_compat_rl")
    assert report["finders_after_fix"] == report["finders_after"]
    _assert_served_from(
        report, target_install / "lens_compat_rl", target_install / "_lens_compat_rl_hook.py"
    )
