"""Running test code in a real forked child, with a bound so a deadlock fails the test."""

from __future__ import annotations

import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

CHILD_TIMEOUT_S = 30.0


def in_child(work: Callable[[], Any], timeout_s: float = CHILD_TIMEOUT_S) -> Any:
    """Fork; run `work` in the child and return its JSON-encoded result to the parent.

    The child always leaves through `os._exit`, so pytest never runs twice. An exception
    in the child fails the test with the child's error; a child that does not finish
    within `timeout_s` is killed and fails it too.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            try:
                report = {"result": work()}
            except BaseException as exc:
                report = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(write_fd, json.dumps(report).encode())
            code = 1 if "error" in report else 0
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    try:
        payload = _read_all(read_fd, timeout_s)
    finally:
        os.close(read_fd)
    # One bound for the whole exchange; a second is grace for a child that is exiting.
    exit_code = wait_for_child(pid, max(deadline - time.monotonic(), 1.0))
    report = json.loads(payload or b"{}")
    assert "error" not in report, report["error"]
    assert exit_code == 0, f"the child exited with {exit_code} and reported {payload!r}"
    return report["result"]


def wait_for_child(pid: int, timeout_s: float) -> int:
    """Wait for a forked child with a bound; kill it and fail if it hangs. Returns its exit code."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child {pid} did not finish within {timeout_s}s (deadlock?)")


def _read_all(read_fd: int, timeout_s: float) -> bytes:
    """Read everything a child writes until it closes its end (bounded by timeout_s)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([read_fd], [], [], max(remaining, 0))
        if not ready:
            return b"".join(chunks)
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
