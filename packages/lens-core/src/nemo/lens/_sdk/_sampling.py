"""The rank-aware trace sampler `sampler_enabled` installs.

The sampler decides once, when it is built, whether this process keeps traces: the same
hash as the `sampled` export strategy, on the process's rank, against
`export_sample_rate`. A process the hash leaves out drops every span. A process it keeps
samples each span with the sampler `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`
name, as the SDK would on its own (default `parentbased_always_on`).

Unlike the `sampled` strategy, which decides whether a process exports at all (metrics
included), the sampler only thins traces: every process still exports its metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    Decision,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)

from nemo.lens import _otel_env
from nemo.lens._warn_once import WarnOnce
from nemo.lens.config import NemoLensConfig, _check_sample_rate
from nemo.lens.errors import LensTypeError, LensValueError
from nemo.lens.strategies import _rank_in_sample

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.trace.span import TraceState
    from opentelemetry.util.types import Attributes

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "RankAwareSampler")

# What a span gets when the sampler it asked failed: dropped, never an exception.
_DROPPED: Final = SamplingResult(Decision.DROP)


def build_sampler(
    config: NemoLensConfig, rank: int | None, world_size: int | None
) -> Sampler | None:
    """The sampler the tracer provider gets, or None to keep the SDK's own.

    With `config.sampler_enabled`, a rank-aware sampler at rate `export_sample_rate`
    around the sampler `OTEL_TRACES_SAMPLER` names. Otherwise None: the SDK then reads
    `OTEL_TRACES_SAMPLER` itself. With no rank (None), the hash sees rank 0 of 1, as the
    export decision does.

    Raises:
        ValueError: `export_sample_rate` lies outside [0.0, 1.0], or
            `OTEL_TRACES_SAMPLER` names no built-in sampler, or a ratio sampler's
            `OTEL_TRACES_SAMPLER_ARG` is not a number in [0.0, 1.0]; the message names
            the setting and what is accepted.
        TypeError: `export_sample_rate` is not a number.
    """
    if not config.sampler_enabled:
        return None
    _check_sample_rate(
        config.export_sample_rate,
        "NemoLensConfig.export_sample_rate (the rate of the sampler that sampler_enabled installs)",
    )
    delegate = sampler_from_environment()
    if rank is None or world_size is None:
        rank, world_size = 0, 1
    return rank_aware_sampler(rank, world_size, config.export_sample_rate, delegate=delegate)


def rank_aware_sampler(
    rank: int, world_size: int, sample_rate: float = 1.0, *, delegate: Sampler | None = None
) -> Sampler:
    """Build a `RankAwareSampler`: `delegate` decides when the hash keeps `rank`.

    Args:
        rank: This process's rank.
        world_size: The number of ranks.
        sample_rate: The share of ranks kept, in [0.0, 1.0].
        delegate: The sampler a kept process uses; the SDK's default
            (`parentbased_always_on`) when None.

    Raises:
        TypeError: `rank` or `world_size` is not an int, or `sample_rate` not a number.
        ValueError: `rank` lies outside [0, world_size), or `sample_rate` outside [0, 1].
    """
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise LensTypeError(
                f"RankAwareSampler: {name} must be an int, got {type(value).__name__} ({value!r})"
            )
    if not 0 <= rank < world_size:
        raise LensValueError(
            f"RankAwareSampler: rank must lie in [0, world_size), got rank={rank} of "
            f"world_size={world_size}"
        )
    _check_sample_rate(sample_rate, "RankAwareSampler sample_rate")
    return RankAwareSampler(rank, world_size, float(sample_rate), delegate)


def sampler_from_environment(environ: Mapping[str, str] | None = None) -> Sampler:
    """The SDK sampler `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name.

    The rules (names, default, ratio) are `nemo.lens._otel_env.traces_sampler`'s.

    Raises:
        ValueError: An unknown sampler name or a bad ratio (see `traces_sampler`).
    """
    name, ratio = _otel_env.traces_sampler(environ)
    fixed: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "parentbased_always_on": DEFAULT_ON,
        "parentbased_always_off": DEFAULT_OFF,
    }
    if name in fixed:
        return fixed[name]
    if name == "traceidratio":
        return TraceIdRatioBased(ratio)
    return ParentBasedTraceIdRatio(ratio)


class RankAwareSampler(Sampler):
    """Drops every span unless the `sampled` hash keeps this rank; then `delegate` decides.

    Built by `rank_aware_sampler`, which checks the arguments first.
    """

    def __init__(
        self, rank: int, world_size: int, sample_rate: float, delegate: Sampler | None
    ) -> None:
        super().__init__()
        self.rank = rank
        self.world_size = world_size
        self.sample_rate = sample_rate
        #: Decided once: does this process keep any span?
        self.selected = _rank_in_sample(rank, sample_rate)
        chosen = DEFAULT_ON if delegate is None else delegate
        self._decider: Sampler = chosen if self.selected else ALWAYS_OFF

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        decider = self._decider
        try:
            # Typed `object`: a custom delegate may return anything.
            result: object = decider.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        except Exception as exc:
            _warnings.warn(
                ("raised", type(exc)),
                "RankAwareSampler: the %s sampler raised %s: %s; the span was dropped",
                type(decider).__name__,
                type(exc).__name__,
                exc,
            )
            return _DROPPED
        if isinstance(result, SamplingResult):
            return result
        _warnings.warn(
            ("returned", type(result)),
            "RankAwareSampler: the %s sampler returned %s instead of a SamplingResult; "
            "the span was dropped",
            type(decider).__name__,
            type(result).__name__,
        )
        return _DROPPED

    def get_description(self) -> str:
        return f"RankAwareSampler(rank={self.rank}, rate={self.sample_rate})"
