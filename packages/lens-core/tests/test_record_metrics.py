"""record_metrics records what it can, skips what it cannot, and never raises."""

from __future__ import annotations

import enum
import gc
import logging
import math
import weakref
from fractions import Fraction
from typing import Any

import pytest
from lens_meters import CountingMeter, FailingCreateMeter, FailingEmitMeter
from opentelemetry.metrics import NoOpMeter
from opentelemetry.metrics._internal import _ProxyMeterProvider

from nemo.lens import (
    MetricSpec,
    _warn_once,
    record_metrics,
    register_metric_group,
    unregister_metric_group,
)
from nemo.lens.instruments import _record as record_module
from nemo.lens.instruments import _registry
from nemo.lens.testing import InMemoryMetrics, in_memory_metrics

RL_SPECS = [
    MetricSpec("reward_mean", "rl.reward.mean", "gauge"),
    MetricSpec("generation_duration_ms", "rl.generation.duration_ms", "histogram", unit="ms"),
    MetricSpec("tokens", "rl.tokens", "counter", unit="{token}"),
    MetricSpec("queue_depth", "rl.queue.depth", "up_down_counter"),
]


def warnings_from(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Return the WARNING messages lens logged."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and record.name.startswith("nemo.lens")
    ]


def value_of(pipeline: InMemoryMetrics, name: str) -> Any:
    """Return the single point's value (gauge/sum) or (count, sum) for a histogram."""
    (point,) = pipeline.points(name)
    if hasattr(point, "bucket_counts"):
        return point.count, point.sum
    return point.value


@pytest.fixture
def rl(pipeline: InMemoryMetrics) -> InMemoryMetrics:
    """The pipeline with the 'rl' group registered."""
    register_metric_group("rl", RL_SPECS)
    return pipeline


def test_issue_example_exports_gauge_and_ms_histogram(pipeline: InMemoryMetrics) -> None:
    """The usage example exports rl.reward.mean = 0.85 and an ms histogram."""
    register_metric_group(
        "rl",
        [
            MetricSpec("reward_mean", "rl.reward.mean", "gauge"),
            MetricSpec(
                "generation_duration_ms", "rl.generation.duration_ms", "histogram", unit="ms"
            ),
        ],
    )
    record_metrics(pipeline.meter, "rl", reward_mean=0.85, generation_duration_ms=120.0)
    metrics = pipeline.metrics()
    assert value_of(pipeline, "rl.reward.mean") == 0.85
    assert metrics["rl.generation.duration_ms"].unit == "ms"
    assert value_of(pipeline, "rl.generation.duration_ms") == (1, 120.0)


def test_every_kind_records(rl: InMemoryMetrics) -> None:
    """Gauges set, histograms record, counters and up-down counters add."""
    for _ in range(2):
        record_metrics(
            rl.meter, "rl", reward_mean=0.5, generation_duration_ms=10, tokens=7, queue_depth=-3
        )
    assert value_of(rl, "rl.reward.mean") == 0.5
    assert value_of(rl, "rl.generation.duration_ms") == (2, 20)
    assert value_of(rl, "rl.tokens") == 14
    assert value_of(rl, "rl.queue.depth") == -6


def test_mapping_and_keywords_merge_keywords_winning(rl: InMemoryMetrics) -> None:
    """The values mapping and keyword values merge; a keyword wins over the mapping."""
    record_metrics(rl.meter, "rl", {"reward_mean": 1.0, "tokens": 3}, reward_mean=2.0)
    assert value_of(rl, "rl.reward.mean") == 2.0
    assert value_of(rl, "rl.tokens") == 3


def test_values_mapping_alone_records_and_is_not_mutated(rl: InMemoryMetrics) -> None:
    """A plain mapping records every key and is left unchanged."""
    values = {"reward_mean": 0.25, "tokens": 4}
    record_metrics(rl.meter, "rl", values)
    assert values == {"reward_mean": 0.25, "tokens": 4}
    assert value_of(rl, "rl.reward.mean") == 0.25
    assert value_of(rl, "rl.tokens") == 4


