"""The one series key: which attribute sets the cardinality limit and the coalescing buffer
count as one series, as the installed SDK keeps them (issue 22)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nemo.lens import (
    MetricSpec,
    NemoLensConfig,
    record_metrics,
    register_metric_group,
    setup_telemetry,
)
from nemo.lens.instruments import _series
from nemo.lens.testing import in_memory_metrics, isolated_telemetry


@pytest.fixture(autouse=True)
def _keep_the_rule() -> Iterator[None]:
    """Put back the series key a test (or the setup it ran) chose."""
    rule = _series.series_key
    yield
    _series.series_key = rule


def sdk_keeps_1_and_true_apart() -> bool:
    """Asked of the installed SDK itself: are `{"k": 1}` and `{"k": True}` two series?"""
    raw = in_memory_metrics()
    try:
        counter = raw.meter.create_counter("keys.raw")
        counter.add(1, {"k": 1})
        counter.add(1, {"k": True})
        return len(raw.points("keys.raw")) == 2
    finally:
        raw.shutdown()


def test_each_rule_merges_or_keeps_apart_what_python_finds_equal() -> None:
    """The plain key merges 1, True and 1.0, as SDKs up to 1.30 do; the typed key keeps
    them apart (in tuples too), as 1.45 does; both ignore key order."""
    plain, typed = _series.plain_series_key, _series.typed_series_key
    assert plain({"a": 1}) == plain({"a": True}) == plain({"a": 1.0})
    assert len({typed({"a": 1}), typed({"a": True}), typed({"a": 1.0})}) == 3
    assert typed({"t": (1, 2)}) != typed({"t": (1.0, 2.0)})
    assert typed({"t": ()}) == typed({"t": ()}) != typed({"t": ""})
    assert typed({"a": 1, "b": "x"}) == typed({"b": "x", "a": 1}) == plain({"a": 1, "b": "x"})


def test_setup_makes_the_key_follow_the_installed_sdk() -> None:
    """After setup_telemetry, lens keys series by type exactly when the SDK does."""
    _series.follow_sdk(not sdk_keeps_1_and_true_apart())  # the wrong rule, on purpose
    with isolated_telemetry():
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False),
            metric_reader=InMemoryMetricReader(),
        )
        handle.shutdown()
    expected = (
        _series.typed_series_key if sdk_keeps_1_and_true_apart() else _series.plain_series_key
    )
    assert _series.series_key is expected


@pytest.mark.parametrize("keyed_by_type", [True, False], ids=["typed", "plain"])
def test_keyed_copies_the_attributes_with_the_rule_in_force(keyed_by_type: bool) -> None:
    """A keyed copy is a dict equal to the attributes, unaffected by later changes to them,
    carrying the key of the rule in force."""
    _series.follow_sdk(keyed_by_type)
    attributes: dict[str, object] = {"a": True, "b": "x"}
    copied = _series.keyed(attributes)
    attributes["a"] = 2
    assert isinstance(copied, dict)
    assert copied == {"a": True, "b": "x"}
    rule = _series.typed_series_key if keyed_by_type else _series.plain_series_key
    assert copied.series_key == rule({"a": True, "b": "x"})


def test_a_series_shares_one_keyed_copy_and_the_memory_of_them_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every call keying the attributes of one series gets the one copy made for it (no
    copy per call, one key object for every dict keyed by it) where its values are strs
    and ints; other series, 1 and True under the typed rule among them, get their own;
    past the bound the memory of them starts afresh, and what it hands out is still
    right."""
    _series.follow_sdk(True)
    monkeypatch.setattr(_series, "_KNOWN_SETS_MAX", 3)
    first = _series.keyed({"rank": 0})
    assert _series.keyed({"rank": 0}) is first
    assert _series.keyed({"rank": 1}) is not first
    assert _series.keyed({"rank": True}) is not first
    assert _series.keyed({"rank": 0}) is first
    # Other values stay copies per call: equal keys may hold other values (0.0, -0.0).
    assert _series.keyed({"loss": 0.0}) is not _series.keyed({"loss": 0.0})
    assert _series.keyed({"rank": True}) is not _series.keyed({"rank": True})
    assert len(_series._known_sets) == 2
    _series.keyed({"stage": "a", "rank": 3})
    assert len(_series._known_sets) == 3
    _series.keyed({"rank": 2})  # the fourth: the memory starts afresh with it
    assert len(_series._known_sets) == 1
    again = _series.keyed({"rank": 0})
    assert again is not first
    assert again == first == {"rank": 0}
    assert again.series_key == first.series_key


def test_an_unhashable_set_gets_no_key_and_never_raises() -> None:
    """Defensively (cleaned attributes are hashable): a list value gives the key None."""
    assert _series.keyed({"ids": [1, 2]}).series_key is None


def test_threads_recording_their_own_attribute_sets_keep_their_own_series() -> None:
    """8 threads, each with its own attributes, recording at once on lens's coalescing
    meter: every thread's gauge and sum land on its own series, none on another's."""
    threads_n, steps = 8, 300
    with isolated_telemetry():
        register_metric_group(
            "keys",
            [MetricSpec("depth", "keys.depth", "gauge"), MetricSpec("n", "keys.n", "counter")],
        )
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
        )
        start = threading.Barrier(threads_n)

        def work(thread: int) -> None:
            attributes = {"thread": thread}
            start.wait(10)
            for step in range(steps):
                record_metrics(
                    handle.meter,
                    "keys",
                    depth=thread * 1000 + step,
                    n=thread,
                    attributes=attributes,
                )

        workers = [threading.Thread(target=work, args=(index,)) for index in range(threads_n)]
        try:
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
            data: Any = reader.get_metrics_data()
        finally:
            handle.shutdown()
    found = {
        metric.name: {point.attributes["thread"]: point.value for point in metric.data.data_points}
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert found["keys.depth"] == {thread: thread * 1000 + steps - 1 for thread in range(threads_n)}
    assert found["keys.n"] == {thread: thread * steps for thread in range(threads_n)}
