"""record_metrics under real threads and a real os.fork()."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from lens_meters import CountingMeter
from lens_pipeline import MetricsPipeline

from nemo.lens import MetricSpec, record_metrics, register_metric_group, unregister_metric_group
from nemo.lens.instruments import _registry

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()")

THREADS = 16
CHILD_TIMEOUT_S = 20.0


def test_racing_first_use_creates_each_instrument_once(pipeline: MetricsPipeline) -> None:
    """Many threads recording new keys at the same moment create each instrument exactly once."""
    specs = [MetricSpec(f"k{i}", f"race.k{i}", "counter") for i in range(8)]
    register_metric_group("race", specs)
    meter = CountingMeter(pipeline.meter)
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait()
            for _ in range(50):
                record_metrics(meter, "race", {spec.key: 1 for spec in specs})
        except BaseException as exc:  # surfaced below, never swallowed
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert dict(meter.creates) == {spec.name: 1 for spec in specs}
    for spec in specs:
        (point,) = pipeline.points(spec.name)
        assert point.value == THREADS * 50


def wait_for_child(pid: int, timeout_s: float = CHILD_TIMEOUT_S) -> int:
    """Wait for a child with a bound; kill it and fail if it hangs. Returns its exit code."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child {pid} did not finish within {timeout_s}s (deadlock?)")


def read_from_child(read_fd: int, timeout_s: float = CHILD_TIMEOUT_S) -> bytes:
    """Read what the child wrote, waiting at most timeout_s for it."""
    ready, _, _ = select.select([read_fd], [], [], timeout_s)
    return os.read(read_fd, 4096) if ready else b""


@pytest.fixture
def hammering(pipeline: MetricsPipeline) -> Iterator[None]:
    """Threads that keep taking the registry lock (registering, creating) until the test ends."""
    stop = threading.Event()
    register_metric_group("steady", [MetricSpec("v", "steady.v", "counter")])

    def hammer(index: int) -> None:
        step = 0
        while not stop.is_set():
            group = f"churn{index}"
            register_metric_group(group, [MetricSpec("v", f"{group}.v")], allow_override=True)
            record_metrics(CountingMeter(pipeline.meter), group, v=step)
            record_metrics(pipeline.meter, "steady", v=1)
            unregister_metric_group(group)
            step += 1

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join(timeout=30)


@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
@pytest.mark.usefixtures("hammering")
def test_fork_while_threads_hammer_the_registry_never_deadlocks(
    pipeline: MetricsPipeline,
) -> None:
    """Children forked while other threads are inside the registry can use it at once."""
    for attempt in range(25):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: only os._exit leaves, so pytest never runs twice
            code = 1
            try:
                os.close(read_fd)
                register_metric_group("child", [MetricSpec("v", "child.v", "counter")])
                record_metrics(pipeline.meter, "child", v=attempt)
                record_metrics(pipeline.meter, "steady", v=1)
                os.write(write_fd, b"ok")
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        try:
            assert wait_for_child(pid) == 0
            assert read_from_child(read_fd) == b"ok"
        finally:
            os.close(read_fd)


@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_child_gets_a_fresh_unlocked_lock() -> None:
    """The registry lock is held across fork and replaced, unlocked, in the child."""
    parent_lock = _registry.lock
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fresh = _registry.lock is not parent_lock and not _registry.lock.locked()
            os.write(write_fd, b"fresh" if fresh else b"stale")
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        assert wait_for_child(pid) == 0
        assert read_from_child(read_fd) == b"fresh"
    finally:
        os.close(read_fd)
    assert _registry.lock is parent_lock
    assert not parent_lock.locked()
