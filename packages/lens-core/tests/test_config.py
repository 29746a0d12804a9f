"""NemoLensConfig: defaults, from_env parsing, errors and the span-group resolver rule."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_env import clear_settings

from nemo.lens.config import NemoLensConfig
from nemo.lens.groups import SpanGroup, SpanRegistry
from nemo.lens.testing import isolated_telemetry


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The prefixes these tests read under, and the W&B names from_env also reads.
    prefixes = ("TEST_OTEL_", "FALLBACK_", "PROP_", "WANDB_ENTITY", "WANDB_PROJECT")
    clear_settings(monkeypatch, also_strip=prefixes)
    with isolated_telemetry(clear_span_registry=True):
        yield


class TrainerSpanGroup(SpanGroup):
    ROLLOUT = "rollout"
    ALL_GROUPS = frozenset({"job", ROLLOUT})
    _PRESETS = {"default": frozenset({"job"}), "all": ALL_GROUPS}  # noqa: RUF012


def test_defaults_match_the_spec() -> None:
    """Every field has the documented default (RL3 asserts them)."""
    config = NemoLensConfig()
    assert config.enabled is False
    assert config.service_name == "nemo"
    assert config.export_strategy == "single_rank"
    assert config.export_rank == -1
    assert config.export_sample_rate == 1.0
    assert config.sampler_enabled is False
    assert config.traces_enabled is True
    assert config.metrics_enabled is True
    assert config.logs_enabled is False
    assert config.span_groups == "default"
    assert config.exporter == "otlp"
    assert config.run_id == ""
    assert config.user == ""
    assert config.wandb_entity == ""
    assert config.wandb_project == ""
    assert config.console_path == ""
    assert config.metric_cardinality_limit == 0
    assert config._span_group_cls is None


def test_fields_are_declared_in_spec_order_and_class_is_hidden_from_repr() -> None:
    """Field order is the spec's; `_span_group_cls` is a keyword but not in repr, nor is
    `_env_sources` (where from_env read each field, for error messages)."""
    names = [f.name for f in dataclasses.fields(NemoLensConfig)]
    assert names == [
        "enabled",
        "service_name",
        "export_strategy",
        "export_rank",
        "export_sample_rate",
        "sampler_enabled",
        "traces_enabled",
        "metrics_enabled",
        "logs_enabled",
        "span_groups",
        "exporter",
        "run_id",
        "user",
        "wandb_entity",
        "wandb_project",
        "console_path",
        "metric_cardinality_limit",
        "_span_group_cls",
        "_env_sources",
    ]
    config = NemoLensConfig(_span_group_cls=TrainerSpanGroup)
    assert "_span_group_cls" not in repr(config)
    assert "_env_sources" not in repr(config)
    assert config._span_group_cls is TrainerSpanGroup


def test_gym_constructor_shape_works_and_fields_stay_mutable() -> None:
    """Gym/RL2's keyword constructor works and fields can be assigned afterwards."""
    config = NemoLensConfig(
        enabled=True,
        service_name="gym",
        export_strategy="all_ranks",
        span_groups="all",
        metrics_enabled=False,
        _span_group_cls=TrainerSpanGroup,
    )
    config.service_name = "renamed"
    config.span_groups = "default"
    assert (config.service_name, config.span_groups) == ("renamed", "default")


@pytest.mark.parametrize("rate", [-0.01, 1.01, math.nan, math.inf])
def test_post_init_rejects_out_of_range_sample_rates(rate: float) -> None:
    """A rate outside [0, 1], or NaN, fails construction naming the field."""
    with pytest.raises(ValueError, match="export_sample_rate"):
        NemoLensConfig(export_sample_rate=rate)


def test_post_init_rejects_a_non_number_rate() -> None:
    """A string rate fails with TypeError naming the field."""
    with pytest.raises(TypeError, match="export_sample_rate"):
        NemoLensConfig(export_sample_rate="0.5")  # type: ignore[arg-type]


def test_from_env_with_nothing_set_gives_defaults() -> None:
    """No variables: from_env equals the plain constructor."""
    assert NemoLensConfig.from_env() == NemoLensConfig()


