"""lens-core's layering: SDK imports only in _sdk/, imports one way, private names in one module."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nemo.lens

LENS_ROOT = Path(nemo.lens.__file__).parent
REPOSITORY = Path(__file__).resolve().parents[3]


def lens_modules() -> dict[str, Path]:
    """Every module of nemo.lens, by dotted name."""
    modules: dict[str, Path] = {}
    for path in sorted(LENS_ROOT.rglob("*.py")):
        parts = ["nemo", "lens", *path.relative_to(LENS_ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_lens_modules(path: Path, known: set[str]) -> set[str]:
    """The nemo.lens modules `path` imports anywhere (module level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from nemo.lens import state` imports the module nemo.lens.state.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in known else node.module for name in names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def test_no_import_cycle_between_lens_modules() -> None:
    """The import graph of nemo.lens, function-level imports included, has no cycle.

    An import of a submodule is an edge to that submodule only: the parent package that
    Python imports first is not counted, or every package's __init__ would form a cycle.
    """
    modules = lens_modules()
    graph = {
        name: imported_lens_modules(path, set(modules)) - {name} for name, path in modules.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_only_the_sdk_subpackage_and_testing_import_the_sdk() -> None:
    """No module outside nemo/lens/_sdk/ and nemo/lens/testing.py imports the SDK or an exporter."""
    banned = ("opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client")
    offenders = []
    for path in sorted(LENS_ROOT.rglob("*.py")):
        relative = path.relative_to(LENS_ROOT).as_posix()
        if relative.startswith("_sdk/") or relative == "testing.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if any(name == ban or name.startswith(ban + ".") for name in names for ban in banned):
                offenders.append(f"{relative}: {', '.join(names)}")
    assert offenders == []


def _ruff() -> list[str]:
    found = shutil.which("ruff")
    if found:
        return [found]
    pytest.importorskip("ruff")
    return [sys.executable, "-m", "ruff"]


@pytest.mark.skipif(
    not (REPOSITORY / "pyproject.toml").is_file(), reason="needs the repository's ruff config"
)
@pytest.mark.parametrize(
    "source",
    [
        "from opentelemetry.sdk.trace import TracerProvider\n",
        "import opentelemetry.exporter.otlp.proto.grpc.trace_exporter\n",
        "def build():\n    from prometheus_client import REGISTRY\n",
    ],
)
def test_ruff_refuses_an_sdk_import_outside_the_sdk_subpackage(source: str) -> None:
    """The repository's ruff config fails an SDK/exporter import in lens-core outside _sdk/,
    and accepts the same line inside it."""

    def lint(relative: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_ruff(), "check", "--no-cache", "--select", "TID251", "--stdin-filename", relative],
            input=source,
            capture_output=True,
            text=True,
            cwd=REPOSITORY,
            timeout=60,
        )

    outside = lint("packages/lens-core/src/nemo/lens/helpers.py")
    assert outside.returncode == 1, outside.stdout + outside.stderr
    assert "TID251" in outside.stdout
    inside = lint("packages/lens-core/src/nemo/lens/_sdk/_pipeline.py")
    assert inside.returncode == 0, inside.stdout + inside.stderr


def test_opentelemetry_private_names_appear_in_one_module() -> None:
    """Only _otel_internals.py (and testing.py's helpers through it) names OTel privates."""
    private_markers = (
        "._internal",
        "_real_meter",
        "_TRACER_PROVIDER",
        "_METER_PROVIDER",
        "_LOGGER_PROVIDER",
        "util._once",
        "._collect",
    )
    offenders = []
    for path in sorted(LENS_ROOT.rglob("*.py")):
        relative = path.relative_to(LENS_ROOT).as_posix()
        if relative == "_otel_internals.py":
            continue
        text = path.read_text(encoding="utf-8")
        offenders += [f"{relative}: {marker}" for marker in private_markers if marker in text]
    assert offenders == []


def test_private_modules_declare_no_all() -> None:
    """A module is public exactly when it declares __all__: no private module declares one."""
    declaring = []
    for name, path in lens_modules().items():
        private = any(part.startswith("_") for part in name.split(".")[2:])
        tree = ast.parse(path.read_text(encoding="utf-8"))
        has_all = any(
            isinstance(node, ast.Assign)
            and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            )
            for node in tree.body
        )
        if private and has_all:
            declaring.append(name)
    assert declaring == []


def test_sdk_modules_define_classes_and_import_the_sdk_at_module_level() -> None:
    """In `_sdk/`, no class is defined inside a function, and the SDK (`opentelemetry.sdk`)
    is imported at the top of the module, never inside a function: `_sdk` is imported only
    where an SDK object is built, so a module there has no reason to defer the SDK."""
    offenders = []
    for name, path in lens_modules().items():
        if not name.startswith("nemo.lens._sdk"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ClassDef):
                    offenders.append(f"{name}: class {node.name} inside {function.name}()")
                elif (
                    isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("opentelemetry.sdk")
                    # The SDK's deprecated log handler stands in for an optional package.
                    and node.names[0].name != "LoggingHandler"
                ):
                    offenders.append(f"{name}: imports {node.module} in {function.name}()")
    assert offenders == []
