"""The rank-aware sampler `sampler_enabled` installs, composed with OTEL_TRACES_SAMPLER."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_ON,
    Decision,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from nemo.lens import NemoLensConfig
from nemo.lens._otel_env import TRACES_SAMPLERS
from nemo.lens._sdk import _sampling
from nemo.lens._sdk._sampling import (
    build_sampler,
    rank_aware_sampler,
    sampler_from_environment,
)
from nemo.lens.strategies import _rank_in_sample, get_export_strategy

RANKS = range(512)
TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF


def spec_hash_keeps(rank: int, rate: float) -> bool:
    """The `sampled` rule as the spec writes it."""
    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return int(digest, 16) % 10000 / 10000 < rate


def ranks_at_half() -> tuple[int, int]:
    """A rank the hash keeps at rate 0.5, and one it leaves out."""
    kept = next(rank for rank in RANKS if spec_hash_keeps(rank, 0.5))
    left_out = next(rank for rank in RANKS if not spec_hash_keeps(rank, 0.5))
    return kept, left_out


KEPT, LEFT_OUT = ranks_at_half()


@pytest.fixture(autouse=True)
def _no_sampler_environment(clean_environ: pytest.MonkeyPatch) -> None:
    """Each test starts without OTEL_TRACES_SAMPLER settings (nor any other)."""


def decision(sampler: Sampler, parent: Context | None = None, trace_id: int = TRACE_ID) -> Decision:
    return sampler.should_sample(parent, trace_id, "step").decision


def parent_context(sampled: bool, *, remote: bool = False) -> Context:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    context = SpanContext(TRACE_ID, 0x1234, is_remote=remote, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(context))


def sampler_config(rate: float = 1.0, *, enabled: bool = True) -> NemoLensConfig:
    return NemoLensConfig(enabled=True, sampler_enabled=enabled, export_sample_rate=rate)


# -- the hash ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, 0.25, 0.5, 1.0])
def test_hash_is_the_sampled_strategys(rate: float) -> None:
    """The sampler keeps exactly the ranks the `sampled` export strategy selects."""
    strategy = get_export_strategy("sampled")
    config = NemoLensConfig(export_sample_rate=rate)
    for rank in RANKS:
        expected = spec_hash_keeps(rank, rate)
        assert _rank_in_sample(rank, rate) is expected
        assert strategy(config, rank, len(RANKS)) is expected


def test_rate_zero_keeps_nobody_and_rate_one_everybody() -> None:
    """Rate 0 drops every rank's spans; rate 1 hands every rank's to the delegate."""
    for rank in range(64):
        assert decision(rank_aware_sampler(rank, 64, 0.0, delegate=ALWAYS_ON)) is Decision.DROP
        kept = rank_aware_sampler(rank, 64, 1.0, delegate=ALWAYS_ON)
        assert decision(kept) is Decision.RECORD_AND_SAMPLE


def test_rate_half_follows_the_hash_per_rank() -> None:
    """At rate 0.5 a rank's spans are sampled exactly when the hash keeps the rank."""
    decisions = {
        rank: decision(rank_aware_sampler(rank, 64, 0.5, delegate=ALWAYS_ON)) for rank in range(64)
    }
    assert decisions == {
        rank: Decision.RECORD_AND_SAMPLE if spec_hash_keeps(rank, 0.5) else Decision.DROP
        for rank in range(64)
    }
    assert set(decisions.values()) == {Decision.DROP, Decision.RECORD_AND_SAMPLE}


