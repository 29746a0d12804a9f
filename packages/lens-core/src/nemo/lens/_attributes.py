"""The one rule for what lens hands OpenTelemetry as an attribute key or value.

OpenTelemetry carries a str, bool, int or float, or a homogeneous sequence of one of
those. lens applies that rule the same way to metric points, spans and resources:

- A subclass of one of those types (an `IntEnum` or `StrEnum` member, `numpy.float64`,
  `numpy.str_`) is carried as a plain value of its base type, so every exporter writes
  the same thing (a Prometheus label would otherwise show an enum's `repr`-like `str`).
- A list or tuple becomes a tuple (older SDKs hash attribute values when aggregating),
  after the same conversion of each item; `bool` items never mix with `int` items.
- Anything else is not carried: the caller drops it under its own logging policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

#: The exact types a value may already have to pass as it is (the recording fast path).
EXACT_SCALAR_TYPES: Final = frozenset({str, bool, int, float})


def attribute_key(key: object) -> str | None:
    """`key` as a plain non-empty str, or None when it cannot name an attribute."""
    if type(key) is str:
        return key or None
    if isinstance(key, str):
        plain = str.__str__(key)
        return plain or None
    return None


def attribute_scalar(value: object) -> str | bool | int | float | None:
    """`value` as a plain str, bool, int or float, or None when it is none of those."""
    if type(value) in EXACT_SCALAR_TYPES:
        return value  # type: ignore[return-value]  # the exact types checked above
    # A subclass: the base type's own slot gives the plain value, whatever the subclass
    # overrides (bool cannot be subclassed, and exact bools returned above).
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return None


def attribute_value(value: object) -> AttributeValue | None:
    """`value` as OpenTelemetry carries it, by the module's rule, or None when it cannot be."""
    scalar = attribute_scalar(value)
    if scalar is not None:
        return scalar
    if not isinstance(value, (list, tuple)):
        return None
    items = [attribute_scalar(item) for item in value]
    kinds = {type(item) for item in items}
    if len(kinds) > 1 or type(None) in kinds:
        return None
    return tuple(items)
