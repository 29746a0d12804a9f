"""`MetricSpec`: one metric family a consumer declares, validated when it is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
