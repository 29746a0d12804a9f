"""MetricSpec validates every field when it is built."""

from __future__ import annotations

import dataclasses

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
