"""MetricSpec validates every field when it is built."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import pytest

from nemo.lens import MetricSpec
from nemo.lens.errors import LensError


def test_defaults_and_positional_fields() -> None:
    """The first three fields are positional; kind defaults to gauge, unit and description to ''."""
    spec = MetricSpec("reward_mean", "rl.reward.mean")
    assert (spec.key, spec.name, spec.kind, spec.unit, spec.description) == (
        "reward_mean",
        "rl.reward.mean",
        "gauge",
        "",
        "",
    )
    assert MetricSpec("t", "rl.t", "histogram", unit="ms").kind == "histogram"


def test_is_frozen_and_hashable() -> None:
    """A spec cannot be changed after construction and can sit in sets."""
    spec = MetricSpec("loss", "train.loss")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    assert {spec, MetricSpec("loss", "train.loss")} == {spec}


@pytest.mark.parametrize("kind", ["gauge", "counter", "up_down_counter", "histogram"])
def test_accepts_every_kind(kind: str) -> None:
    """Each of the four kinds is accepted."""
    assert MetricSpec("k", "n", kind).kind == kind


@pytest.mark.parametrize(
    "name",
    ["a", "rl.reward.mean", "A_b-c/d.e", "x" * 255, "gen_ai.client.token.usage"],
)
def test_accepts_valid_instrument_names(name: str) -> None:
    """Names following the OpenTelemetry instrument-name syntax are accepted."""
    assert MetricSpec("k", name).name == name


@pytest.mark.parametrize(
    "name", ["", "1abc", "_abc", ".abc", "has space", "ümlaut", "a" * 256, "a\n", "a:b"]
)
def test_refuses_invalid_instrument_names(name: str) -> None:
    """A name outside the instrument-name syntax is refused, naming the field and the rule."""
    with pytest.raises(ValueError, match=r"MetricSpec\.name") as info:
        MetricSpec("k", name)
    assert "ASCII letter" in str(info.value)
    assert isinstance(info.value, LensError)


@pytest.mark.parametrize("key", ["", "1a", "a-b", "a.b", "with space"])
def test_refuses_non_identifier_keys(key: str) -> None:
    """A key that is not a Python identifier is refused, naming the field and the value."""
    with pytest.raises(ValueError, match=r"MetricSpec\.key") as info:
        MetricSpec(key, "n")
    assert repr(key) in str(info.value)
    assert "identifier" in str(info.value)


def test_refuses_reserved_attributes_key() -> None:
    """The key 'attributes' is reserved by record_metrics."""
    with pytest.raises(ValueError, match="reserved"):
        MetricSpec("attributes", "n")


@pytest.mark.parametrize("key", ["meter", "group", "values"])
def test_positional_parameter_names_are_valid_keys(key: str) -> None:
    """meter, group and values are ordinary keys, since record_metrics takes them positionally."""
    assert MetricSpec(key, "n").key == key


def test_refuses_unknown_kind_listing_all_four() -> None:
    """An unknown kind is refused, and the message lists the four accepted kinds."""
    with pytest.raises(ValueError, match=r"MetricSpec\.kind 'summary'") as info:
        MetricSpec("k", "n", "summary")
    for kind in ("counter", "gauge", "histogram", "up_down_counter"):
        assert kind in str(info.value)


@pytest.mark.parametrize("unit", ["µs", "x" * 64])
def test_refuses_bad_units(unit: str) -> None:
    """A non-ASCII unit or one over 63 characters is refused."""
    with pytest.raises(ValueError, match=r"MetricSpec\.unit"):
        MetricSpec("k", "n", unit=unit)


def test_accepts_longest_ascii_unit() -> None:
    """A 63-character ASCII unit is accepted."""
    assert MetricSpec("k", "n", unit="u" * 63).unit == "u" * 63


@pytest.mark.parametrize("field", ["key", "name", "kind", "unit", "description"])
def test_refuses_non_string_fields_with_type_error(field: str) -> None:
    """Each field must be a str; anything else is a TypeError naming the field."""
    arguments: dict[str, object] = {"key": "k", "name": "n", field: 3}
    with pytest.raises(TypeError, match=rf"MetricSpec\.{field} must be a str"):
        MetricSpec(**arguments)  # type: ignore[arg-type]


def test_a_description_that_cannot_be_encoded_is_refused() -> None:
    """A lone surrogate in the description (os.fsdecode of bad bytes) fails at declaration."""
    with pytest.raises(ValueError, match=r"MetricSpec\.description .* lone surrogates"):
        MetricSpec("loss", "train.loss", description="from shard-\udcff")
    assert MetricSpec("loss", "train.loss", description="naïve ✓").description == "naïve ✓"


def test_buckets_default_to_none() -> None:
    """A spec without buckets keeps None, which leaves the SDK's default boundaries."""
    assert MetricSpec("t", "rl.t", "histogram").buckets is None


def test_buckets_are_stored_as_a_tuple_of_floats() -> None:
    """Any sequence of increasing ints and floats becomes a tuple of floats."""
    # Any numbers.Real is accepted at run time (numpy scalars, Fraction), beyond the hint.
    mixed: list[Any] = [1, 2.5, Fraction(10)]
    spec = MetricSpec("t", "rl.t", "histogram", unit="ms", buckets=mixed)
    assert spec.buckets == (1.0, 2.5, 10.0)
    assert type(spec.buckets) is tuple
    assert all(type(bound) is float for bound in spec.buckets)