def test_from_env_reads_every_prefixed_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each field comes from its `{prefix}_{KEY}` variable, parsed to its type."""
    values = {
        "ENABLED": "yes",
        "EXPORT_STRATEGY": " all_ranks ",
        "EXPORT_RANK": "3",
        "EXPORT_SAMPLE_RATE": "0.25",
        "SAMPLER_ENABLED": "ON",
        "TRACES_ENABLED": "false",
        "METRICS_ENABLED": "0",
        "LOGS_ENABLED": "True",
        "SPAN_GROUPS": "Job,Step",
        "EXPORTER": "console",
        "RUN_ID": "run-7",
        "USER_ID": "alice",
    }
    for key, value in values.items():
        monkeypatch.setenv(f"TEST_OTEL_{key}", value)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "  trainer  ")
    monkeypatch.setenv("WANDB_ENTITY", " team ")
    monkeypatch.setenv("WANDB_PROJECT", "proj")
    config = NemoLensConfig.from_env(prefix="TEST_OTEL")
    assert config == NemoLensConfig(
        enabled=True,
        service_name="trainer",
        export_strategy="all_ranks",
        export_rank=3,
        export_sample_rate=0.25,
        sampler_enabled=True,
        traces_enabled=False,
        metrics_enabled=False,
        logs_enabled=True,
        span_groups="Job,Step",
        exporter="console",
        run_id="run-7",
        user="alice",
        wandb_entity=" team ",
        wandb_project="proj",
    )


def test_primary_prefix_wins_then_fallback_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """`{prefix}_KEY` beats `{fallback}_KEY`; a blank primary counts as unset."""
    monkeypatch.setenv("TEST_OTEL_EXPORT_RANK", "1")
    monkeypatch.setenv("FALLBACK_EXPORT_RANK", "2")
    monkeypatch.setenv("TEST_OTEL_EXPORTER", "   ")
    monkeypatch.setenv("FALLBACK_EXPORTER", "prometheus")
    monkeypatch.setenv("FALLBACK_ENABLED", "1")
    config = NemoLensConfig.from_env(prefix="TEST_OTEL", fallback_prefix="FALLBACK")
    assert config.export_rank == 1
    assert config.exporter == "prometheus"
    assert config.enabled is True
    assert config.span_groups == "default"


def test_blank_service_name_falls_back_to_nemo(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OTEL_SERVICE_NAME` of only spaces gives "nemo"."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", "   ")
    assert NemoLensConfig.from_env().service_name == "nemo"


def test_from_env_passes_the_span_group_class() -> None:
    """`span_group_cls=` lands in `_span_group_cls`."""
    config = NemoLensConfig.from_env(span_group_cls=TrainerSpanGroup)
    assert config._span_group_cls is TrainerSpanGroup


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("EXPORT_RANK", "not-an-int", "integer"),
        ("ENABLED", "maybe", "1/true/yes/on"),
        ("EXPORT_SAMPLE_RATE", "half", r"\[0.0, 1.0\]"),
        ("EXPORT_SAMPLE_RATE", "1.5", r"\[0.0, 1.0\]"),
        ("EXPORT_SAMPLE_RATE", "nan", r"\[0.0, 1.0\]"),
    ],
)
def test_malformed_values_name_variable_value_and_form(
    monkeypatch: pytest.MonkeyPatch, key: str, value: str, accepted: str
) -> None:
    """A malformed value raises ValueError naming the variable, the value and the form."""
    monkeypatch.setenv(f"TEST_OTEL_{key}", value)
    with pytest.raises(ValueError, match=accepted) as caught:
        NemoLensConfig.from_env(prefix="TEST_OTEL", fallback_prefix="NEMO_LENS")
    message = str(caught.value)
    assert f"TEST_OTEL_{key}" in message
    assert repr(value) in message
    assert caught.value.__cause__ is not None


def test_malformed_fallback_value_names_primary_and_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad value read through the fallback names the primary variable and its source."""
    monkeypatch.setenv("NEMO_LENS_EXPORT_RANK", "x")
    with pytest.raises(ValueError, match="TEST_OTEL_EXPORT_RANK") as caught:
        NemoLensConfig.from_env(prefix="TEST_OTEL", fallback_prefix="NEMO_LENS")
    assert "NEMO_LENS_EXPORT_RANK" in str(caught.value)


