"""record_metrics under real threads and a real os.fork()."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from lens_fork import in_child
from lens_meters import CountingMeter

from nemo.lens import MetricSpec, record_metrics, register_metric_group, unregister_metric_group
from nemo.lens.instruments import _registry
from nemo.lens.testing import InMemoryMetrics, in_memory_metrics

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
]

THREADS = 16


def test_racing_first_use_creates_each_instrument_once(pipeline: InMemoryMetrics) -> None:
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


@pytest.fixture
def hammering(pipeline: InMemoryMetrics) -> Iterator[None]:
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
def test_fork_while_threads_hammer_the_registry_never_deadlocks() -> None:
    """Children forked while other threads are inside the registry can use it at once."""
    for attempt in range(25):

        def use_registry(attempt: int = attempt) -> list[int]:
            # A pipeline built in the child: the SDK's own locks are not fork-safe, and a
            # parent thread may hold one of the parent pipeline's at fork time.
            child_pipeline = in_memory_metrics()
            register_metric_group("child", [MetricSpec("v", "child.v", "counter")])
            record_metrics(child_pipeline.meter, "child", v=attempt)
            record_metrics(child_pipeline.meter, "steady", v=1)
            return [
                p.value for name in ("child.v", "steady.v") for p in child_pipeline.points(name)
            ]

        assert in_child(use_registry) == [attempt, 1]


@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_child_gets_a_fresh_unlocked_lock() -> None:
    """The registry lock is held across fork and replaced, unlocked, in the child."""
    parent_lock = _registry.lock

    def check() -> str:
        fresh = _registry.lock is not parent_lock and not _registry.lock.locked()
        return "fresh" if fresh else "stale"

    assert in_child(check) == "fresh"
    assert _registry.lock is parent_lock
    assert not parent_lock.locked()


@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_child_never_records_through_instruments_its_parent_used(
    pipeline: InMemoryMetrics,
) -> None:
    """A forked child skips its parent's instruments (warning once) and records on its own."""
    register_metric_group("steady", [MetricSpec("v", "steady.v", "counter")])
    record_metrics(pipeline.meter, "steady", v=1)

    def child() -> dict[str, Any]:
        messages: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logging.getLogger("nemo.lens").addHandler(Collect())
        for _ in range(3):
            record_metrics(pipeline.meter, "steady", v=100)
        own = in_memory_metrics()
        record_metrics(own.meter, "steady", v=7)
        return {"messages": messages, "own": [p.value for p in own.points("steady.v")]}

    report = in_child(child)
    assert report["own"] == [7]
    assert len(report["messages"]) == 1
    assert "forked from one that had this meter's provider" in report["messages"][0]
    assert "group 'steady' is not recorded" in report["messages"][0]
    record_metrics(pipeline.meter, "steady", v=1)
    assert [p.value for p in pipeline.points("steady.v")] == [2]
