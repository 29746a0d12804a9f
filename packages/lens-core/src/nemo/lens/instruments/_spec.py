"""`MetricSpec`: one metric family a consumer declares, validated when it is built."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from nemo.lens._attributes import is_encodable
from nemo.lens.errors import LensTypeError, LensValueError

#: Every kind a spec may declare, mapped to the Meter method that creates it and the
#: instrument method that records one value.
METRIC_KINDS: Final[dict[str, tuple[str, str]]] = {
    "counter": ("create_counter", "add"),
    "gauge": ("create_gauge", "set"),
    "histogram": ("create_histogram", "record"),
    "up_down_counter": ("create_up_down_counter", "add"),
}
#: Kinds whose instruments only accept values >= 0.
NON_NEGATIVE_KINDS: Final = frozenset({"counter", "histogram"})
#: Kinds the SDK sums (so an int sum can outgrow int64).
SUM_KINDS: Final = frozenset({"counter", "up_down_counter"})
#: How a gauge's values from a process and its forked children become one value: the most
#: recently set, the largest, the smallest, or their sum.
GAUGE_MODES: Final = ("last", "max", "min", "sum")
#: The boundaries the SDK buckets a histogram by when its spec gives none.
SDK_DEFAULT_BUCKETS: Final = (
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    7500.0, 10000.0,
)  # fmt: skip

# The OpenTelemetry instrument-name syntax: an ASCII letter, then up to 254 letters,
# digits, "_", ".", "-" or "/".
_NAME_PATTERN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")
_MAX_UNIT_LENGTH: Final = 63
# `record_metrics` takes `attributes=` as a keyword, so no metric may be recorded under it.
_RESERVED_KEYS: Final = frozenset({"attributes"})


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: the key a consumer records under and the series it becomes.

    Args:
        key: The name passed to `record_metrics` (a Python identifier, not `attributes`).
        name: The emitted OpenTelemetry instrument name, for example `rl.reward.mean`.
        kind: `gauge`, `counter`, `up_down_counter` or `histogram`.
        unit: The UCUM-style unit, ASCII, at most 63 characters (may be empty).
        description: Free text shown by backends.
        buckets: Histograms only, keyword only: the explicit bucket boundaries, a
            non-empty sequence of strictly increasing finite numbers, kept as a tuple of
            floats. `None` (the default) leaves the SDK's default boundaries. lens passes
            them as the OpenTelemetry API's advisory boundaries where the installed release
            has them, and otherwise as an SDK view in `setup_telemetry`'s pipeline.
        multiprocess: Gauges only, keyword only: how the values a process and the
            children forked from it set on one series become the one value its pipeline
            exports: `"last"` (the most recently set; `None`, the default, means this),
            `"max"`, `"min"` or `"sum"` (each process's latest value counts once).

    Raises:
        TypeError: A field is not a `str`.
        ValueError: A field holds a value outside what is accepted; the message names
            the field, the value and what is accepted.
    """

    key: str
    name: str
    kind: str = "gauge"
    unit: str = ""
    description: str = ""
    buckets: Sequence[float] | None = field(default=None, kw_only=True)
    multiprocess: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        for field_name in ("key", "name", "kind", "unit", "description"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                raise LensTypeError(
                    f"MetricSpec.{field_name} must be a str, got {type(value).__name__} ({value!r})"
                )
        if not self.key.isidentifier():
            raise LensValueError(
                f"MetricSpec.key {self.key!r} is not accepted: it must be a Python identifier "
                "(letters, digits and '_', not starting with a digit), because callers "
                "record it as a keyword argument"
            )
        if self.key in _RESERVED_KEYS:
            raise LensValueError(
                f"MetricSpec.key {self.key!r} is reserved by record_metrics(attributes=...); "
                "choose another key"
            )
        if _NAME_PATTERN.fullmatch(self.name) is None:
            raise LensValueError(
                f"MetricSpec.name {self.name!r} is not a valid OpenTelemetry instrument name: "
                "it must start with an ASCII letter, continue with letters, digits, "
                "'_', '.', '-' or '/', and be at most 255 characters"
            )
        if self.kind not in METRIC_KINDS:
            raise LensValueError(
                f"MetricSpec.kind {self.kind!r} is not accepted; use one of {sorted(METRIC_KINDS)}"
            )
        if not is_encodable(self.description):
            raise LensValueError(
                f"MetricSpec.description {self.description!r} is not accepted: it holds lone "
                "surrogates (undecodable bytes), which no exporter can encode; pass text "
                "that encodes as UTF-8"
            )
        if not self.unit.isascii() or len(self.unit) > _MAX_UNIT_LENGTH:
            raise LensValueError(
                f"MetricSpec.unit {self.unit!r} is not accepted: it must be ASCII and at most "
                f"{_MAX_UNIT_LENGTH} characters (empty is fine)"
            )
        if self.multiprocess is not None:
            _check_gauge_mode(self.kind, self.multiprocess)
        if self.buckets is not None:
            # Frozen: the validated tuple replaces whatever sequence was passed.
            object.__setattr__(self, "buckets", _validated_buckets(self.kind, self.buckets))


def _check_gauge_mode(kind: str, mode: object) -> None:
    if kind != "gauge":
        raise LensValueError(
            f"MetricSpec.multiprocess is only accepted for kind 'gauge', got kind {kind!r}; "
            "counters, up-down counters and histograms from forked children always add up"
        )
    if mode not in GAUGE_MODES:
        raise LensValueError(
            f"MetricSpec.multiprocess {_short_repr(mode)} is not accepted; use one of "
            f"{list(GAUGE_MODES)} (or None for 'last')"
        )


def _validated_buckets(kind: str, buckets: object) -> tuple[float, ...]:
    """Return `buckets` as a tuple of floats, or raise naming `MetricSpec.buckets`."""
    accepted = (
        "a non-empty sequence of strictly increasing finite numbers (int or float, not "
        "bool), for example buckets=(1, 5, 10, 50)"
    )
    if kind != "histogram":
        raise LensValueError(
            f"MetricSpec.buckets is only accepted for kind 'histogram', got kind {kind!r}; "
            "drop buckets or declare a histogram"
        )
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence):
        raise LensTypeError(
            f"MetricSpec.buckets must be {accepted}; got {type(buckets).__name__} "
            f"({_short_repr(buckets)})"
        )
    if not buckets:
        raise LensValueError(
            f"MetricSpec.buckets {_short_repr(buckets)} is empty; pass {accepted}, or "
            "leave buckets=None for the SDK's default boundaries"
        )
    bounds: list[float] = []
    for index, bound in enumerate(buckets):
        if isinstance(bound, bool) or not isinstance(bound, numbers.Real):
            raise LensTypeError(
                f"MetricSpec.buckets[{index}] {_short_repr(bound)} ({type(bound).__name__}) is not "
                f"accepted; buckets must be {accepted}"
            )
        try:
            value = float(bound)
        except (OverflowError, ValueError) as exc:  # an int too large for a float
            raise LensValueError(
                f"MetricSpec.buckets[{index}] {_short_repr(bound)} is not accepted ({exc}); "
                f"buckets must be {accepted}"
            ) from None
        if not math.isfinite(value):
            raise LensValueError(
                f"MetricSpec.buckets[{index}] {_short_repr(bound)} is not finite; buckets "
                f"must be {accepted}"
            )
        if bounds and value <= bounds[-1]:
            raise LensValueError(
                f"MetricSpec.buckets[{index}] {_short_repr(bound)} is not greater than "
                f"buckets[{index - 1}] {bounds[-1]!r}; buckets must be {accepted}"
            )
        bounds.append(value)
    return tuple(bounds)


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} with a failing repr>"
    return text if len(text) <= 60 else text[:57] + "..."
