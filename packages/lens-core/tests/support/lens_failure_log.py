"""Appends each failed test's id to the file named by LENS_TEST_FAILURE_LOG.

The noxfile names that file and prints it after nox's own summary, so the end of a long
run's output (all that CI keeps of it) says which tests failed, in which session. Loaded
in every pytest run by the root pyproject's `-p lens_failure_log`; does nothing when the
variable is unset.
"""

from __future__ import annotations

import os

import pytest

FAILURE_LOG = "LENS_TEST_FAILURE_LOG"


class FailureLog:
    """Appends one line per failed test phase: session, test id, phase, first error line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.session = os.environ.get("NOX_CURRENT_SESSION", "pytest")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        crash = getattr(report.longrepr, "reprcrash", None)
        message = (crash.message if crash is not None else "").strip()
        first_line = message.splitlines()[0][:200] if message else "see the session's output"
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(f"{self.session}: {report.nodeid} ({report.when}): {first_line}\n")


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(FAILURE_LOG)
    # Under xdist the controller sees every worker's reports: record there, once.
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FailureLog(path), "lens-failure-log")
