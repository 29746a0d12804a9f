"""The one series key: which attribute sets the cardinality limit and the coalescing buffer
count as one series, as the installed SDK keeps them (issue 22)."""

from __future__ import annotations

import threading
import types
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
    assert _series.known_set({"rank": 0}) is None  # one attribute's index too
    assert _series.known_set({"rank": 2}) is not None
    again = _series.keyed({"rank": 0})
    assert again is not first
    assert again == first == {"rank": 0}
    assert again.series_key == first.series_key


class _Key(str):
    """A str subclass: equal to its str, and hashed alike."""


def test_a_set_keyed_before_is_known_only_for_the_same_types() -> None:
    """`known_set` hands back the copy `keyed` made for an equal set of str keys and str
    or int values, whatever the order; never for a set Python merely finds equal to it
    (True or 1.0 for 1, a str subclass as a key) nor for a mapping that is not a dict:
    `record_metrics` cleans and keys those afresh."""
    _series.follow_sdk(True)  # starts the memory of keyed sets afresh
    assert _series.known_set({"rank": 1, "stage": "a"}) is None
    copied = _series.keyed({"rank": 1, "stage": "a"})
    assert _series.known_set({"stage": "a", "rank": 1}) is copied
    look_alikes: list[dict[Any, object]] = [
        {"rank": True, "stage": "a"},
        {"rank": 1.0, "stage": "a"},
        {_Key("rank"): 1, "stage": "a"},
    ]
    for look_alike in look_alikes:
        assert look_alike == copied
        assert _series.known_set(look_alike) is None
    assert _series.known_set(types.MappingProxyType({"rank": 1, "stage": "a"})) is None
    assert _series.known_set(["rank"]) is None
    # One attribute is found by its item, under the same rule.
    assert _series.known_set({"rank": 1}) is None
    single = _series.keyed({"rank": 1})
    assert _series.known_set({"rank": 1}) is single
    single_look_alikes: list[dict[Any, object]] = [{"rank": True}, {"rank": 1.0}, {_Key("rank"): 1}]
    for single_look_alike in single_look_alikes:
        assert single_look_alike == single
        assert _series.known_set(single_look_alike) is None
    assert _series.known_set(types.MappingProxyType({"rank": 1})) is None


def test_a_set_equal_to_a_known_one_records_what_the_sdk_keeps() -> None:
    """On lens's coalescing meter, {"rank": 1} then {"rank": True} and {"rank": 1.0} (equal
    in Python), call after call: the points and their attribute types are the SDK's own
    for the same calls made by hand."""
    calls: list[tuple[float, dict[str, Any]]] = [
        (1.0, {"rank": 1}),
        (2.0, {"rank": True}),
        (3.0, {"rank": 1.0}),
        (4.0, {"rank": 1}),
    ]

    def typed(points: list[Any]) -> list[tuple[float, list[tuple[str, type, object]]]]:
        return sorted(
            (point.value, sorted((k, type(v), v) for k, v in point.attributes.items()))
            for point in points
        )

    raw = in_memory_metrics()
    try:
        gauge = raw.meter.create_gauge("keys.known")
        for value, attributes in calls:
            gauge.set(value, attributes)
        expected = typed(raw.points("keys.known"))
    finally:
        raw.shutdown()
    with isolated_telemetry():
        register_metric_group("keys_known", [MetricSpec("depth", "keys.known", "gauge")])
        reader = InMemoryMetricReader()
        handle = setup_telemetry(
            NemoLensConfig(enabled=True, traces_enabled=False), metric_reader=reader
        )
        try:
            for value, attributes in calls:
                record_metrics(handle.meter, "keys_known", attributes=attributes, depth=value)
            data = reader.get_metrics_data()
        finally:
            handle.shutdown()
    assert data is not None
    metrics = [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    points = [p for m in metrics if m.name == "keys.known" for p in m.data.data_points]
    assert typed(points) == expected


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
