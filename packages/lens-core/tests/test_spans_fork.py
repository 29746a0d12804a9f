"""Span state and span primitives across a real os.fork()."""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from lens_fork import in_child

from nemo.lens import SpanRegistry, managed_span, set_enabled_span_groups, span_cm, state, trace_fn
from nemo.lens.state import enabled_span_groups, is_span_group_enabled, set_span_group_spec
from nemo.lens.testing import in_memory_spans, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

pytestmark = [
    pytest.mark.fork,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork()"),
    # Python 3.12+ warns about fork() while threads run; the hammering tests do it on purpose.
    pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning"),
]


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


def ids(span: Any) -> list[int]:
    context = span.get_span_context()
    return [context.trace_id, context.span_id]


def test_child_gets_fresh_unlocked_locks() -> None:
    """The state and registry locks are held across fork and replaced, unlocked, in the child."""
    parent_state_lock, parent_registry_lock = state._lock, SpanRegistry._lock

    def check() -> list[bool]:
        return [
            state._lock is not parent_state_lock,
            not state._lock.locked(),
            SpanRegistry._lock is not parent_registry_lock,
            not SpanRegistry._lock.locked(),
        ]

    assert in_child(check) == [True, True, True, True]
    assert state._lock is parent_state_lock
    assert SpanRegistry._lock is parent_registry_lock
    assert not parent_state_lock.locked()
    assert not parent_registry_lock.locked()


@pytest.fixture
def hammering(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Threads that keep writing span state and the registry until the test ends."""
    # Quiet, because a thread inside a stream write at fork() leaves the stream's buffer
    # lock held in the child: a hazard of fork() with threads that lens cannot remove.
    for name in ("nemo.lens.state", "nemo.lens.groups"):
        caplog.set_level(logging.ERROR, logger=name)
    stop = threading.Event()

    def hammer(index: int) -> None:
        while not stop.is_set():
            SpanRegistry.register(f"churn{index}", [f"g{index}"], allow_override=True)
            set_span_group_spec(f"g{index},missing")
            set_enabled_span_groups(frozenset({"step"}))
            SpanRegistry.unregister(f"churn{index}")

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join(timeout=30)


@pytest.mark.usefixtures("hammering")
def test_fork_while_threads_write_never_deadlocks() -> None:
    """Children forked while other threads are inside the writers can write at once."""

    def write() -> list[Any]:
        SpanRegistry.register("child", ["rollout"], allow_override=True)
        set_span_group_spec("rollout")
        first = is_span_group_enabled("rollout")
        set_enabled_span_groups(frozenset({"job"}))
        return [first, sorted(enabled_span_groups())]

    for _ in range(15):
        assert in_child(write) == [True, ["job"]]


def test_child_inherits_the_gate_and_parents_its_spans() -> None:
    """A child sees the parent's enabled groups, and its nested spans form one chain."""
    set_enabled_span_groups(frozenset({"step", "optimizer"}))

    def trace_in_child() -> dict[str, Any]:
        pipeline = in_memory_spans()

        @trace_fn("optimizer", "opt", tracer=pipeline.tracer)
        def optimizer_step() -> None:
            with managed_span("step", "innermost", tracer=pipeline.tracer):
                pass

        with span_cm("job", tracer=pipeline.tracer):
            with managed_span("step", "step", tracer=pipeline.tracer):
                optimizer_step()
            with managed_span("evaluate", "skipped", tracer=pipeline.tracer) as skipped:
                assert skipped is None
        finished = pipeline.finished()
        name_of = {span.context.span_id: span.name for span in finished}
        return {
            span.name: None if span.parent is None else name_of[span.parent.span_id]
            for span in finished
        }

    assert in_child(trace_in_child) == {
        "job": None,
        "step": "job",
        "opt": "step",
        "innermost": "opt",
    }


def test_child_spans_get_fresh_ids_from_the_sdk_default_generator() -> None:
    """With the SDK's default generator, ids drawn after fork differ between parent and child."""
    set_enabled_span_groups(frozenset({"step"}))
    pipeline = in_memory_spans()

    def draw() -> list[int]:
        with managed_span("step", "s", tracer=pipeline.tracer) as span:
            return ids(span)

    child_ids = in_child(draw)
    assert child_ids != draw()


def test_child_spans_get_fresh_ids_even_after_equal_seeds() -> None:
    """With lens's id generator, `random.seed(s)` in parent and child still gives distinct ids."""
    id_generator = pytest.importorskip("nemo.lens._sdk._ids")
    set_enabled_span_groups(frozenset({"step"}))
    pipeline = in_memory_spans()
    pipeline.provider.id_generator = id_generator.build_id_generator()
    pipeline.tracer = pipeline.provider.get_tracer("lens-tests")  # one that uses it
    saved = random.getstate()

    def draw() -> list[int]:
        random.seed(1234)
        with managed_span("step", "s", tracer=pipeline.tracer) as span:
            return ids(span)

    try:
        first_child, second_child = in_child(draw), in_child(draw)
        parent = draw()
    finally:
        random.setstate(saved)
    assert len({tuple(parent), tuple(first_child), tuple(second_child)}) == 3
