"""The one task runner for the lens monorepo.

`nox` (no arguments) runs the full check that CI runs: the Python x OpenTelemetry test
matrix, the compat shim from fresh wheels and from the development install, the lowest
declared dependencies, the API-only install, lint, type check, packaging and docs.

    nox -l                          # list every session
    nox -t latest                   # quick loop: newest OpenTelemetry on each Python, plus
                                    #   lint and the compat checks on the newest Python
    nox -t latest -p 3.13           # quicker: one interpreter
    nox -s "tests(3.10, otel=floor)" # one cell of the matrix
    nox -s integrations-torch       # torch.distributed over gloo (not in the default run)
    nox -s bench                    # speed figures (not part of the default run)

Each session creates a fresh virtual environment (uv, or virtualenv without uv) and prints
its interpreter and installed `opentelemetry-*` versions before it checks anything.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager

import nox
from packaging.requirements import Requirement

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "no"
# A Python that is missing here is a broken machine, not a reason to skip part of the matrix.
nox.options.error_on_missing_interpreters = True
# Interpreters come from pyenv (below); there is no network to download one from.
nox.options.download_python = "never"

ROOT = pathlib.Path(__file__).resolve().parent
CORE = ROOT / "packages" / "lens-core"
COMPAT = ROOT / "packages" / "lens-compat-rl"
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
CORE_PYPROJECT = nox.project.load_toml(CORE / "pyproject.toml")

# The supported Pythons, from lens-core's trove classifiers: ["3.10", ..., "3.13"].
PYTHONS = nox.project.python_versions(CORE_PYPROJECT)
OLDEST_PYTHON, NEWEST_PYTHON = PYTHONS[0], PYTHONS[-1]
# Any supported Python works; 3.11 is the one this project's machines hold a CPU-only torch
# wheel for (point uv at such wheels with UV_FIND_LINKS or UV_INDEX, or PyPI's torch brings
# the CUDA libraries, several GB).
TORCH_PYTHON = "3.11"


def _add_pyenv_interpreters_to_path() -> None:
    """Put each supported Python from pyenv on PATH, so no one has to `pyenv global` first."""
    versions = pathlib.Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser() / "versions"
    prefixes = []
    for python in PYTHONS:
        installed = [
            path
            for path in versions.glob(f"{python}.*")
            if re.fullmatch(rf"{re.escape(python)}\.\d+", path.name) and (path / "bin").is_dir()
        ]
        if installed:
            newest = max(installed, key=lambda path: int(path.name.rsplit(".", 1)[1]))
            prefixes.append(str(newest / "bin"))
    if prefixes:
        os.environ["PATH"] = os.pathsep.join([*prefixes, os.environ.get("PATH", "")])


_add_pyenv_interpreters_to_path()

# One OpenTelemetry axis: API, SDK and both OTLP exporters at the same release.
OTEL_FLOOR = "1.23.0"  # lens-core's declared floor: the first API with a synchronous gauge
OTEL_MIDDLE = "1.30.0"
# The newest release every lens-core extra resolves on: instrumentation releases pin the
# SDK release they belong to, and opentelemetry-instrumentation-aiohttp-client 0.66b2
# (for SDK 1.45.2) is not published, so `lens-core[aiohttp]` cannot install beside 1.45.2.
OTEL_LATEST = "1.45.1"
OTEL_NAMES = {OTEL_FLOOR: "floor", OTEL_MIDDLE: "middle", OTEL_LATEST: "latest"}
OTEL_TAGS = {OTEL_FLOOR: ["oldest"], OTEL_LATEST: ["latest"]}
# Every Python tests the newest release. The floor runs on the oldest and the newest
# Python, the middle release on one in between: each cell costs CI 2-3 minutes, and the
# interpreters in between add little over their neighbours there.
MIDDLE_PYTHON = "3.12"
OTEL_CELL_PYTHONS = {
    OTEL_FLOOR: (OLDEST_PYTHON, NEWEST_PYTHON),
    OTEL_MIDDLE: (MIDDLE_PYTHON,),
    OTEL_LATEST: tuple(PYTHONS),
}
TEST_CELLS = [
    nox.param(python, otel, id=f"{python}, otel={OTEL_NAMES[otel]}", tags=OTEL_TAGS.get(otel, []))
    for python in PYTHONS
    for otel in (OTEL_FLOOR, OTEL_MIDDLE, OTEL_LATEST)
    if python in OTEL_CELL_PYTHONS[otel]
]
OTEL_ENDS = [
    nox.param(OTEL_FLOOR, id="otel=floor", tags=["oldest"]),
    nox.param(OTEL_LATEST, id="otel=latest", tags=["latest"]),
]
# The tests that sessions of their own run: the long soak runs and the ones needing Ray or
# torch (the integrations sessions).
ELSEWHERE = "not soak and not integration"
# What an OpenTelemetry release's instrumentation packages need beside them: 0.44b0 (for
# 1.23) imports pkg_resources, which setuptools 82 removed.
COMPANION_PINS = {OTEL_FLOOR: ("setuptools<82",)}
# lens-core's extras every test cell installs: what the contrib tests need too.
CORE_EXTRAS = "all,aiohttp,fastapi"
OTEL_PINNED = (
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-grpc",
    "opentelemetry-exporter-otlp-proto-http",
)
# What the latest-OpenTelemetry sessions hold to a coverage floor: (files, percent). The
# patterns name the source tree: those sessions test the built wheel, and a report that
# finds no data there means [tool.coverage.paths] no longer maps site-packages back.
COVERAGE_FLOORS = (
    # The metric registry.
    (str(CORE / "src" / "nemo" / "lens" / "instruments" / "*"), "98"),
    # All of lens-core: measured 80.4% after the one-owner refactor, less two points of slack.
    # The fork tests run untraced, and so does the `lens` command, which its tests run in
    # subprocesses: those files read low.
    (str(CORE / "src" / "nemo" / "lens" / "*"), "78"),
)
# mypy runs once per test directory: each has a conftest.py, which two in one run would
# make two modules named `conftest`.
TYPECHECK_RUNS = (
    ("packages/lens-core/src", "packages/lens-compat-rl/src", "noxfile.py"),
    ("packages/lens-core/tests",),
    ("packages/lens-compat-rl/tests",),
    ("tests",),
)

SHOW_VERSIONS = """\
import importlib.metadata, platform, sys
print(f"python {platform.python_version()} ({sys.executable})")
found = sorted(
    (dist.metadata["Name"].lower(), dist.version)
    for dist in importlib.metadata.distributions()
    if dist.metadata["Name"]
    and dist.metadata["Name"].lower().startswith(("opentelemetry", "lens-"))
)
for name, version in found or [("opentelemetry-*", "none installed")]:
    print(f"  {name} {version}")