def test_the_decision_is_made_once_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hash runs when the sampler is built, never per span."""
    sampler = rank_aware_sampler(KEPT, 64, 0.5, delegate=ALWAYS_ON)

    def fail(*args: object) -> bool:
        raise AssertionError("the hash ran again")

    monkeypatch.setattr(_sampling, "_rank_in_sample", fail)
    assert decision(sampler) is Decision.RECORD_AND_SAMPLE


# -- the sampler ------------------------------------------------------------------------------


def test_description_names_rank_and_rate() -> None:
    """get_description() is `RankAwareSampler(rank=<r>, rate=<rate>)`, the rate as a float."""
    assert rank_aware_sampler(3, 8, 0.5).get_description() == "RankAwareSampler(rank=3, rate=0.5)"
    assert rank_aware_sampler(0, 1, 1).get_description() == "RankAwareSampler(rank=0, rate=1.0)"
    assert type(rank_aware_sampler(0, 1)).__name__ == "RankAwareSampler"


def test_default_delegate_is_the_sdk_default() -> None:
    """Without a delegate, a kept rank behaves as parentbased_always_on."""
    sampler = rank_aware_sampler(0, 1)
    assert isinstance(sampler, Sampler)
    assert decision(sampler) is Decision.RECORD_AND_SAMPLE
    assert decision(sampler, parent_context(sampled=False)) is Decision.DROP
    assert decision(sampler, parent_context(sampled=True)) is Decision.RECORD_AND_SAMPLE


def test_a_left_out_rank_drops_even_under_a_sampled_parent() -> None:
    """The hash wins: a process it leaves out drops spans whose parent was sampled."""
    sampler = rank_aware_sampler(LEFT_OUT, 512, 0.5, delegate=ALWAYS_ON)
    assert decision(sampler, parent_context(sampled=True, remote=True)) is Decision.DROP


def test_a_dropped_span_keeps_its_parents_trace_state() -> None:
    """Dropping passes the parent's tracestate on, as the SDK's always_off does."""
    state = trace.TraceState([("vendor", "v1")])
    context = SpanContext(
        TRACE_ID,
        0x1234,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=state,
    )
    parent = trace.set_span_in_context(NonRecordingSpan(context))
    result = rank_aware_sampler(LEFT_OUT, 512, 0.5).should_sample(parent, TRACE_ID, "step")
    assert result.decision is Decision.DROP
    assert result.trace_state == state


class RaisingSampler(Sampler):
    """A delegate that fails on every span."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        raise RuntimeError("sampler bug")

    def get_description(self) -> str:
        return "RaisingSampler"


class NoneSampler(Sampler):
    """A delegate that breaks the contract by returning None."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return None  # type: ignore[return-value]

    def get_description(self) -> str:
        return "NoneSampler"


@pytest.mark.parametrize(
    ("delegate", "logged"),
    [
        (RaisingSampler(), "the RaisingSampler sampler raised RuntimeError: sampler bug"),
        (NoneSampler(), "the NoneSampler sampler returned NoneType instead of a SamplingResult"),
    ],
)
def test_a_broken_delegate_drops_the_span_and_warns_once(
    delegate: Sampler, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A delegate that raises or returns no SamplingResult gives DROP and one warning."""
    caplog.set_level(logging.WARNING, logger="nemo.lens._sdk._sampling")
    sampler = rank_aware_sampler(0, 1, delegate=delegate)
    for _ in range(3):
        result = sampler.should_sample(None, TRACE_ID, "step")
        assert isinstance(result, SamplingResult)
        assert result.decision is Decision.DROP
    assert len(caplog.records) == 1
    assert logged in caplog.records[0].getMessage()


ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(),
    st.binary(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.just(Context()),
    st.just(object()),
)
DELEGATES = st.sampled_from(
    [
        None,
        ALWAYS_ON,
        ALWAYS_OFF,
        DEFAULT_ON,
        TraceIdRatioBased(0.5),
        sampler_from_environment({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}),
        RaisingSampler(),
        NoneSampler(),
    ]
)


