"""The one task runner for the lens monorepo.

`nox` (no arguments) runs the full check that CI runs: the Python x OpenTelemetry test
matrix (its floor cells at the lowest declared dependencies), the soak runs, the compat
shims from fresh wheels and from the development install, the Ray integration, the
API-only install, lint, type check, packaging and docs.

    nox -l                          # list every session
    nox -s quick                    # quick loop: lens-core's tests, 3.11, newest OpenTelemetry
    nox -s quick -- packages/lens-core/tests/test_registry.py   # one test module
    nox -t latest                   # newest OpenTelemetry (3.11, 3.13), plus lint and
                                    #   the compat checks on the newest Python
    nox -s "tests(3.10, otel=floor)" # one cell of the matrix
    nox -s integrations-torch       # torch.distributed over gloo (not in the default run)
    nox -s bench                    # speed figures, 3.11 and 3.13 at both OTel ends (not
                                    #   part of the default run)
    nox -s "bench(3.13, otel=latest)" # one of them
    nox -s docs-serve               # the documentation site at http://127.0.0.1:8000

Each session but `quick` creates a fresh virtual environment (uv, or virtualenv without
uv) and prints its interpreter and installed `opentelemetry-*` versions before it checks
anything. Every process a session starts writes bytecode to .nox/pycache, and pytest runs
on one pytest-xdist worker per core (LENS_TEST_WORKERS=0 runs in one process).
"""

from __future__ import annotations

import atexit
import itertools
import os
import pathlib
import re
import shutil
import signal
import tarfile
import tempfile
import zipfile

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
# The deprecation shims, by the name markers and LENS_TEST_SHIMS use (tests/conftest.py).
SHIMS = {
    "rl": ROOT / "packages" / "lens-compat-rl",
    "gym": ROOT / "packages" / "lens-compat-gym",
}
ALIAS = ROOT / "packages" / "nemo-lens"  # the code-free migration alias
# Every distribution of the monorepo, lens-core first.
DISTRIBUTIONS = {"lens-core": CORE, **{f"lens-compat-{n}": p for n, p in SHIMS.items()}}
DISTRIBUTIONS["nemo-lens"] = ALIAS
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

# The machines set PYTHONDONTWRITEBYTECODE=1, and uv compiles nothing at install, so every
# pytest process and every `lens` subprocess a test starts would compile the tests and all
# of OpenTelemetry again (17 s of collection per pytest process). Every process nox starts
# writes its bytecode instead, into one cache outside the source tree; each module is
# compiled the first time it is imported, not everything a venv holds.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(ROOT / ".nox" / "pycache"))

# Every pytest run appends its failed tests here (tests/support/lens_failure_log.py), and
# they are printed again after nox's summary: CI keeps only the end of a run's output.
FAILURE_LOG = ROOT / ".nox" / "failed-tests.txt"
FAILURE_LOG.parent.mkdir(exist_ok=True)
FAILURE_LOG.unlink(missing_ok=True)
os.environ["LENS_TEST_FAILURE_LOG"] = str(FAILURE_LOG)


def _print_failed_tests() -> None:
    if FAILURE_LOG.is_file():
        print(f"nox > failed tests ({FAILURE_LOG.relative_to(ROOT)}):", flush=True)
        print(FAILURE_LOG.read_text(encoding="utf-8"), end="", flush=True)


atexit.register(_print_failed_tests)