def test_none_values_are_skipped_silently(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """None records nothing and logs nothing, even for an undeclared key."""
    record_metrics(rl.meter, "rl", {"tokens": None}, reward_mean=None, undeclared=None)
    assert rl.metrics() == {}
    assert warnings_from(caplog) == []


def test_keys_named_like_the_positional_parameters(pipeline: InMemoryMetrics) -> None:
    """Keys called meter, group and values record as keyword arguments."""
    register_metric_group(
        "odd",
        [
            MetricSpec("meter", "odd.meter"),
            MetricSpec("group", "odd.group"),
            MetricSpec("values", "odd.values"),
        ],
    )
    record_metrics(pipeline.meter, "odd", meter=1.0, group=2.0, values=3.0)
    assert [value_of(pipeline, f"odd.{k}") for k in ("meter", "group", "values")] == [1, 2, 3]


def test_attributes_apply_to_every_point_of_the_call(rl: InMemoryMetrics) -> None:
    """Each point of the call carries the attributes; one point per attribute set."""
    record_metrics(rl.meter, "rl", attributes={"rank": 0}, reward_mean=1.0, tokens=1)
    record_metrics(rl.meter, "rl", attributes={"rank": 1}, reward_mean=2.0, tokens=5)
    record_metrics(rl.meter, "rl", attributes={"rank": 1}, reward_mean=3.0)
    gauge = {p.attributes["rank"]: p.value for p in rl.points("rl.reward.mean")}
    tokens = {p.attributes["rank"]: p.value for p in rl.points("rl.tokens")}
    assert gauge == {0: 1.0, 1: 3.0}  # the gauge keeps the last value
    assert tokens == {0: 1, 1: 5}


def test_only_recorded_keys_create_series(rl: InMemoryMetrics) -> None:
    """A declared key never recorded creates no instrument and no series."""
    counting = CountingMeter(rl.meter)
    record_metrics(counting, "rl", reward_mean=1.0)
    assert set(rl.metrics()) == {"rl.reward.mean"}
    assert dict(counting.creates) == {"rl.reward.mean": 1}


def test_instruments_are_created_once_per_meter(rl: InMemoryMetrics) -> None:
    """Repeated records reuse the instrument; a second meter gets its own."""
    first, second = CountingMeter(rl.meter), CountingMeter(rl.meter)
    for step in range(5):
        record_metrics(first, "rl", reward_mean=step, tokens=1)
        record_metrics(second, "rl", tokens=1)
    assert dict(first.creates) == {"rl.reward.mean": 1, "rl.tokens": 1}
    assert dict(second.creates) == {"rl.tokens": 1}
    assert value_of(rl, "rl.tokens") == 10


def test_meters_are_held_weakly(rl: InMemoryMetrics) -> None:
    """The registry does not keep a meter alive, and forgets it once it is gone."""
    meter = CountingMeter(rl.meter)
    record_metrics(meter, "rl", reward_mean=1.0)
    meter_ref = weakref.ref(meter)
    group = _registry.GROUPS["rl"]
    assert id(meter) in group.meters
    del meter
    gc.collect()
    assert meter_ref() is None
    assert group.meters == {}


def test_unknown_group_warns_once_and_records_nothing(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """An unregistered group warns once per group and records nothing."""
    for _ in range(3):
        record_metrics(pipeline.meter, "missing", x=1.0)
        record_metrics(pipeline.meter, "absent", x=1.0)
    messages = warnings_from(caplog)
    assert len(messages) == 2
    assert "'missing' is not registered" in messages[0]
    assert pipeline.metrics() == {}


@pytest.mark.parametrize("group", [None, 3, ("a",), ["unhashable"], {"a": 1}])
def test_non_string_groups_warn_once(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture, group: Any
) -> None:
    """A non-string or unhashable group warns once and never raises."""
    for _ in range(3):
        record_metrics(pipeline.meter, group, x=1.0)
    assert len(warnings_from(caplog)) == 1
    assert "is not registered" in warnings_from(caplog)[0]


def test_unknown_key_warns_once_per_key_and_others_record(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """An undeclared key warns once per (group, key); declared keys in the call still record."""
    for _ in range(3):
        record_metrics(rl.meter, "rl", reward_mean=1.0, typo=2.0, other_typo=3.0)
    messages = warnings_from(caplog)
    assert len(messages) == 2
    assert "key 'typo' is not declared in group 'rl'" in messages[0]
    assert value_of(rl, "rl.reward.mean") == 1.0


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (True, "bool"),
        (math.nan, "not finite"),
        (math.inf, "not finite"),
        (-math.inf, "not finite"),
        ("1.0", "not a real number"),
        (1j, "not a real number"),
        (object(), "not a real number"),
        (10**400, "too large"),
        ([1.0], "not a real number"),
    ],
)
def test_bad_values_are_skipped_with_one_warning(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, bad: object, reason: str
) -> None:
    """A bad value skips only its key, with one warning per (group, key)."""
    for _ in range(3):
        record_metrics(rl.meter, "rl", reward_mean=bad, tokens=2)
    messages = warnings_from(caplog)
    assert len(messages) == 1
    assert "key 'reward_mean'" in messages[0]
    assert reason in messages[0]
    assert "rl.reward.mean" not in rl.metrics()
    assert value_of(rl, "rl.tokens") == 6


class Rational(Fraction):
    """A numbers.Real that is neither int nor float."""


class BigInt(int):
    """An int subclass."""


def test_other_real_numbers_reach_the_sdk_as_int_or_float(rl: InMemoryMetrics) -> None:
    """numbers.Real values arrive as float, integral ones as int."""
    record_metrics(rl.meter, "rl", reward_mean=Rational(1, 4), tokens=BigInt(3))
    (gauge,) = rl.points("rl.reward.mean")
    (tokens,) = rl.points("rl.tokens")
    assert (gauge.value, type(gauge.value)) == (0.25, float)
    assert (tokens.value, type(tokens.value)) == (3, int)


def test_largest_float_sized_int_records(rl: InMemoryMetrics) -> None:
    """An int that still fits a float is recorded."""
    record_metrics(rl.meter, "rl", queue_depth=2**1000)
    assert value_of(rl, "rl.queue.depth") == 2**1000


@pytest.mark.parametrize("key", ["tokens", "generation_duration_ms"])
def test_negative_values_for_counters_and_histograms_are_skipped(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, key: str
) -> None:
    """Counters and histograms refuse negative values with one warning; gauges take them."""
    record_metrics(rl.meter, "rl", {key: -1}, reward_mean=-0.5, queue_depth=-1)
    record_metrics(rl.meter, "rl", {key: -2.0})
    assert len(warnings_from(caplog)) == 1
    assert ">= 0" in warnings_from(caplog)[0]
    assert set(rl.metrics()) == {"rl.reward.mean", "rl.queue.depth"}


@pytest.mark.parametrize("values", [[("reward_mean", 1.0)], "reward_mean", 3, object()])
def test_non_mapping_values_are_ignored_and_keywords_record(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, values: object
) -> None:
    """A values argument that is not a mapping warns once; keyword values still record."""
    for _ in range(2):
        record_metrics(rl.meter, "rl", values, tokens=1)  # type: ignore[arg-type]
    assert len(warnings_from(caplog)) == 1
    assert "must be a mapping" in warnings_from(caplog)[0]
    assert value_of(rl, "rl.tokens") == 2


def test_non_string_keys_are_skipped_and_string_keys_record(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Non-string keys in values warn once per group; the string keys still record."""
    for _ in range(2):
        record_metrics(rl.meter, "rl", {1: 2.0, ("t",): 3.0, "reward_mean": 0.5})  # type: ignore[dict-item]
    assert len(warnings_from(caplog)) == 1
    assert "non-string key" in warnings_from(caplog)[0]
    assert value_of(rl, "rl.reward.mean") == 0.5


class ExplodingMapping(dict):  # type: ignore[type-arg]
    """A mapping whose items() fails half way."""

    def items(self) -> Any:
        yield "reward_mean", 0.75
        raise RuntimeError("storage went away")


def test_a_mapping_that_fails_while_read_keeps_what_was_read(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Keys read before a mapping fails still record, with one warning."""
    from types import MappingProxyType

    record_metrics(rl.meter, "rl", MappingProxyType(ExplodingMapping()), tokens=1)
    assert value_of(rl, "rl.tokens") == 1
    assert value_of(rl, "rl.reward.mean") == 0.75
    assert len(warnings_from(caplog)) == 1
    assert "could not be read fully" in warnings_from(caplog)[0]


@pytest.mark.parametrize(
    "attributes",
    [
        {1: "x", "rank": 0},
        {"": "x", "rank": 0},
        {"nested": {"a": 1}, "rank": 0},
        {"none": None, "rank": 0},
        {"mixed": [1, "a"], "rank": 0},
        {"with_none": [1, None], "rank": 0},
        {"bytes": b"x", "rank": 0},
    ],
)
def test_malformed_attribute_entries_are_dropped_but_the_point_kept(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, attributes: dict[Any, Any]
) -> None:
    """A bad attribute entry is dropped with one warning per group; the value still records."""
    for _ in range(2):
        record_metrics(rl.meter, "rl", attributes=attributes, reward_mean=1.0)
    (point,) = rl.points("rl.reward.mean")
    assert dict(point.attributes) == {"rank": 0}
    assert len(warnings_from(caplog)) == 1
    assert "were dropped" in warnings_from(caplog)[0]


class Backend(str, enum.Enum):
    """A string enum, as frameworks use for attribute values."""

    VLLM = "vllm"


class Rank(int):
    """An int subclass."""


class Key(str):
    """A str subclass."""


def test_attributes_of_scalar_subclasses_are_kept(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A str-subclass key and enum or int-subclass values are carried, as the SDK carries them."""
    attributes = {Key("backend"): Backend.VLLM, "rank": Rank(1)}
    record_metrics(rl.meter, "rl", attributes=attributes, tokens=1)
    (point,) = rl.points("rl.tokens")
    assert dict(point.attributes) == {"backend": "vllm", "rank": 1}
    assert warnings_from(caplog) == []


def test_sequence_attributes_are_kept_as_tuples(rl: InMemoryMetrics) -> None:
    """Homogeneous lists and tuples of scalars are accepted."""
    record_metrics(rl.meter, "rl", attributes={"ranks": [0, 1], "tags": ("a",)}, tokens=1)
    (point,) = rl.points("rl.tokens")
    assert dict(point.attributes) == {"ranks": (0, 1), "tags": ("a",)}


@pytest.mark.parametrize("attributes", [[("rank", 0)], "rank=0", 5])
def test_non_mapping_attributes_are_ignored(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, attributes: object
) -> None:
    """Attributes that are not a mapping are ignored with one warning; the point records."""
    record_metrics(rl.meter, "rl", attributes=attributes, reward_mean=1.0)  # type: ignore[arg-type]
    record_metrics(rl.meter, "rl", attributes=attributes, reward_mean=2.0)  # type: ignore[arg-type]
    (point,) = rl.points("rl.reward.mean")
    assert (dict(point.attributes or {}), point.value) == ({}, 2.0)
    assert len(warnings_from(caplog)) == 1


def test_mapping_attributes_other_than_dict_are_accepted(rl: InMemoryMetrics) -> None:
    """Any Mapping works as attributes."""
    from types import MappingProxyType

    record_metrics(rl.meter, "rl", attributes=MappingProxyType({"rank": 3}), tokens=1)
    (point,) = rl.points("rl.tokens")
    assert dict(point.attributes) == {"rank": 3}


class Unhashable:
    """Has no hash and no meter methods."""

    __hash__ = None  # type: ignore[assignment]


class Hostile:
    """Raises on every attribute access."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} for you")


@pytest.mark.parametrize(
    "make_meter",
    [lambda: None, object, lambda: 42, Unhashable, Hostile],
    ids=["None", "object", "int", "Unhashable", "Hostile"],
)
def test_unusable_meters_warn_once_and_record_nothing(
    caplog: pytest.LogCaptureFixture, make_meter: Any
) -> None:
    """A meter that cannot be held or has no create methods warns once; nothing records."""
    register_metric_group("rl", RL_SPECS)
    meter = make_meter()
    for _ in range(3):
        record_metrics(meter, "rl", reward_mean=1.0)
    messages = warnings_from(caplog)
    assert len(messages) == 1
    assert "cannot be used as a meter" in messages[0]
    assert _registry.GROUPS["rl"].meters == {}


def test_a_failed_create_costs_only_its_key_and_is_remembered(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A create that raises skips that key (once tried, once warned); other keys record."""
    meter = FailingCreateMeter(rl.meter, "create_histogram")
    for _ in range(3):
        record_metrics(meter, "rl", generation_duration_ms=5.0, tokens=1)
    assert meter.creates["rl.generation.duration_ms"] == 1
    assert value_of(rl, "rl.tokens") == 3
    assert len(warnings_from(caplog)) == 1
    assert "creating histogram 'rl.generation.duration_ms'" in warnings_from(caplog)[0]


def test_reregistering_retries_a_failed_create(rl: InMemoryMetrics) -> None:
    """After the group is registered again, a create that failed is tried again."""
    meter = FailingCreateMeter(rl.meter, "create_histogram")
    record_metrics(meter, "rl", generation_duration_ms=5.0)
    register_metric_group("rl", RL_SPECS, allow_override=True)
    record_metrics(meter, "rl", generation_duration_ms=5.0)
    assert meter.creates["rl.generation.duration_ms"] == 2


def test_a_failed_emit_costs_only_its_value(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """An instrument that raises on record warns once; the other keys still record."""
    meter = FailingEmitMeter(rl.meter, "rl.reward.mean", ValueError("bad point"))
    for _ in range(3):
        record_metrics(meter, "rl", reward_mean=1.0, tokens=1)
    assert value_of(rl, "rl.tokens") == 3
    assert len(warnings_from(caplog)) == 1
    assert "ValueError: bad point" in warnings_from(caplog)[0]


def test_base_exceptions_still_propagate(rl: InMemoryMetrics) -> None:
    """KeyboardInterrupt raised inside a record reaches the caller."""
    meter = FailingEmitMeter(rl.meter, "rl.reward.mean", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        record_metrics(meter, "rl", reward_mean=1.0)


def test_noop_meter_returns_before_any_lookup(caplog: pytest.LogCaptureFixture) -> None:
    """The API's no-op meter returns at once: not even an unknown group is looked up."""
    record_metrics(NoOpMeter("x"), "never-registered", x=1.0)
    assert warnings_from(caplog) == []


def test_proxy_meter_is_silent_until_an_sdk_provider_arrives(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy meter with no SDK behind it creates nothing; once one is set, it records."""
    proxy_provider = _ProxyMeterProvider()
    proxy_meter = proxy_provider.get_meter("late")
    record_metrics(proxy_meter, "rl", reward_mean=1.0)
    record_metrics(proxy_meter, "unknown-group", x=1.0)
    assert _registry.GROUPS["rl"].meters == {}
    assert warnings_from(caplog) == []
    proxy_provider.on_set_meter_provider(rl.provider)
    record_metrics(proxy_meter, "rl", reward_mean=2.0)
    assert value_of(rl, "rl.reward.mean") == 2.0


def test_proxy_meter_behind_a_noop_provider_stays_silent(caplog: pytest.LogCaptureFixture) -> None:
    """A proxy whose real provider is the API's no-op provider records nothing."""
    from opentelemetry.metrics import NoOpMeterProvider

    proxy_provider = _ProxyMeterProvider()
    proxy_meter = proxy_provider.get_meter("noop")
    proxy_provider.on_set_meter_provider(NoOpMeterProvider())
    record_metrics(proxy_meter, "never-registered", x=1.0)
    assert warnings_from(caplog) == []


def test_override_uses_the_new_definition(rl: InMemoryMetrics) -> None:
    """After an override, the key records into an instrument of the new definition."""
    meter = CountingMeter(rl.meter)
    record_metrics(meter, "rl", reward_mean=1.0)
    register_metric_group(
        "rl", [MetricSpec("reward_mean", "rl.reward.v2", "counter")], allow_override=True
    )
    record_metrics(meter, "rl", reward_mean=4)
    assert value_of(rl, "rl.reward.v2") == 4
    assert value_of(rl, "rl.reward.mean") == 1.0
    assert dict(meter.creates) == {"rl.reward.mean": 1, "rl.reward.v2": 1}


def test_override_restarts_warning_memory(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A redefined group may warn afresh about the same problem."""
    record_metrics(rl.meter, "rl", typo=1.0)
    register_metric_group("rl", RL_SPECS, allow_override=True)
    record_metrics(rl.meter, "rl", typo=1.0)
    assert len(warnings_from(caplog)) == 2


def test_unregistered_group_stops_recording(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """After unregister_metric_group, recording the group warns and records nothing more."""
    record_metrics(rl.meter, "rl", tokens=1)
    unregister_metric_group("rl")
    record_metrics(rl.meter, "rl", tokens=1)
    assert value_of(rl, "rl.tokens") == 1
    assert "'rl' is not registered" in warnings_from(caplog)[0]


def test_warning_memory_is_capped_with_one_final_line(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the cap, one line says further warnings are suppressed, then silence."""
    cap = _warn_once.DEFAULT_CAP
    for index in range(cap + 20):
        record_metrics(rl.meter, "rl", {f"typo_{index}": 1.0})
    messages = warnings_from(caplog)
    assert len(messages) == cap + 1
    assert "group 'rl' reached" in messages[-1]
    assert "further warnings are suppressed" in messages[-1]
    record_metrics(rl.meter, "rl", reward_mean=1.0)
    assert value_of(rl, "rl.reward.mean") == 1.0


def test_internal_defect_is_contained(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a defect inside lens's own code is logged once instead of raised."""
    group = _registry.GROUPS["rl"]
    monkeypatch.setattr(group, "meters", None)  # what a corrupted cache would look like
    for _ in range(2):
        record_metrics(rl.meter, "rl", tokens=1)
    messages = warnings_from(caplog)
    assert len(messages) == 1
    assert "unexpected AttributeError" in messages[0]


def test_none_for_a_key_already_recorded_is_skipped_silently(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """After a key's instrument exists, None still records nothing and logs nothing."""
    record_metrics(rl.meter, "rl", tokens=2)
    record_metrics(rl.meter, "rl", tokens=None)
    assert value_of(rl, "rl.tokens") == 2
    assert warnings_from(caplog) == []


class BadRepr:
    """Neither a number nor printable."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_value_whose_repr_fails_is_still_reported(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning names the value's type when its repr raises."""
    record_metrics(rl.meter, "rl", reward_mean=BadRepr(), tokens=1)
    assert value_of(rl, "rl.tokens") == 1
    (message,) = warnings_from(caplog)
    assert "<BadRepr with a failing repr>" in message


class UnconvertibleReal(Fraction):
    """A numbers.Real whose float conversion fails."""

    def __float__(self) -> float:
        raise ArithmeticError("cannot convert")


def test_a_real_number_that_fails_to_convert_is_skipped(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A Real whose conversion raises skips its key with one warning naming the failure."""
    record_metrics(rl.meter, "rl", reward_mean=UnconvertibleReal(1, 3), tokens=1)
    assert "rl.reward.mean" not in rl.metrics()
    (message,) = warnings_from(caplog)
    assert "converting it failed (ArithmeticError)" in message


class BareObject:
    """Can be held weakly, but is no meter."""


@pytest.mark.parametrize(
    ("make_meter", "reason"),
    [
        (object, "cannot be held weakly"),
        (BareObject, "lacks the create_counter/create_gauge/create_histogram methods"),
        (Hostile, "looking up its create methods failed (RuntimeError"),
    ],
    ids=["object", "BareObject", "Hostile"],
)
def test_unusable_meter_warnings_say_why(
    caplog: pytest.LogCaptureFixture, make_meter: Any, reason: str
) -> None:
    """The warning for an unusable meter names what is wrong with it."""
    register_metric_group("rl", RL_SPECS)
    record_metrics(make_meter(), "rl", reward_mean=1.0)
    (message,) = warnings_from(caplog)
    assert reason in message


class UnreadableMapping(dict):  # type: ignore[type-arg]
    """A mapping whose items() raises at once."""

    def items(self) -> Any:
        raise RuntimeError("gone")


def test_unreadable_attributes_are_dropped_and_the_point_kept(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Attributes that cannot be read are dropped with one warning; the value records."""
    from types import MappingProxyType

    record_metrics(rl.meter, "rl", attributes=MappingProxyType(UnreadableMapping()), tokens=1)
    (point,) = rl.points("rl.tokens")
    assert (dict(point.attributes or {}), point.value) == ({}, 1)
    (message,) = warnings_from(caplog)
    assert "<unreadable mapping>" in message


def test_after_fork_handler_retires_every_cached_instrument(
    rl: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """The child-side fork handler stops recording on known meters; new meters still record.

    (The real fork is in test_record_concurrency; calling the handler here shows its effect
    in-process.)
    """
    record_metrics(rl.meter, "rl", tokens=1)
    _registry._drop_inherited_instruments()
    for _ in range(2):
        record_metrics(rl.meter, "rl", tokens=5, reward_mean=1.0)
    assert value_of(rl, "rl.tokens") == 1
    assert "rl.reward.mean" not in rl.metrics()
    (message,) = warnings_from(caplog)
    assert "forked from one that had this meter's provider" in message
    assert "group 'rl' is not recorded" in message
    fresh = in_memory_metrics()
    record_metrics(fresh.meter, "rl", tokens=3)
    assert [p.value for p in fresh.points("rl.tokens")] == [3]
    fresh.shutdown()


class _UnhashableText(str):
    """A str subclass whose hash raises, as a broken enum or wrapper type might."""

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


def test_an_attribute_whose_hash_fails_costs_no_value(rl: InMemoryMetrics) -> None:
    """Attribute values reach the SDK as plain str, so a failing __hash__ on the caller's
    object cannot make the SDK's aggregation drop the call's values."""
    record_metrics(
        rl.meter,
        "rl",
        reward_mean=0.5,
        tokens=3,
        attributes={"role": _UnhashableText("policy"), "node": "n1"},
    )
    assert value_of(rl, "rl.reward.mean") == 0.5
    assert value_of(rl, "rl.tokens") == 3
    (point,) = rl.points("rl.reward.mean")
    assert dict(point.attributes) == {"role": "policy", "node": "n1"}


# --- histogram buckets ------------------------------------------------------------------

BUCKETED_SPECS = [
    MetricSpec("step_ms", "trainer.step.duration", "histogram", unit="ms", buckets=(1, 10, 100)),
    MetricSpec("loss", "trainer.loss", "gauge"),
]


class OldSignatureMeter:
    """A meter wrapper written against the pre-1.30 API: create_histogram takes no advisory."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._real, attribute)

    def create_histogram(self, name: str, unit: str = "", description: str = "") -> Any:
        return self._real.create_histogram(name, unit=unit, description=description)


def test_a_bucketed_histogram_records_without_warnings(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A histogram with buckets records each value, with no warning, on any API release."""
    register_metric_group("trainer", BUCKETED_SPECS)
    counting = CountingMeter(pipeline.meter)
    with caplog.at_level(logging.WARNING):
        for step in range(3):
            record_metrics(counting, "trainer", step_ms=5 + step, loss=0.5)
    assert value_of(pipeline, "trainer.step.duration") == (3, 18)
    assert counting.creates["trainer.step.duration"] == 1
    assert warnings_from(caplog) == []


@pytest.mark.skipif(
    not record_module.API_HAS_BUCKET_ADVISORY, reason="the API has no advisory boundaries"
)
def test_a_meter_refusing_the_advisory_still_records_the_histogram_and_warns_once(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """A meter whose create_histogram rejects the advisory keeps the key, default buckets."""
    register_metric_group("trainer", BUCKETED_SPECS)
    meter = OldSignatureMeter(pipeline.meter)
    with caplog.at_level(logging.WARNING):
        record_metrics(meter, "trainer", step_ms=5, loss=0.5)
        record_metrics(meter, "trainer", step_ms=7, loss=0.5)
    (point,) = pipeline.points("trainer.step.duration")
    assert (point.count, point.sum) == (2, 12)
    assert tuple(point.explicit_bounds) != (1.0, 10.0, 100.0)
    (message,) = warnings_from(caplog)
    assert "rejected the buckets of key 'step_ms' of group 'trainer'" in message
    assert "default boundaries" in message
