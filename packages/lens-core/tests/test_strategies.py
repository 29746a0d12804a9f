"""Export strategies: the four built-ins and the registry around them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemo.lens import strategies
from nemo.lens.config import NemoLensConfig
from nemo.lens.strategies import (
    BUILTIN_STRATEGIES,
    get_export_strategy,
    register_export_strategy,
    registered_strategies,
    unregister_export_strategy,
)
from nemo.lens.testing import isolated_telemetry


@pytest.fixture(autouse=True)
def _isolated() -> Iterator[None]:
    with isolated_telemetry():
        yield


def test_builtins_are_registered_at_import() -> None:
    """The four built-ins exist and are listed sorted."""
    assert frozenset({"all_ranks", "single_rank", "sampled", "first_rank_per_node"}) == (
        BUILTIN_STRATEGIES
    )
    assert registered_strategies() == sorted(BUILTIN_STRATEGIES)


def test_all_ranks_selects_every_rank() -> None:
    """`all_ranks` is True for every rank."""
    strategy = get_export_strategy("all_ranks")
    assert all(strategy(NemoLensConfig(), rank, 8) for rank in range(8))


def test_single_rank_default_is_the_last_rank() -> None:
    """export_rank -1 selects world_size - 1 only; rank 0 of 1 exports."""
    strategy = get_export_strategy("single_rank")
    config = NemoLensConfig()
    assert [strategy(config, rank, 4) for rank in range(4)] == [False, False, False, True]
    assert strategy(config, 0, 1) is True


def test_single_rank_with_explicit_export_rank() -> None:
    """Gym's case: export_rank=0 and rank 3 of 4 does not export; rank 0 does."""
    strategy = get_export_strategy("single_rank")
    config = NemoLensConfig(export_rank=0)
    assert strategy(config, 3, 4) is False
    assert strategy(config, 0, 4) is True


def test_sampled_matches_the_documented_hash() -> None:
    """`sampled` is `int(md5(str(rank)), 16) % 10000 / 10000 < rate`."""
    strategy = get_export_strategy("sampled")
    config = NemoLensConfig(export_sample_rate=0.3)
    for rank in range(64):
        digest = int(hashlib.md5(str(rank).encode()).hexdigest(), 16)
        assert strategy(config, rank, 64) is (digest % 10000 / 10000 < 0.3)


@given(rank=st.integers(min_value=0, max_value=10**6))
def test_sampled_rate_zero_selects_nobody_and_one_everybody(rank: int) -> None:
    """Rate 0 never selects and rate 1 always does, for any rank."""
    strategy = get_export_strategy("sampled")
    assert strategy(NemoLensConfig(export_sample_rate=0.0), rank, rank + 1) is False
    assert strategy(NemoLensConfig(export_sample_rate=1.0), rank, rank + 1) is True


@pytest.mark.parametrize(
    ("local_rank", "expected"), [(None, True), ("", True), ("0", True), ("2", False)]
)
def test_first_rank_per_node_reads_local_rank(
    monkeypatch: pytest.MonkeyPatch, local_rank: str | None, expected: bool
) -> None:
    """LOCAL_RANK 0, unset or blank exports; other local ranks do not; `rank` is ignored."""
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    assert get_export_strategy("first_rank_per_node")(NemoLensConfig(), 5, 8) is expected


def test_first_rank_per_node_rejects_a_non_integer_local_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A non-integer LOCAL_RANK raises ValueError naming the variable and value."""
    monkeypatch.setenv("LOCAL_RANK", "zero")
    with pytest.raises(ValueError, match=r"LOCAL_RANK: 'zero'"):
        get_export_strategy("first_rank_per_node")(NemoLensConfig(), 0, 1)


def test_register_and_unregister_a_custom_strategy() -> None:
    """A custom strategy is listed, returned, and removable."""

    def even_ranks(config: NemoLensConfig, rank: int, world_size: int) -> bool:
        return rank % 2 == 0

    register_export_strategy("even", even_ranks)
    assert "even" in registered_strategies()
    assert registered_strategies() == sorted(registered_strategies())
    assert get_export_strategy("even") is even_ranks
    unregister_export_strategy("even")
    assert "even" not in registered_strategies()


def test_taken_names_need_override_builtins_included() -> None:
    """Re-registering a name fails without override and replaces it with override."""

    def never(config: NemoLensConfig, rank: int, world_size: int) -> bool:
        return False

    register_export_strategy("custom", never)
    with pytest.raises(ValueError, match="custom"):
        register_export_strategy("custom", never)
    with pytest.raises(ValueError, match="built-in"):
        register_export_strategy("all_ranks", never)
    register_export_strategy("all_ranks", never, allow_override=True)
    assert get_export_strategy("all_ranks") is never


def test_registration_errors_are_specific() -> None:
    """Empty names raise ValueError; non-callables raise TypeError."""
    with pytest.raises(ValueError, match="non-empty"):
        register_export_strategy("", lambda c, r, w: True)
    with pytest.raises(TypeError, match="callable"):
        register_export_strategy("x", "not callable")  # type: ignore[arg-type]


def test_unregister_errors_are_specific() -> None:
    """Built-ins cannot be unregistered; unknown names are reported."""
    with pytest.raises(ValueError, match="Cannot unregister built-in strategy"):
        unregister_export_strategy("single_rank")
    with pytest.raises(ValueError, match="is not registered"):
        unregister_export_strategy("missing")


def test_unknown_strategy_message_lists_registered_ones() -> None:
    """get_export_strategy names the unknown strategy and lists the registered ones."""
    with pytest.raises(ValueError) as caught:
        get_export_strategy("typo")
    assert str(caught.value) == (
        f"Unknown export_strategy 'typo'. Registered strategies: {sorted(BUILTIN_STRATEGIES)}."
    )


def test_reset_restores_the_original_builtins() -> None:
    """After an override and a custom entry, the reset leaves the four originals."""
    original = get_export_strategy("single_rank")
    register_export_strategy("single_rank", lambda c, r, w: True, allow_override=True)
    register_export_strategy("custom", lambda c, r, w: True)
    strategies._reset_to_builtins()
    assert registered_strategies() == sorted(BUILTIN_STRATEGIES)
    assert get_export_strategy("single_rank") is original