"""

nox.options.sessions = [
    "tests",
    "soak",
    "compat",
    "compat-editable",
    "integrations",
    "minimums",
    "nooptionals",
    "lint",
    "typecheck",
    "build",
    "docs",
]


# --- sessions: each one calls one helper ------------------------------------------------


@nox.session
@nox.parametrize(("python", "otel"), TEST_CELLS)
def tests(session: nox.Session, otel: str) -> None:
    """lens-core's tests and the cross-package tests without the shim (coverage: newest)."""
    run_core_tests(session, otel, check_coverage=otel == OTEL_LATEST)


@nox.session(python=NEWEST_PYTHON)
def integrations(session: nox.Session) -> None:
    """nemo.lens.contrib.ray against a real local Ray cluster (`integration` tests)."""
    run_integration_tests(session, "ray")


@nox.session(name="integrations-torch", python=TORCH_PYTHON)
def integrations_torch(session: nox.Session) -> None:
    """broadcast_trace_context over torch.distributed (gloo, 2 processes); opt-in."""
    run_integration_tests(session, "torch")


@nox.session(python=PYTHONS)
def compat(session: nox.Session) -> None:
    """lens-compat-rl's tests, and the cross-package tests with it, from fresh wheels."""
    run_shim_tests(session, install="wheel")


