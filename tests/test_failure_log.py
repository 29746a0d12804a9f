"""The failure log: what CI shows of a red run names the failed tests.

CI keeps only the end of a run's output, where nox's summary says which session failed but
not which test. Every pytest run appends its failed tests to LENS_TEST_FAILURE_LOG
(tests/support/lens_failure_log.py, loaded by the root pyproject) and the noxfile prints
that file after its summary.
"""

from __future__ import annotations

from pathlib import Path

from lens_children import child_env, run_python

ROOT = Path(__file__).resolve().parents[1]
PYTEST_TIMEOUT_S = 120

TESTS = """
def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3, "arithmetic went wrong"

def test_fails_too():
    raise RuntimeError("second failure\\nwith a second line")
"""


def run_failing_tests(tmp_path: Path, *xdist: str) -> tuple[str, Path]:
    """Run TESTS through pytest with the repository's configuration; (output, log file)."""
    test_file = tmp_path / "test_three.py"
    test_file.write_text(TESTS, encoding="utf-8")
    log = tmp_path / "failed-tests.txt"
    result = run_python(
        "-m", "pytest", "-c", ROOT / "pyproject.toml", "--rootdir", tmp_path,
        "-p", "no:randomly", "-p", "no:cacheprovider", *xdist, test_file,
        cwd=ROOT,
        env=child_env({"LENS_TEST_FAILURE_LOG": str(log), "NOX_CURRENT_SESSION": "cell(x)"}),
        timeout_s=PYTEST_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout, log


def test_each_failed_test_is_logged_once_with_its_session_and_reason(tmp_path: Path) -> None:
    """Two failures on two xdist workers: two lines, each naming the session, the test and
    the first line of its error; the passing test is absent."""
    output, log = run_failing_tests(tmp_path, "-n", "2")
    lines = sorted(log.read_text(encoding="utf-8").splitlines())
    assert lines == [
        "cell(x): test_three.py::test_fails (call): AssertionError: arithmetic went wrong",
        "cell(x): test_three.py::test_fails_too (call): RuntimeError: second failure",
    ], output[-2000:]


def test_nothing_is_logged_without_the_variable(tmp_path: Path) -> None:
    """Without LENS_TEST_FAILURE_LOG (a plain pytest run) the plugin writes nothing."""
    test_file = tmp_path / "test_three.py"
    test_file.write_text(TESTS, encoding="utf-8")
    result = run_python(
        "-m", "pytest", "-c", ROOT / "pyproject.toml", "--rootdir", tmp_path,
        "-p", "no:randomly", "-p", "no:cacheprovider", test_file,
        cwd=tmp_path,
        env=child_env(),
        timeout_s=PYTEST_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["test_three.py"]