@given(
    spelling=st.sampled_from(["1", "true", "yes", "on", "0", "false", "no", "off"]),
    upper=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_bool_spellings_parse_in_any_case(spelling: str, upper: list[bool]) -> None:
    """Every accepted bool spelling parses whatever its letter case."""
    mixed = "".join(
        ch.upper() if flip else ch
        for ch, flip in zip(spelling, upper[: len(spelling)], strict=False)
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROP_ENABLED", f" {mixed} ")
        config = NemoLensConfig.from_env(prefix="PROP")
    assert config.enabled is (spelling in {"1", "true", "yes", "on"})


@given(raw=st.text(min_size=1, max_size=12))
def test_from_env_raises_only_value_error_for_any_int_text(raw: str) -> None:
    """Any text for an int key either parses like int() or raises ValueError."""
    if "\x00" in raw:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROP_EXPORT_RANK", raw)
        try:
            expected: int | None = int(raw.strip()) if raw.strip() else -1
        except ValueError:
            expected = None
        if expected is None:
            with pytest.raises(ValueError, match="PROP_EXPORT_RANK"):
                NemoLensConfig.from_env(prefix="PROP")
        else:
            assert NemoLensConfig.from_env(prefix="PROP").export_rank == expected


def test_resolved_span_groups_uses_the_configured_class_strictly() -> None:
    """A configured class resolves strictly, and a typo raises."""
    config = NemoLensConfig(span_groups="all", _span_group_cls=TrainerSpanGroup)
    assert config.resolved_span_groups == frozenset({"job", "rollout"})
    config.span_groups = "nope"
    with pytest.raises(ValueError, match="nope"):
        _ = config.resolved_span_groups


def test_resolved_span_groups_is_lenient_once_the_registry_has_a_namespace() -> None:
    """With a registered namespace, unknown tokens are skipped and the enabled set returned."""
    SpanRegistry.register("trainer", ["fwd", "bwd"], {"per_step": ["fwd", "bwd"]})
    config = NemoLensConfig(span_groups="per_step,typo")
    assert config.resolved_span_groups == frozenset({"fwd", "bwd"})


def test_resolved_span_groups_defaults_to_span_group() -> None:
    """No class and an empty registry: `SpanGroup.resolve` applies."""
    assert NemoLensConfig().resolved_span_groups == SpanGroup.resolve("default")


def test_resolved_span_groups_error_names_the_variable_while_the_field_holds_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A strict error names the variable from_env read the spec from, until code replaces it."""
    monkeypatch.setenv("FALLBACK_SPAN_GROUPS", "stepp")
    config = NemoLensConfig.from_env(prefix="TEST_OTEL", fallback_prefix="FALLBACK")
    with pytest.raises(ValueError) as read:
        _ = config.resolved_span_groups
    assert str(read.value).endswith(
        "(span_groups comes from the environment variable FALLBACK_SPAN_GROUPS='stepp')"
    )
    config.span_groups = "steppe"
    with pytest.raises(ValueError) as assigned:
        _ = config.resolved_span_groups
    valid = sorted(SpanGroup.ALL_GROUPS | SpanGroup.presets().keys())
    assert str(assigned.value) == f"Unknown span group or preset: 'steppe'. Valid options: {valid}"


class AliasingSpanGroup(SpanGroup):
    """A subclass with a resolve() of its own, which the resolver rule keeps calling."""

    @classmethod
    def resolve(cls, spec: str) -> frozenset[str]:
        return super().resolve(spec.replace("everything", "all"))


def test_resolved_span_groups_keeps_a_subclass_resolve_override() -> None:
    """A configured class that overrides `resolve` is resolved through that override."""
    config = NemoLensConfig(span_groups="everything", _span_group_cls=AliasingSpanGroup)
    assert config.resolved_span_groups == SpanGroup.ALL_GROUPS