def test_buckets_keep_a_spec_hashable_and_equal_by_value() -> None:
    """Specs with the same buckets, passed as list or tuple, are equal and hash alike."""
    first = MetricSpec("t", "rl.t", "histogram", buckets=[1, 5])
    second = MetricSpec("t", "rl.t", "histogram", buckets=(1.0, 5.0))
    assert first == second
    assert {first, second} == {first}
    assert first != MetricSpec("t", "rl.t", "histogram", buckets=(1, 6))


def test_buckets_are_keyword_only() -> None:
    """buckets cannot be passed positionally, so the existing positional order stays."""
    with pytest.raises(TypeError):
        MetricSpec("t", "rl.t", "histogram", "ms", "", (1, 2))  # type: ignore[call-arg]


@pytest.mark.parametrize("kind", ["gauge", "counter", "up_down_counter"])
def test_buckets_are_refused_for_kinds_other_than_histogram(kind: str) -> None:
    """Buckets on a non-histogram are a ValueError naming buckets, the kind and histogram."""
    with pytest.raises(LensError, match=rf"MetricSpec\.buckets .*histogram.*{kind!r}") as caught:
        MetricSpec("k", "n", kind, buckets=(1, 2))
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ((), r"MetricSpec\.buckets \(\) is empty"),
        ((1, 1), r"MetricSpec\.buckets\[1\] 1 is not greater than buckets\[0\] 1\.0"),
        ((5, 2), r"MetricSpec\.buckets\[1\] 2 is not greater than buckets\[0\] 5\.0"),
        ((1, math.nan), r"MetricSpec\.buckets\[1\] nan is not finite"),
        ((-math.inf, 0), r"MetricSpec\.buckets\[0\] -inf is not finite"),
        ((1, 2, math.inf), r"MetricSpec\.buckets\[2\] inf is not finite"),
        ((10**400,), r"MetricSpec\.buckets\[0\] 1000.*\.\.\. is not accepted"),
    ],
)
def test_bad_bucket_values_are_value_errors(buckets: tuple[float, ...], message: str) -> None:
    """Empty, non-increasing or non-finite buckets fail naming the index and what is accepted."""
    with pytest.raises(LensError, match=message) as caught:
        MetricSpec("t", "rl.t", "histogram", buckets=buckets)
    assert isinstance(caught.value, ValueError)
    assert "strictly increasing finite numbers" in str(caught.value)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ("1,5,10", r"MetricSpec\.buckets must be .*; got str"),
        ({1, 5}, r"MetricSpec\.buckets must be .*; got set"),
        (iter([1, 5]), r"MetricSpec\.buckets must be .*; got list_iterator"),
        (5, r"MetricSpec\.buckets must be .*; got int"),
        ((1, True), r"MetricSpec\.buckets\[1\] True \(bool\) is not accepted"),
        ((1, "5"), r"MetricSpec\.buckets\[1\] '5' \(str\) is not accepted"),
        ((1, None), r"MetricSpec\.buckets\[1\] None \(NoneType\) is not accepted"),
        ((1, 2j), r"MetricSpec\.buckets\[1\] 2j \(complex\) is not accepted"),
    ],
)
def test_bad_bucket_types_are_type_errors(buckets: object, message: str) -> None:
    """A non-sequence, or an item that is not a real number (bool included), is a TypeError."""
    with pytest.raises(LensError, match=message) as caught:
        MetricSpec("t", "rl.t", "histogram", buckets=buckets)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError)
    assert "not bool" in str(caught.value)


def test_negative_and_fractional_buckets_are_accepted() -> None:
    """Any strictly increasing finite boundaries are valid, below zero included."""
    spec = MetricSpec("t", "rl.t", "histogram", buckets=(-1, 0, 1e-9, 0.5, 1e300))
    assert spec.buckets == (-1.0, 0.0, 1e-9, 0.5, 1e300)


def test_a_bucket_whose_repr_fails_still_gets_a_clear_error() -> None:
    """An item with a failing __repr__ is named by its type, and the error is still a TypeError."""

    class Opaque:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with pytest.raises(TypeError, match=r"buckets\[0\] <Opaque with a failing repr> \(Opaque\)"):
        MetricSpec("t", "rl.t", "histogram", buckets=[Opaque()])  # type: ignore[list-item]


@pytest.mark.parametrize("kind", ["counter", "up_down_counter", "histogram"])
def test_multiprocess_is_for_gauges_only(kind: str) -> None:
    with pytest.raises(ValueError, match=r"MetricSpec\.multiprocess .*'gauge'") as info:
        MetricSpec("x", "x.x", kind, multiprocess="max")
    assert isinstance(info.value, LensError)


@pytest.mark.parametrize("mode", ["latest", "", 3, "MAX"])
def test_multiprocess_names_the_accepted_modes(mode: object) -> None:
    with pytest.raises(ValueError, match=r"MetricSpec\.multiprocess .*'last', 'max', 'min', 'sum'"):
        MetricSpec("x", "x.x", "gauge", multiprocess=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", [None, "last", "max", "min", "sum"])
def test_a_gauge_takes_each_multiprocess_mode(mode: str | None) -> None:
    assert MetricSpec("x", "x.x", "gauge", multiprocess=mode).multiprocess == mode
