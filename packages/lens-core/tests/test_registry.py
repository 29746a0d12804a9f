"""register_metric_group, unregister_metric_group and registered_metric_groups."""

from __future__ import annotations

import pytest

from nemo.lens import (
    MetricSpec,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)

REWARD = MetricSpec("reward_mean", "rl.reward.mean")
DURATION = MetricSpec("generation_duration_ms", "rl.generation.duration_ms", "histogram", "ms")


def test_register_keeps_specs_in_declaration_order() -> None:
    """A registered group's specs are stored as a tuple, in the order given."""
    register_metric_group("rl", iter([DURATION, REWARD]))
    assert registered_metric_groups() == {"rl": (DURATION, REWARD)}


def test_snapshot_is_unaffected_by_later_changes() -> None:
    """registered_metric_groups returns a new dict that later changes do not touch."""
    register_metric_group("rl", [REWARD])
    snapshot = registered_metric_groups()
    register_metric_group("other", [DURATION])
    unregister_metric_group("rl")
    assert snapshot == {"rl": (REWARD,)}
    assert registered_metric_groups() == {"other": (DURATION,)}
    assert registered_metric_groups() is not registered_metric_groups()


@pytest.mark.parametrize("group", ["", "   ", None, 3, b"rl"])
def test_refuses_empty_or_non_string_group(group: object) -> None:
    """The group name must be a non-empty string; the error shows the value given."""
    with pytest.raises(ValueError, match="group must be a non-empty string") as info:
        register_metric_group(group, [REWARD])  # type: ignore[arg-type]
    assert repr(group) in str(info.value)


def test_refuses_no_specs() -> None:
    """A group needs at least one spec."""
    with pytest.raises(ValueError, match="has no specs"):
        register_metric_group("rl", [])


def test_refuses_non_iterable_specs() -> None:
    """specs must be iterable."""
    with pytest.raises(TypeError, match="iterable of MetricSpec"):
        register_metric_group("rl", 3)  # type: ignore[arg-type]


def test_refuses_items_that_are_not_specs() -> None:
    """Each item must be a MetricSpec; the error names its index and type."""
    with pytest.raises(TypeError, match=r"specs\[1\] must be a MetricSpec, got dict"):
        register_metric_group("rl", [REWARD, {"key": "x"}])  # type: ignore[list-item]


def test_refuses_a_string_of_specs() -> None:
    """A string is iterable but its characters are not specs."""
    with pytest.raises(TypeError, match=r"specs\[0\]"):
        register_metric_group("rl", "reward")  # type: ignore[arg-type]


def test_refuses_duplicate_keys() -> None:
    """Two specs with one key are refused, naming the key."""
    with pytest.raises(ValueError, match="key 'reward_mean' appears twice"):
        register_metric_group("rl", [REWARD, MetricSpec("reward_mean", "rl.other")])


def test_refuses_duplicate_names() -> None:
    """Two specs with one instrument name are refused, naming the name."""
    with pytest.raises(ValueError, match=r"name 'rl\.reward\.mean' appears twice"):
        register_metric_group("rl", [REWARD, MetricSpec("other", "rl.reward.mean")])


def test_refuses_reregistering_without_override() -> None:
    """Registering a taken group name fails and points at allow_override."""
    register_metric_group("rl", [REWARD])
    with pytest.raises(ValueError, match="allow_override=True"):
        register_metric_group("rl", [DURATION])
    assert registered_metric_groups() == {"rl": (REWARD,)}


def test_override_replaces_the_definition() -> None:
    """allow_override=True replaces the group wholesale."""
    register_metric_group("rl", [REWARD])
    register_metric_group("rl", [DURATION], allow_override=True)
    assert registered_metric_groups() == {"rl": (DURATION,)}


def test_a_failed_registration_changes_nothing() -> None:
    """A refused registration leaves the registry as it was."""
    register_metric_group("rl", [REWARD])
    with pytest.raises(ValueError):
        register_metric_group("rl", [DURATION, DURATION], allow_override=True)
    assert registered_metric_groups() == {"rl": (REWARD,)}


def test_unregister_drops_the_group() -> None:
    """unregister_metric_group removes a registered group."""
    register_metric_group("rl", [REWARD])
    unregister_metric_group("rl")
    assert registered_metric_groups() == {}


@pytest.mark.parametrize("group", ["missing", ["unhashable"]])
def test_unregister_unknown_group_raises(group: object) -> None:
    """Unregistering a group that is not registered is a ValueError listing registered ones."""
    register_metric_group("rl", [REWARD])
    with pytest.raises(ValueError, match=r"is not registered; registered groups: \['rl'\]"):
        unregister_metric_group(group)  # type: ignore[arg-type]