@nox.session(name="compat-editable", python=NEWEST_PYTHON, tags=["latest"])
def compat_editable(session: nox.Session) -> None:
    """The same tests on the development install (both packages editable)."""
    run_shim_tests(session, install="editable")


@nox.session(python=OLDEST_PYTHON, tags=["oldest"])
def minimums(session: nox.Session) -> None:
    """lens-core's tests with every dependency at its lowest declared version."""
    run_minimum_dependency_tests(session)


@nox.session(python=NEWEST_PYTHON)
def nooptionals(session: nox.Session) -> None:
    """Only opentelemetry-api: `import nemo.lens` works and recording is a silent no-op."""
    run_api_only_tests(session)


@nox.session(python=NEWEST_PYTHON, tags=["latest"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    run_lint(session)


@nox.session(python=NEWEST_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict (configured in the root pyproject) over both src trees."""
    run_typecheck(session)


@nox.session(python=NEWEST_PYTHON)
def build(session: nox.Session) -> None:
    """sdist and wheel of both packages; wheel contents checked; both installed and imported."""
    run_build_checks(session)


@nox.session(python=NEWEST_PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site, with every mkdocs warning an error."""
    run_docs_build(session)


@nox.session(python=NEWEST_PYTHON)
@nox.parametrize("otel", OTEL_ENDS)
def soak(session: nox.Session, otel: str) -> None:
    """The long reliability runs (`soak` marker), on the newest Python, at both OTel ends."""
    run_soak_tests(session, otel)


@nox.session(python=NEWEST_PYTHON)
def bench(session: nox.Session) -> None:
    """Speed figures, as ratios against baselines measured in the same run."""
    run_benchmarks(session)


# --- helpers ------------------------------------------------------------------------------


def uv_binary() -> str:
    """uv as nox finds it: on PATH, else the binary the `uv` package installed beside nox
    ships (a fresh `pip install nox uv` need not put it on PATH, e.g. under pyenv)."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin
    except ImportError:
        return "uv"
    return find_uv_bin()


def show_versions(session: nox.Session) -> None:
    """Print the interpreter and the installed opentelemetry-* and lens-* versions."""
    session.log("interpreter and OpenTelemetry versions:")
    session.run("python", "-c", SHOW_VERSIONS, silent=False, log=False)


def group(name: str) -> tuple[str, ...]:
    """The requirements of one `[dependency-groups]` entry of the root pyproject."""
    return nox.project.dependency_groups(PYPROJECT, name)


def otel_pins(version: str, names: tuple[str, ...] = OTEL_PINNED) -> list[str]:
    """`name==version` for each OpenTelemetry distribution pinned together."""
    return [f"{name}=={version}" for name in names]


def run_core_tests(session: nox.Session, otel: str, *, check_coverage: bool) -> None:
    """lens-core at one OpenTelemetry release, from a freshly built wheel on the newest
    release and editable on the others; lens-core's tests and the root tests (no shim).
    With `check_coverage` (the newest release) they run under coverage and the coverage
    floors hold; the other cells run them untraced, which is faster (CI time)."""
    install = "wheel" if otel == OTEL_LATEST else "editable"
    requirements = [*otel_pins(otel), *COMPANION_PINS.get(otel, ()), *group("test")]
    if install == "wheel":
        with built_distributions(session, sdists=False, packages=(CORE,)) as out_dir:
            session.install(f"{wheel_of(out_dir, 'lens-core')}[{CORE_EXTRAS}]", *requirements)
    else:
        session.install("-e", f"{CORE}[{CORE_EXTRAS}]", *requirements)
    show_versions(session)
    env = {"LENS_TEST_SHIM": "absent", "LENS_TEST_INSTALL": install}
    test_paths = ("packages/lens-core/tests", "tests")
    runner = ["python", "-m", "pytest"]
    if check_coverage:
        coverage_file = pathlib.Path(session.create_tmp()) / ".coverage"
        env["COVERAGE_FILE"] = str(coverage_file)
        for stale in coverage_file.parent.glob(".coverage*"):
            stale.unlink()
        runner = ["coverage", "run", "-m", "pytest"]
    session.run(*runner, "-m", f"not fork and {ELSEWHERE}", *test_paths, *session.posargs, env=env)
    # The tests that fork run in a process of their own, untraced: a child forked while
    # another thread holds coverage's tracer lock hangs inside coverage.
    session.run(
        "python", "-m", "pytest", "-m", f"fork and {ELSEWHERE}", *test_paths, *session.posargs,
        env=env,
    )  # fmt: skip
    if not check_coverage:
        return
    # Maps a wheel's site-packages paths onto the source tree ([tool.coverage.paths]).
    session.run("coverage", "combine", "-q", env=env)
    for include, floor in COVERAGE_FLOORS:
        session.run(
            "coverage", "report", f"--include={include}", f"--fail-under={floor}",
            env=env,
        )  # fmt: skip


def run_integration_tests(session: nox.Session, runtime: str) -> None:
    """lens-core editable at the newest OpenTelemetry with one third-party runtime (the
    dependency group of that name); the `integration` tests, which must find it."""
    session.install(
        "-e", f"{CORE}[{CORE_EXTRAS}]", *otel_pins(OTEL_LATEST), *group("test"), *group(runtime)
    )
    show_versions(session)
    session.run(
        "python", "-m", "pytest", "-m", "integration", "packages/lens-core/tests",
        *session.posargs,
        env={"LENS_TEST_REQUIRE": runtime, "LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


def run_soak_tests(session: nox.Session, otel: str) -> None:
    """lens-core[all] editable at one OpenTelemetry release; only the `soak` tests, untraced."""
    session.install("-e", f"{CORE}[all]", *otel_pins(otel), *group("test"))
    show_versions(session)
    session.run(
        "python", "-m", "pytest", "-m", "soak", "packages/lens-core/tests", "tests",
        *session.posargs,
        env={"LENS_TEST_SHIM": "absent", "LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


@contextmanager
def built_distributions(
    session: nox.Session, *, sdists: bool, packages: tuple[pathlib.Path, ...] = (CORE, COMPAT)
) -> Iterator[pathlib.Path]:
    """Build `packages` (both by default) into a new temporary directory and yield it: with
    `sdists`, each package's sdist and the wheel built from that sdist (what an installer
    given only the sdist would get); without, each wheel straight from the source tree."""
    out_dir = pathlib.Path(tempfile.mkdtemp(prefix="lens-dist-"))
    try:
        # No kind flag is uv's and build's own default: the sdist, then the wheel from it.
        # Naming both (`--sdist --wheel`) would build each from the source tree instead.
        kinds = [] if sdists else ["--wheel"]
        if session.venv_backend != "uv":
            session.install(*group("build"))
        for package in packages:
            if session.venv_backend == "uv":
                session.run(
                    uv_binary(), "build", "-q", *kinds, "--out-dir", str(out_dir), str(package),
                    external=True,
                )  # fmt: skip
            else:
                session.run("python", "-m", "build", *kinds, "--outdir", str(out_dir), str(package))
        yield out_dir
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def wheel_of(out_dir: pathlib.Path, distribution: str) -> pathlib.Path:
    """The one wheel of `distribution` in `out_dir`."""
    (wheel,) = out_dir.glob(f"{distribution.replace('-', '_')}-*.whl")
    return wheel


def run_shim_tests(session: nox.Session, *, install: str) -> None:
    """lens-compat-rl's tests and the root tests in shim mode, from wheels or editable.

    pytest runs from a scratch directory with the repository as its rootdir, so nothing
    imports the source tree by accident; a root test checks where lens was imported from.
    """
    requirements = [*otel_pins(OTEL_LATEST, ("opentelemetry-api", "opentelemetry-sdk"))]
    requirements += group("test")
    if install == "wheel":
        with built_distributions(session, sdists=False) as out_dir:
            session.install(
                str(wheel_of(out_dir, "lens-core")),
                str(wheel_of(out_dir, "lens-compat-rl")),
                *requirements,
            )
    else:
        session.install("-e", str(CORE), "-e", str(COMPAT), *requirements)
    show_versions(session)
    env = {"LENS_TEST_SHIM": "installed", "LENS_TEST_INSTALL": install}
    with session.chdir(session.create_tmp()):
        session.run(
            "python", "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
            str(COMPAT / "tests"), str(ROOT / "tests"), *session.posargs,
            env=env,
        )  # fmt: skip


def lowest_declared_pins() -> list[str]:
    """`name==X` for every lens-core dependency and extra declared as `name>=X`."""
    project = CORE_PYPROJECT["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared.extend(extra)
    pins: dict[str, str] = {}
    for line in declared:
        requirement = Requirement(line)
        if requirement.name == project["name"]:
            continue  # `all` points back at the package's own extras
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(lower) != 1:
            raise ValueError(f"lens-core declares {line!r} without exactly one '>=' lower bound")
        pins[requirement.name] = f"{requirement.name}=={lower[0]}"
    return sorted(pins.values())


def run_minimum_dependency_tests(session: nox.Session) -> None:
    """Editable lens-core[all] with each declared dependency pinned to its lower bound."""
    pins = lowest_declared_pins()
    session.install("-e", f"{CORE}[all]", *pins, *COMPANION_PINS[OTEL_FLOOR], *group("test"))
    show_versions(session)
    if session.venv_backend == "uv":
        session.run(uv_binary(), "pip", "check", external=True)
    else:
        session.run("python", "-m", "pip", "check")
    session.run(
        "python", "-m", "pytest", "-m", ELSEWHERE, "packages/lens-core/tests", *session.posargs,
        env={"LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


NO_SDK_CHECK = """\
import importlib.util, sys
if importlib.util.find_spec("opentelemetry.sdk") is not None:
    sys.exit("opentelemetry-sdk is installed, so this is not an API-only environment")
"""


def run_api_only_tests(session: nox.Session) -> None:
    """lens-core without extras and pytest alone; the API-only tests must run, not skip."""
    pytest_requirement = [line for line in group("test") if Requirement(line).name == "pytest"]
    session.install("-e", str(CORE), *pytest_requirement)
    show_versions(session)
    session.run("python", "-c", NO_SDK_CHECK)
    session.run(
        "python", "-m", "pytest", "tests/test_api_only.py", "tests/test_without_shim.py",
        *session.posargs,
        env={"LENS_TEST_API_ONLY": "1", "LENS_TEST_SHIM": "absent"},
    )  # fmt: skip


def run_lint(session: nox.Session) -> None:
    """Lint and formatting, both read from the root pyproject."""
    session.install(*group("lint"))
    show_versions(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


def run_typecheck(session: nox.Session) -> None:
    """mypy over both src trees, the noxfile and each test directory, with the SDK and
    what the tests and the noxfile import installed so their types are known."""
    session.install("-e", f"{CORE}[{CORE_EXTRAS}]", "-e", str(COMPAT), *group("typecheck"))
    show_versions(session)
    for paths in TYPECHECK_RUNS:
        session.run("mypy", *paths)


def wheel_files(wheel: pathlib.Path) -> list[str]:
    """The paths inside `wheel`."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def check_wheel_contents(out_dir: pathlib.Path) -> None:
    """No wheel owns the `nemo` namespace; the shim's wheel writes nothing under `nemo/`;
    each package's wheel and sdist carry its LICENSE unchanged (PEP 639: the wheel under
    `*.dist-info/licenses/`, named by a `License-File` line; the sdist at its top)."""
    for wheel in sorted(out_dir.glob("*.whl")):
        names = wheel_files(wheel)
        if "nemo/__init__.py" in names:
            raise RuntimeError(f"{wheel.name} contains nemo/__init__.py (nemo is a namespace)")
        print(f"{wheel.name}: {len(names)} files, no nemo/__init__.py")
    core = wheel_files(wheel_of(out_dir, "lens-core"))
    shim = wheel_files(wheel_of(out_dir, "lens-compat-rl"))
    problems = [
        *(f"lens-compat-rl writes {name}" for name in shim if name.startswith("nemo/")),
        *(f"lens-core ships {name}" for name in core if name.endswith("instruments/rl.py")),
        *(
            f"lens-compat-rl lacks {name}"
            for name in ("lens_compat_rl_hook.pth", "_lens_compat_rl_hook.py")
            if name not in shim
        ),
    ]
    if "nemo/lens/py.typed" not in core:
        problems.append("lens-core lacks nemo/lens/py.typed")
    for distribution, package in (("lens-core", CORE), ("lens-compat-rl", COMPAT)):
        license_file = package / "LICENSE"
        if not license_file.is_file():
            problems.append(f"{license_file.relative_to(ROOT)} does not exist")
            continue
        expected = license_file.read_bytes()
        wheel = wheel_of(out_dir, distribution)
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            (metadata,) = (name for name in names if name.endswith(".dist-info/METADATA"))
            shipped = metadata.replace("/METADATA", "/licenses/LICENSE")
            if shipped not in names:
                problems.append(f"{wheel.name} lacks {shipped}")
            elif archive.read(shipped) != expected:
                problems.append(f"{wheel.name}: {shipped} differs from {license_file.name}")
            if "License-File: LICENSE" not in archive.read(metadata).decode().splitlines():
                problems.append(f"{wheel.name}: METADATA has no 'License-File: LICENSE'")
        sdists = sorted(out_dir.glob(f"{distribution.replace('-', '_')}-*.tar.gz"))
        if len(sdists) != 1:
            problems.append(f"{len(sdists)} sdists of {distribution} built, not one")
        for sdist in sdists:
            member = f"{sdist.name.removesuffix('.tar.gz')}/LICENSE"
            with tarfile.open(sdist) as archive:
                try:
                    contents = archive.extractfile(member)
                except KeyError:
                    contents = None
                if contents is None:
                    problems.append(f"{sdist.name} lacks {member}")
                elif contents.read() != expected:
                    problems.append(f"{sdist.name}: {member} differs from {license_file.name}")
    if problems:
        raise RuntimeError("; ".join(problems))
    print("each wheel and sdist carries its package's LICENSE")


IMPORT_CHECK = """\
import importlib.metadata, pathlib, sysconfig
import nemo.lens, lens_compat_rl, nemo.lens.instruments.rl as legacy
site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
for module in (nemo.lens, lens_compat_rl, legacy):
    assert pathlib.Path(module.__file__).resolve().is_relative_to(site), module.__file__
assert pathlib.Path(legacy.__spec__.origin).parent == pathlib.Path(lens_compat_rl.__file__).parent
assert nemo.lens.__version__ == importlib.metadata.version("lens-core")
assert lens_compat_rl.__version__ == importlib.metadata.version("lens-compat-rl")
print("imported nemo.lens", nemo.lens.__version__, "and lens_compat_rl", lens_compat_rl.__version__)
print("nemo.lens.instruments.rl comes from", legacy.__spec__.origin)
"""


def run_build_checks(session: nox.Session) -> None:
    """Build sdists and wheels (wheels from the sdists), check both kinds (namespace,
    shim layout, LICENSE), install both wheels together and import them from a directory
    outside the source tree."""
    with built_distributions(session, sdists=True) as out_dir:
        print("built:", ", ".join(sorted(path.name for path in out_dir.iterdir())))
        check_wheel_contents(out_dir)
        session.install(
            str(wheel_of(out_dir, "lens-core")), str(wheel_of(out_dir, "lens-compat-rl"))
        )
    show_versions(session)
    with session.chdir(session.create_tmp()):
        session.run("python", "-W", "error", "-c", IMPORT_CHECK)


def run_docs_build(session: nox.Session) -> None:
    """`mkdocs build --strict` on the root mkdocs.yml, into a scratch directory."""
    session.install(*group("docs"))
    show_versions(session)
    site_dir = pathlib.Path(session.create_tmp()) / "site"
    # mkdocs-material 9.7+ prints an end-of-life banner on every build; it is not a
    # build warning, and this keeps the log to what the build itself says.
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site_dir),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def run_benchmarks(session: nox.Session) -> None:
    """Run every benchmarks/bench_*.py script against lens-core[all] at the newest OTel."""
    session.install("-e", f"{CORE}[all]", *otel_pins(OTEL_LATEST))
    show_versions(session)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)