@given(
    rank=st.integers(0, 63),
    rate=st.sampled_from([0.0, 0.5, 1.0]),
    delegate=DELEGATES,
    parent=st.one_of(ODD_VALUES, st.builds(parent_context, st.booleans())),
    trace_id=ODD_VALUES,
    name=ODD_VALUES,
    kind=ODD_VALUES,
    attributes=ODD_VALUES,
    links=ODD_VALUES,
    trace_state=ODD_VALUES,
)
def test_should_sample_always_returns_a_sampling_result(
    rank: int,
    rate: float,
    delegate: Sampler | None,
    parent: Any,
    trace_id: Any,
    name: Any,
    kind: Any,
    attributes: Any,
    links: Any,
    trace_state: Any,
) -> None:
    """Whatever the arguments, should_sample returns a SamplingResult and never raises."""
    sampler = rank_aware_sampler(rank, 64, rate, delegate=delegate)
    result = sampler.should_sample(parent, trace_id, name, kind, attributes, links, trace_state)
    assert isinstance(result, SamplingResult)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((True, 4), TypeError, "rank must be an int, got bool"),
        ((0, 4.0), TypeError, "world_size must be an int, got float"),
        ((4, 4), ValueError, "rank must lie in [0, world_size), got rank=4 of world_size=4"),
        ((-1, 4), ValueError, "got rank=-1"),
        ((0, 4, 1.5), ValueError, "RankAwareSampler sample_rate must lie in [0.0, 1.0], got 1.5"),
        ((0, 4, "0.5"), TypeError, "RankAwareSampler sample_rate must be a number"),
    ],
)
def test_bad_construction_arguments_are_clear_errors(
    arguments: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    """The sampler refuses a rank, world size or rate it cannot use, naming it."""
    with pytest.raises(error) as caught:
        rank_aware_sampler(*arguments)
    assert message in str(caught.value)


# -- build_sampler and OTEL_TRACES_SAMPLER -----------------------------------------------------


def test_disabled_sampler_leaves_the_sdk_default() -> None:
    """Without sampler_enabled, build_sampler returns None (the SDK reads the env itself)."""
    assert build_sampler(sampler_config(enabled=False), 0, 4) is None
    assert build_sampler(NemoLensConfig(), None, None) is None


def test_disabled_sampler_does_not_read_otel_traces_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An OTEL_TRACES_SAMPLER lens does not use is left to the SDK, not refused."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "no_such_sampler")
    assert build_sampler(sampler_config(enabled=False), 0, 4) is None


def test_no_rank_means_rank_zero_of_one() -> None:
    """With no rank, the hash sees rank 0 of 1, as the export decision does."""
    sampler = build_sampler(sampler_config(0.5), None, None)
    assert sampler is not None
    assert sampler.get_description() == "RankAwareSampler(rank=0, rate=0.5)"
    expected = Decision.RECORD_AND_SAMPLE if spec_hash_keeps(0, 0.5) else Decision.DROP
    assert decision(sampler) is expected


def test_the_rate_is_export_sample_rate() -> None:
    """The sampler's rate is config.export_sample_rate."""
    sampler = build_sampler(sampler_config(0.25), 3, 8)
    assert sampler is not None
    assert sampler.get_description() == "RankAwareSampler(rank=3, rate=0.25)"


@pytest.mark.parametrize(
    ("rate", "error", "message"),
    [
        (1.5, ValueError, "export_sample_rate (the rate of the sampler that sampler_enabled"),
        (float("nan"), ValueError, "must lie in [0.0, 1.0], got nan"),
        ("0.5", TypeError, "must be a number in [0.0, 1.0], got str"),
    ],
)
def test_a_rate_changed_after_construction_is_checked_at_setup(
    rate: Any, error: type[Exception], message: str
) -> None:
    """A rate assigned after from_env is checked by build_sampler, naming the field."""
    config = sampler_config()
    config.export_sample_rate = rate
    with pytest.raises(error) as caught:
        build_sampler(config, 0, 1)
    assert "NemoLensConfig.export_sample_rate" in str(caught.value)
    assert message in str(caught.value)


def test_kept_rank_delegates_to_always_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_TRACES_SAMPLER=always_off drops even a kept rank's spans."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    sampler = build_sampler(sampler_config(1.0), 0, 2)
    assert sampler is not None
    assert decision(sampler) is Decision.DROP
    assert decision(sampler, parent_context(sampled=True)) is Decision.DROP


def test_kept_rank_delegates_to_traceidratio_with_its_arg(monkeypatch: pytest.MonkeyPatch) -> None:
    """traceidratio reads OTEL_TRACES_SAMPLER_ARG: low trace ids pass, high ones drop."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    sampler = build_sampler(sampler_config(1.0), 0, 2)
    assert sampler is not None
    bound = TraceIdRatioBased.get_bound_for_rate(0.25)
    assert decision(sampler, trace_id=bound - 1) is Decision.RECORD_AND_SAMPLE
    assert decision(sampler, trace_id=bound) is Decision.DROP
    # Not parent-based: a sampled parent does not change the ratio's answer.
    assert decision(sampler, parent_context(sampled=True), trace_id=bound) is Decision.DROP


def test_unselected_rank_drops_whatever_otel_traces_sampler_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hash comes first: always_on cannot bring back a rank it leaves out."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    sampler = build_sampler(sampler_config(0.5), LEFT_OUT, 512)
    assert sampler is not None
    assert decision(sampler) is Decision.DROP


@pytest.mark.parametrize(
    ("name", "arg", "root", "sampled_parent", "unsampled_parent"),
    [
        ("parentbased_always_on", "", Decision.RECORD_AND_SAMPLE, True, False),
        ("parentbased_always_off", "", Decision.DROP, True, False),
        ("parentbased_traceidratio", "0", Decision.DROP, True, False),
        ("parentbased_traceidratio", "1", Decision.RECORD_AND_SAMPLE, True, False),
        ("parentbased_traceidratio", "", Decision.RECORD_AND_SAMPLE, True, False),
        ("always_on", "ignored", Decision.RECORD_AND_SAMPLE, True, True),
        ("  ALWAYS_ON ", "", Decision.RECORD_AND_SAMPLE, True, True),
        ("", "", Decision.RECORD_AND_SAMPLE, True, False),
    ],
)
def test_parent_based_composition(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    arg: str,
    root: Decision,
    sampled_parent: bool,
    unsampled_parent: bool,
) -> None:
    """Parent-based samplers follow the parent; root spans go to their root sampler; the
    name is read stripped in any case, and blank is the SDK default."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    sampler = build_sampler(sampler_config(1.0), KEPT, 512)
    assert sampler is not None
    assert decision(sampler) is root
    for sampled, expected in ((True, sampled_parent), (False, unsampled_parent)):
        for remote in (False, True):
            got = decision(sampler, parent_context(sampled, remote=remote))
            assert (got is Decision.RECORD_AND_SAMPLE) is expected


def test_unknown_sampler_name_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown OTEL_TRACES_SAMPLER fails setup, naming the variable, value and choices."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER") as caught:
        build_sampler(sampler_config(), 0, 1)
    message = str(caught.value)
    assert message.startswith("Invalid value for OTEL_TRACES_SAMPLER: 'jaeger_remote'; expected")
    for accepted in TRACES_SAMPLERS:
        assert accepted in message
    assert "default parentbased_always_on" in message
    assert "sampler_enabled" in message