def test_workers() -> str:
    """pytest-xdist workers for a test run: one per core this process may use (the tests
    mostly wait on threads, sockets and children, so the cores are the limit), or
    LENS_TEST_WORKERS ("0" runs the tests in the pytest process itself)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return os.environ.get("LENS_TEST_WORKERS", str(cores or 1))


# pytest-xdist's options for every session that runs many tests: `worksteal` hands a
# worker that is done the queued tests of a busy one (the fork and CLI tests are slow).
XDIST = ("-n", test_workers(), "--dist", "worksteal")

# One OpenTelemetry axis: API, SDK and both OTLP exporters at the same release.
OTEL_FLOOR = "1.23.0"  # lens-core's declared floor: the first API with a synchronous gauge
OTEL_MIDDLE = "1.30.0"
# The newest release every lens-core extra resolves on: instrumentation releases pin the
# SDK release they belong to, and opentelemetry-instrumentation-aiohttp-client 0.66b2
# (for SDK 1.45.2) is not published, so `lens-core[aiohttp]` cannot install beside 1.45.2.
OTEL_LATEST = "1.45.1"
OTEL_NAMES = {OTEL_FLOOR: "floor", OTEL_MIDDLE: "middle", OTEL_LATEST: "latest"}
OTEL_TAGS = {OTEL_FLOOR: ["oldest"], OTEL_LATEST: ["latest"]}
# Each Python runs one or two cells and each release at least one: the floor on the
# oldest and the newest Python, the middle release on 3.12, the newest release on 3.11
# (the coverage cell) and 3.13. A cell costs CI 2-3 minutes, and the interpreters in
# between add little over their neighbours (3.10 at the newest release lies between the
# floor cell on 3.10 and the newest release on 3.11).
MIDDLE_PYTHON = "3.12"
OTEL_CELL_PYTHONS = {
    OTEL_FLOOR: (OLDEST_PYTHON, NEWEST_PYTHON),
    OTEL_MIDDLE: (MIDDLE_PYTHON,),
    OTEL_LATEST: ("3.11", NEWEST_PYTHON),
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
# The bench sessions: the Python of the development venv and the newest, each at both
# OpenTelemetry ends (the issue-14 figures). Untagged, so `nox -t latest` never runs them.
BENCH_PYTHONS = ("3.11", NEWEST_PYTHON)
BENCH_CELLS = [
    nox.param(python, otel, id=f"{python}, otel={OTEL_NAMES[otel]}")
    for python in BENCH_PYTHONS
    for otel in (OTEL_FLOOR, OTEL_LATEST)
]
# The quick loop's Python: the machines' default one.
QUICK_PYTHON = "3.11"
# The tests that sessions of their own run: the long soak runs and the ones needing Ray or
# torch (the integrations sessions).
ELSEWHERE = "not soak and not integration"
# What an OpenTelemetry release's instrumentation packages need beside them: 0.44b0 (for
# 1.23) imports pkg_resources, which setuptools 82 removed.
COMPANION_PINS = {OTEL_FLOOR: ("setuptools<82",)}
# Every extra at once, as a newcomer installs them (resolved with pip by `resolve`).
NEWCOMER_EXTRAS = "sdk,prometheus,aiohttp,fastapi"
# What `tests-newest` runs on the newest release: the parts that follow SDK internals.
NEWEST_RELEASE_TESTS = tuple(
    f"packages/lens-core/tests/{name}.py"
    for name in (
        "test_cardinality_limit",
        "test_otel_internals",
        "test_coalesced_recording",
        "test_record_metrics",
        "test_series_keys",
        "test_setup",
    )
)
# lens-core's extras every test cell installs: what the contrib and `lens view` tests need.
CORE_EXTRAS = "all,aiohttp,fastapi,view"
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
    # All of lens-core: measured 93% in each of the three cells once the `lens` command's
    # tests ran it in-process (80.4% before), less two points of slack. The fork tests run
    # untraced, so what only a forked child runs reads low.
    (str(CORE / "src" / "nemo" / "lens" / "*"), "91"),
)
# mypy runs once per test directory: each has a conftest.py, which two in one run would
# make two modules named `conftest`.
TYPECHECK_RUNS = (
    (
        "packages/lens-core/src",
        "packages/lens-compat-rl/src",
        "packages/lens-compat-gym/src",
        "noxfile.py",
    ),
    ("packages/lens-core/tests",),
    ("packages/lens-compat-rl/tests",),
    ("packages/lens-compat-gym/tests",),
    ("tests",),
)
# The compat sessions: both shims on the oldest and the newest Python; each without the
# other on the newest.
SHIM_SETS = [
    nox.param(python, shims, id=f"{python}, shims={'+'.join(shims)}")
    for python in (OLDEST_PYTHON, NEWEST_PYTHON)
    for shims in (("rl", "gym"), ("rl",), ("gym",))
    if len(shims) == len(SHIMS) or python == NEWEST_PYTHON
]

SHOW_VERSIONS = """\
import importlib.metadata, platform, sys
print(f"python {platform.python_version()} ({sys.executable})")
found = sorted(
    (dist.metadata["Name"].lower(), dist.version)
    for dist in importlib.metadata.distributions()
    if dist.metadata["Name"]
    and dist.metadata["Name"].lower().startswith(("opentelemetry", "lens-", "nemo-lens"))
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
    "nooptionals",
    "resolve",
    "tests-newest",
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


@nox.session(python=QUICK_PYTHON, default=False, reuse_venv=True)
def quick(session: nox.Session) -> None:
    """The quick loop: lens-core's tests on one Python at the newest OpenTelemetry, in a venv
    kept between runs; `nox -s quick -- packages/lens-core/tests/test_registry.py` runs one
    module (posargs replace the test paths)."""
    run_quick_tests(session)


@nox.session(python=NEWEST_PYTHON)
def integrations(session: nox.Session) -> None:
    """nemo.lens.contrib.ray against a real local Ray cluster (`integration` tests)."""
    run_integration_tests(session, "ray")


@nox.session(name="integrations-torch", python=TORCH_PYTHON)
def integrations_torch(session: nox.Session) -> None:
    """broadcast_trace_context over torch.distributed (gloo, 2 processes), a DataLoader's
    forked workers reporting to the parent, and the docs' DataLoader example; opt-in."""
    run_integration_tests(session, "torch")
    session.run(
        "python", "-m", "pytest", "tests/test_docs_examples.py", "-k", "Tokenized",
        env={"LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


@nox.session
@nox.parametrize(("python", "shims"), SHIM_SETS)
def compat(session: nox.Session, shims: tuple[str, ...]) -> None:
    """The shims' tests, and the cross-package tests with them, from fresh wheels."""
    run_shim_tests(session, install="wheel", shims=shims)


@nox.session(name="compat-editable", python=NEWEST_PYTHON, tags=["latest"])
def compat_editable(session: nox.Session) -> None:
    """The same tests on the development install (every package editable)."""
    run_shim_tests(session, install="editable", shims=tuple(SHIMS))


@nox.session(python=NEWEST_PYTHON)
def nooptionals(session: nox.Session) -> None:
    """Only opentelemetry-api: `import nemo.lens` works and recording is a silent no-op."""
    run_api_only_tests(session)


@nox.session(python=NEWEST_PYTHON)
def resolve(session: nox.Session) -> None:
    """lens-core's extras, alone and combined, resolve on the day's PyPI (uv), and every
    extra at once does with pip."""
    run_resolution_checks(session)


@nox.session(name="tests-newest", python=QUICK_PYTHON, tags=["latest"])
def tests_newest(session: nox.Session) -> None:
    """The metric tests on the newest OpenTelemetry release the day's PyPI resolves for
    `lens-core[all]`, unpinned: it may be newer than the matrix's `latest`, whose
    instrumentation packages lag (see OTEL_LATEST)."""
    run_newest_release_tests(session)


@nox.session(python=NEWEST_PYTHON, tags=["latest"])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    run_lint(session)


@nox.session(python=NEWEST_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict (configured in the root pyproject) over the src trees and the tests."""
    run_typecheck(session)


@nox.session(python=NEWEST_PYTHON)
def build(session: nox.Session) -> None:
    """sdist and wheel of all four distributions; contents checked; installed and used."""
    run_build_checks(session)


@nox.session(python=NEWEST_PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site, with every mkdocs warning an error, and its checks: code that
    parses and fits, measured in headless Chromium (tests/test_docs.py)."""
    run_docs_build(session)


@nox.session(name="docs-serve", python=NEWEST_PYTHON, default=False)
def docs_serve(session: nox.Session) -> None:
    """Serve the documentation site at http://127.0.0.1:8000, rebuilt on every change."""
    session.install(*group("docs"))
    serve_until_stopped(
        session, "mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", env={"NO_MKDOCS_2_WARNING": "1"}
    )


@nox.session(python=NEWEST_PYTHON)
@nox.parametrize("otel", OTEL_ENDS)
def soak(session: nox.Session, otel: str) -> None:
    """The long reliability runs (`soak` marker), on the newest Python, at both OTel ends."""
    run_soak_tests(session, otel)


@nox.session
@nox.parametrize(("python", "otel"), BENCH_CELLS)
def bench(session: nox.Session, otel: str) -> None:
    """Speed figures, as ratios against baselines measured in the same run."""
    run_benchmarks(session, otel)


# --- helpers ------------------------------------------------------------------------------


def _stop_like_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_until_stopped(session: nox.Session, *command: str, env: dict[str, str]) -> None:
    """Run a server until it is stopped; being stopped is how the session succeeds.

    Ctrl-C reaches nox and the server alike, and nox waits for the server to exit. A
    SIGTERM to nox (a supervisor, `kill`) takes the same path, instead of leaving the
    server running; a SIGINT or SIGTERM sent to the server alone ends it with the signal's
    status, which counts as stopped too.
    """
    stopped = (-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
    previous = signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    try:
        session.run(*command, env=env, success_codes=[0, *stopped])
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    The floor cells pin every declared dependency at its lower bound (the lowest install
    lens-core allows) and check that it is consistent. With `check_coverage` (the newest
    release) the tests run under coverage and the coverage floors hold; the other cells run
    them untraced, which is faster (CI time)."""
    install = "wheel" if otel == OTEL_LATEST else "editable"
    pins = lowest_declared_pins() if otel == OTEL_FLOOR else otel_pins(otel)
    requirements = [*pins, *COMPANION_PINS.get(otel, ()), *group("test")]
    if install == "wheel":
        session.install(f"{built_wheel(session, 'lens-core')}[{CORE_EXTRAS}]", *requirements)
    else:
        session.install("-e", f"{CORE}[{CORE_EXTRAS}]", *requirements)
    show_versions(session)
    if otel == OTEL_FLOOR:
        if session.venv_backend == "uv":
            session.run(uv_binary(), "pip", "check", external=True)
        else:
            session.run("python", "-m", "pip", "check")
    env = {"LENS_TEST_SHIMS": "none", "LENS_TEST_INSTALL": install}
    pytest = ["python", "-m", "pytest", *XDIST, "packages/lens-core/tests", "tests"]
    if not check_coverage:
        # The browser tests read back a page Plotly draws, the same in every cell: the
        # coverage cell runs them (CI time).
        session.run(*pytest, "-m", f"not browser and {ELSEWHERE}", *session.posargs, env=env)
        return
    coverage_file = pathlib.Path(session.create_tmp()) / ".coverage"
    env["COVERAGE_FILE"] = str(coverage_file)
    for stale in coverage_file.parent.glob(".coverage*"):
        stale.unlink()
    # pytest-cov traces every xdist worker and combines their data into COVERAGE_FILE,
    # mapping a wheel's site-packages paths onto the source tree ([tool.coverage.paths]).
    traced = ("--cov", "--cov-report=")
    session.run(*pytest, *traced, "-m", f"not fork and {ELSEWHERE}", *session.posargs, env=env)
    # The tests that fork run untraced, in a run of their own: a child forked while another
    # thread holds coverage's tracer lock hangs inside coverage.
    session.run(*pytest, "-m", f"fork and {ELSEWHERE}", *session.posargs, env=env)
    for include, floor in COVERAGE_FLOORS:
        session.run(
            "coverage", "report", f"--include={include}", f"--fail-under={floor}",
            env=env,
        )  # fmt: skip


def run_quick_tests(session: nox.Session) -> None:
    """lens-core editable at the newest OpenTelemetry with every extra; its tests (or the
    posargs) on pytest-xdist workers, untraced, without the soak and integration runs."""
    session.install(
        "-e", f"{CORE}[{CORE_EXTRAS}]", *otel_pins(OTEL_LATEST), *group("test"), silent=True
    )
    paths = session.posargs or ["packages/lens-core/tests"]
    session.run(
        "python", "-m", "pytest", *XDIST, "-q", "-m", ELSEWHERE, *paths,
        env={"LENS_TEST_SHIMS": "none", "LENS_TEST_INSTALL": "editable"},
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
        "python", "-m", "pytest", *XDIST, "-m", "soak", "packages/lens-core/tests", "tests",
        *session.posargs,
        env={"LENS_TEST_SHIMS": "none", "LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


# Where this nox run built the distributions, once (built_distributions).
_built_dir: pathlib.Path | None = None


def built_distributions(session: nox.Session) -> pathlib.Path:
    """The directory holding every distribution's sdist and the wheel built from that sdist
    (what an installer given only the sdist gets). The first session that asks builds them
    into a temporary directory; every later session of the same nox run reuses it, and the
    directory is removed when nox exits."""
    global _built_dir
    if _built_dir is not None:
        session.log(f"reusing the distributions built in {_built_dir}")
        return _built_dir
    out_dir = pathlib.Path(tempfile.mkdtemp(prefix="lens-dist-"))
    atexit.register(shutil.rmtree, out_dir, ignore_errors=True)
    if session.venv_backend != "uv":
        session.install(*group("build"))
    # No kind flag is uv's and build's own default: the sdist, then the wheel from it.
    # Naming both (`--sdist --wheel`) would build each from the source tree instead.
    for package in DISTRIBUTIONS.values():
        if session.venv_backend == "uv":
            session.run(
                uv_binary(), "build", "-q", "--out-dir", str(out_dir), str(package), external=True
            )
        else:
            session.run("python", "-m", "build", "--outdir", str(out_dir), str(package))
    _built_dir = out_dir
    return out_dir


def wheel_of(out_dir: pathlib.Path, distribution: str) -> pathlib.Path:
    """The one wheel of `distribution` in `out_dir`."""
    (wheel,) = out_dir.glob(f"{distribution.replace('-', '_')}-*.whl")
    return wheel


def built_wheel(session: nox.Session, distribution: str) -> pathlib.Path:
    """This nox run's wheel of `distribution` (built_distributions)."""
    return wheel_of(built_distributions(session), distribution)


def run_shim_tests(session: nox.Session, *, install: str, shims: tuple[str, ...]) -> None:
    """lens-core, the `shims` and, with both, the alias (from wheels or editable); the shims'
    own tests and the root tests, which check each shim installed or absent as the session says.

    pytest runs from a scratch directory with the repository as its rootdir, so nothing
    imports the source tree by accident; a root test checks where lens was imported from.
    """
    requirements = [*otel_pins(OTEL_LATEST, ("opentelemetry-api", "opentelemetry-sdk"))]
    requirements += group("test")
    distributions = ("lens-core", *(f"lens-compat-{shim}" for shim in shims))
    if len(shims) == len(SHIMS):  # the alias requires both shims
        distributions += ("nemo-lens",)
    if install == "wheel":
        wheels = (str(built_wheel(session, name)) for name in distributions)
        session.install(*wheels, *requirements)
    else:
        packages = (DISTRIBUTIONS[name] for name in distributions)
        session.install(*(f"--editable={package}" for package in packages), *requirements)
    show_versions(session)
    env = {"LENS_TEST_SHIMS": ",".join(shims), "LENS_TEST_INSTALL": install}
    with session.chdir(session.create_tmp()):
        session.run(
            "python", "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
            *XDIST, *(str(SHIMS[shim] / "tests") for shim in shims), str(ROOT / "tests"),
            *session.posargs,
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
        env={"LENS_TEST_API_ONLY": "1", "LENS_TEST_SHIMS": "none"},
    )  # fmt: skip


# Extras that share no requirement with the others (Plotly, for `lens view`): they join
# only the every-extra-at-once resolution, which halves the combinations to resolve.
INDEPENDENT_EXTRAS = {"view"}


def extra_combinations() -> list[str]:
    """Every non-empty combination of lens-core's extras, as `a,b,c`, less those naming
    `all` (which is only `sdk,prometheus`) or an independent extra, then every extra at
    once through `all`."""
    declared = set(CORE_PYPROJECT["project"]["optional-dependencies"])
    extras = sorted(declared - {"all"} - INDEPENDENT_EXTRAS)
    combinations = [
        ",".join(combination)
        for size in range(1, len(extras) + 1)
        for combination in itertools.combinations(extras, size)
    ]
    return [*combinations, CORE_EXTRAS]


def run_resolution_checks(session: nox.Session) -> None:
    """Resolve extras from PyPI as it is today (no lock, no pins): an instrumentation
    release that lags its SDK's patch release must not make an install impossible.

    uv resolves every combination for the newest Python, and every extra at once for the
    oldest; pip, what a newcomer runs, resolves every extra at once (a dry run: nothing
    is installed). A set of versions that satisfies some extras satisfies any fewer, so
    each combination fails only where the resolver, not the constraints, gives up.
    """
    session.install("pip")
    requirements = pathlib.Path(session.create_tmp()) / "requirements.in"
    checks = [(NEWEST_PYTHON, extras) for extras in extra_combinations()]
    checks.append((OLDEST_PYTHON, CORE_EXTRAS))
    for python, extras in checks:
        requirements.write_text(f"lens-core[{extras}] @ {CORE.as_uri()}\n")
        session.run(
            uv_binary(), "pip", "compile", "--quiet", "--no-header", "--no-python-downloads",
            "--python-version", python, "--output-file", os.devnull, str(requirements),
            external=True,
        )  # fmt: skip
    session.log(f"{len(checks)} extras combinations resolve")
    session.run(
        "python", "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
        f"{CORE}[{NEWCOMER_EXTRAS}]",
    )  # fmt: skip


def run_newest_release_tests(session: nox.Session) -> None:
    """lens-core[all] editable at whatever release the resolver picks, then the tests of
    what changes most between releases: metric recording, the cardinality limit, the
    OpenTelemetry internals lens touches."""
    session.install("-e", f"{CORE}[all]", *group("test"))
    show_versions(session)
    session.run(
        "python", "-m", "pytest", *XDIST, "-q", "-m", ELSEWHERE, *NEWEST_RELEASE_TESTS,
        env={"LENS_TEST_SHIMS": "none", "LENS_TEST_INSTALL": "editable"},
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
    shims = (f"--editable={package}" for package in SHIMS.values())
    session.install("-e", f"{CORE}[{CORE_EXTRAS}]", *shims, *group("typecheck"))
    show_versions(session)
    for paths in TYPECHECK_RUNS:
        session.run("mypy", *paths)
    # The one test that needs mypy (the documented idioms type-check strictly) runs here,
    # where mypy is installed; LENS_TEST_REQUIRE makes a missing mypy fail it, not skip it.
    session.run(
        "python", "-m", "pytest", f"{CORE}/tests/test_span_idioms.py", "-k", "mypy",
        env={"LENS_TEST_REQUIRE": "mypy", "LENS_TEST_INSTALL": "editable"},
    )  # fmt: skip


def wheel_files(wheel: pathlib.Path) -> list[str]:
    """The paths inside `wheel`."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def check_wheel_contents(out_dir: pathlib.Path) -> None:
    """No wheel owns the `nemo` namespace; no shim writes under `nemo/` and lens-core ships
    no legacy module; the alias's wheel holds metadata only; each distribution's wheel and
    sdist carry its LICENSE unchanged (PEP 639: the wheel under `*.dist-info/licenses/`,
    named by a `License-File` line; the sdist at its top)."""
    for wheel in sorted(out_dir.glob("*.whl")):
        names = wheel_files(wheel)
        if "nemo/__init__.py" in names:
            raise RuntimeError(f"{wheel.name} contains nemo/__init__.py (nemo is a namespace)")
        print(f"{wheel.name}: {len(names)} files, no nemo/__init__.py")
    core = wheel_files(wheel_of(out_dir, "lens-core"))
    problems = [] if "nemo/lens/py.typed" in core else ["lens-core lacks nemo/lens/py.typed"]
    for shim in SHIMS:
        distribution = f"lens-compat-{shim}"
        files = wheel_files(wheel_of(out_dir, distribution))
        problems += [f"{distribution} writes {name}" for name in files if name.startswith("nemo/")]
        problems += [
            f"{distribution} writes {name} outside its package and .dist-info"
            for name in files
            if not name.startswith((f"lens_compat_{shim}/", f"lens_compat_{shim}-"))
        ]
        problems += [f"lens-core ships {name}" for name in core if f"instruments/{shim}" in name]
    problems += [
        f"nemo-lens ships {name}, but is an alias without code"
        for name in wheel_files(wheel_of(out_dir, "nemo-lens"))
        if not name.startswith("nemo_lens-")
    ]
    for distribution, package in DISTRIBUTIONS.items():
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
import importlib, importlib.metadata, pathlib, sysconfig
import nemo.lens
site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
assert pathlib.Path(nemo.lens.__file__).resolve().is_relative_to(site), nemo.lens.__file__
version = importlib.metadata.version("lens-core")
assert nemo.lens.__version__ == version
assert importlib.metadata.distribution("nemo-lens").version == version
for shim in ("rl", "gym"):
    package = importlib.import_module(f"lens_compat_{shim}")
    legacy = importlib.import_module(f"nemo.lens.instruments.{shim}")
    for module in (package, legacy):
        assert pathlib.Path(module.__file__).resolve().is_relative_to(site), module.__file__
    assert pathlib.Path(legacy.__spec__.origin).parent == pathlib.Path(package.__file__).parent
    assert package.__version__ == importlib.metadata.version(f"lens-compat-{shim}") == version
    print(f"nemo.lens.instruments.{shim} comes from", legacy.__spec__.origin)
print("lens-core, lens-compat-rl, lens-compat-gym and nemo-lens are all", version)
"""

# Legacy NeMo-Gym code, unchanged: the five series with their kinds and units, and one
# DeprecationWarning at the call line however many steps run.
LEGACY_GYM_CHECK = """\
import warnings
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader
from nemo.lens.instruments.gym import record_gym_metrics

reader = InMemoryMetricReader()
meter = MeterProvider(metric_readers=[reader]).get_meter("legacy-gym")
durations = dict(server_request_duration_ms=12.0, rollout_duration_ms=340.0, verify_duration_ms=8.0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for step in range(3):
        record_gym_metrics(meter, **durations, verify_success_rate=0.75, active_servers=4)
(warning,) = caught
assert warning.category is DeprecationWarning and warning.lineno == 12, warning
(scope,) = reader.get_metrics_data().resource_metrics[0].scope_metrics
found = {metric.name: (type(metric.data), metric.unit) for metric in scope.metrics}
assert found == {
    "gym.server.request_duration_ms": (Histogram, "ms"),
    "gym.rollout.duration_ms": (Histogram, "ms"),
    "gym.verify.duration_ms": (Histogram, "ms"),
    "gym.verify.success_rate": (Gauge, ""),
    "gym.servers.active": (Gauge, ""),
}, found
print("legacy Gym code recorded", sorted(found), "and warned once:", warning.message)
"""
GYM_GONE_CHECK = """\
try:
    import nemo.lens.instruments.gym
except ModuleNotFoundError as exc:
    assert exc.name == "nemo.lens.instruments.gym", exc.name
    print("without lens-compat-gym:", exc)
else:
    raise AssertionError("nemo.lens.instruments.gym imported without lens-compat-gym")
"""


def run_build_checks(session: nox.Session) -> None:
    """Build every distribution's sdist and wheel (the wheel from the sdist) and check them
    (namespace, shim layout, alias without code, LICENSE). In this fresh environment, install
    `nemo-lens[sdk]==<version>` as NeMo-Gym does for a server, the four wheels found only as
    files: import from outside the source tree (both legacy modules included), run legacy Gym
    code, uninstall lens-compat-gym and see its legacy import fail."""
    out = built_distributions(session)
    print("built:", ", ".join(sorted(path.name for path in out.iterdir())))
    check_wheel_contents(out)
    sdk = otel_pins(OTEL_LATEST, ("opentelemetry-api", "opentelemetry-sdk"))
    alias_version = wheel_of(out, "nemo-lens").name.split("-")[1]
    session.install("--find-links", str(out), f"nemo-lens[sdk]=={alias_version}", *sdk)
    show_versions(session)
    with session.chdir(session.create_tmp()):
        session.run("python", "-W", "error", "-c", IMPORT_CHECK)
        session.run("python", "-c", LEGACY_GYM_CHECK)
        if session.venv_backend == "uv":
            session.run(uv_binary(), "pip", "uninstall", "lens-compat-gym", external=True)
        else:
            session.run("python", "-m", "pip", "uninstall", "-y", "lens-compat-gym")
        session.run("python", "-c", GYM_GONE_CHECK)


def run_docs_build(session: nox.Session) -> None:
    """`mkdocs build --strict` on the root mkdocs.yml, into a scratch directory; then
    tests/test_docs.py, whose rendered check builds the site again and measures every code
    block of every page in headless Chromium (Debian's chromium and chromedriver: it skips
    without them, unless LENS_TEST_REQUIRE lists chromium, as .ci/run does)."""
    session.install(*group("docs"))
    show_versions(session)
    site_dir = pathlib.Path(session.create_tmp()) / "site"
    # mkdocs-material 9.7+ prints an end-of-life banner on every build; it is not a
    # build warning, and this keeps the log to what the build itself says.
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site_dir),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    # --noconftest: the root tests' conftest loads lens-core and hypothesis, which no docs
    # check needs (this environment holds only the docs group).
    session.run("python", "-m", "pytest", "--noconftest", "tests/test_docs.py", *session.posargs)


def run_benchmarks(session: nox.Session, otel: str) -> None:
    """Run every benchmarks/bench_*.py script against lens-core[sdk,view,prometheus] (the
    prometheus extra brings prometheus_client, bench_per_value.py's anchor) with the RL
    shim (bench_shim.py measures it), editable at one OpenTelemetry release. Posargs reach
    every script, so pass only options they all accept (or none)."""
    session.install(
        "-e", f"{CORE}[sdk,view,prometheus]", "-e", str(SHIMS["rl"]), *otel_pins(otel),
        *COMPANION_PINS.get(otel, ()),
    )  # fmt: skip
    show_versions(session)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)
