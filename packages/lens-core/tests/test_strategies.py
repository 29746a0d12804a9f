"""Export strategies: the four built-ins and the registry around them."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_children import child_env, run_python

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


def _rank_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nemo.lens.strategies"]


@pytest.mark.parametrize(("export_rank", "world_size"), [(8, 4), (4, 4), (-2, 4), (1, 1)])
def test_an_export_rank_outside_the_world_warns_once_naming_the_setting(
    caplog: pytest.LogCaptureFixture, export_rank: int, world_size: int
) -> None:
    """single_rank with export_rank outside [-1, world_size) selects nobody and says so once."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.strategies")
    strategy = get_export_strategy("single_rank")
    config = NemoLensConfig(enabled=True, export_rank=export_rank)

    assert not any(strategy(config, rank, world_size) for rank in range(world_size))

    (message,) = _rank_warnings(caplog)
    assert f"export_rank {export_rank} " in message
    assert f"export_rank {export_rank} (NemoLensConfig.export_rank) names no rank" in message
    assert f"world of {world_size}," in message
    assert f"-1 (the last rank) or a rank from 0 to {world_size - 1}" in message


@pytest.mark.parametrize("export_rank", [-1, 0, 3, 3.0, True])
def test_an_export_rank_inside_the_world_is_quiet(
    caplog: pytest.LogCaptureFixture, export_rank: object
) -> None:
    """-1 and every rank of the world (as ints or equal numbers) select one rank, silently."""
    caplog.set_level(logging.DEBUG, logger="nemo.lens.strategies")
    strategy = get_export_strategy("single_rank")
    config = NemoLensConfig(enabled=True, export_rank=export_rank)  # type: ignore[arg-type]

    assert sum(bool(strategy(config, rank, 4)) for rank in range(4)) == 1
    assert _rank_warnings(caplog) == []


@pytest.mark.parametrize("export_rank", ["3", None, 2.5, float("nan"), [0]])
def test_an_export_rank_that_is_no_rank_number_warns_and_never_raises(
    caplog: pytest.LogCaptureFixture, export_rank: object
) -> None:
    """A value assigned in code that equals no rank (a str, None, 2.5, NaN) warns, not raises."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.strategies")
    strategy = get_export_strategy("single_rank")
    config = NemoLensConfig(enabled=True, export_rank=export_rank)  # type: ignore[arg-type]

    assert not any(strategy(config, rank, 4) for rank in range(4))
    assert len(_rank_warnings(caplog)) == 1


def test_a_disabled_config_does_not_warn_about_its_export_rank(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A disabled config exports nothing anyway, so an out-of-world rank is not reported."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.strategies")

    assert get_export_strategy("single_rank")(NemoLensConfig(export_rank=8), 0, 4) is False
    assert _rank_warnings(caplog) == []


_RANK_CHILD = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s: %(message)s")
from nemo.lens import NemoLensConfig, setup_telemetry
config = NemoLensConfig.from_env()
for _ in range(3):
    handle = setup_telemetry(config, rank=int(sys.argv[1]), world_size=4, _allow_reinit=True)
    print("is_exporting", handle.is_exporting)
"""


@pytest.mark.parametrize("rank", [0, 3])
def test_every_rank_of_a_job_warns_once_when_export_rank_is_outside_the_world(rank: int) -> None:
    """Each rank process (PREFIX_EXPORT_RANK=8 of 4) exports nothing and logs one warning."""
    result = run_python(
        "-c",
        _RANK_CHILD,
        str(rank),
        env=child_env({"NEMO_LENS_ENABLED": "1", "NEMO_LENS_EXPORT_RANK": "8"}),
    )

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.count("is_exporting False") == 3
    warnings = [line for line in lines if line.startswith("nemo.lens.strategies: ")]
    assert len(warnings) == 1
    assert "export_rank 8 " in warnings[0]
    assert "(NemoLensConfig.export_rank read from NEMO_LENS_EXPORT_RANK)" in warnings[0]