@pytest.mark.parametrize("arg", ["abc", "1.5", "-0.1", "nan", "inf"])
def test_bad_ratio_arg_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, arg: str) -> None:
    """A ratio sampler's OTEL_TRACES_SAMPLER_ARG must be a number in [0.0, 1.0]."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    with pytest.raises(ValueError) as caught:
        build_sampler(sampler_config(), 0, 1)
    assert str(caught.value) == (
        f"Invalid value for OTEL_TRACES_SAMPLER_ARG: {arg!r}; expected a number in [0.0, 1.0] "
        "(the ratio of OTEL_TRACES_SAMPLER=parentbased_traceidratio; 1.0 when unset)"
    )


def test_every_accepted_name_builds_a_sampler() -> None:
    """Each documented OTEL_TRACES_SAMPLER value gives an SDK sampler."""
    for name in TRACES_SAMPLERS:
        assert isinstance(sampler_from_environment({"OTEL_TRACES_SAMPLER": name}), Sampler)


# -- through the SDK ---------------------------------------------------------------------------


def exported_names(sampler: Sampler | None) -> list[str]:
    """Spans that reach an in-memory exporter through a real TracerProvider."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("step"), tracer.start_as_current_span("forward"):
        pass
    provider.shutdown()
    return sorted(span.name for span in exporter.get_finished_spans())


def test_through_a_real_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept rank exports its spans, a left-out rank none; always_off silences a kept one."""
    assert exported_names(build_sampler(sampler_config(0.5), KEPT, 512)) == ["forward", "step"]
    assert exported_names(build_sampler(sampler_config(0.5), LEFT_OUT, 512)) == []
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert exported_names(build_sampler(sampler_config(0.5), KEPT, 512)) == []


@pytest.mark.parametrize(("rank", "exported"), [(KEPT, True), (LEFT_OUT, False)])
def test_setup_installs_the_sampler_when_sampler_enabled(rank: int, exported: bool) -> None:
    """setup_telemetry(sampler_enabled=True) samples by rank: a kept rank exports its spans,
    a left-out rank exports none, though both run an exporting pipeline."""
    from nemo.lens import setup_telemetry
    from nemo.lens.testing import isolated_telemetry

    exporter = InMemorySpanExporter()
    config = sampler_config(0.5)
    config.export_strategy = "all_ranks"
    config.metrics_enabled = False
    with isolated_telemetry():
        handle = setup_telemetry(
            config, rank=rank, world_size=len(RANKS), span_exporter=exporter, _allow_reinit=True
        )
        assert handle.is_exporting
        with handle.tracer.start_as_current_span("step"):
            pass
        handle.shutdown(timeout_ms=5000)
    assert [span.name for span in exporter.get_finished_spans()] == (["step"] if exported else [])


@pytest.mark.parametrize(("rank", "exported"), [(KEPT, True), (LEFT_OUT, False)])
def test_without_rank_the_sampler_hashes_the_callers_nv_dl_rank(rank: int, exported: bool) -> None:
    """Generation B passes no rank= but nv.dl.rank/nv.dl.world_size resource attributes;
    the sampler hashes that rank (not rank 0 on every process)."""
    from nemo.lens import setup_telemetry
    from nemo.lens.semconv import NV_DL_RANK, NV_DL_WORLD_SIZE
    from nemo.lens.testing import isolated_telemetry

    exporter = InMemorySpanExporter()
    config = sampler_config(0.5)
    config.metrics_enabled = False
    with isolated_telemetry():
        handle = setup_telemetry(
            config,
            resource_attributes={NV_DL_RANK: rank, NV_DL_WORLD_SIZE: len(RANKS)},
            span_exporter=exporter,
            _allow_reinit=True,
        )
        with handle.tracer.start_as_current_span("step"):
            pass
        handle.shutdown(timeout_ms=5000)
    assert [span.name for span in exporter.get_finished_spans()] == (["step"] if exported else [])
