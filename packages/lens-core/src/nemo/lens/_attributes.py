"""The one rule for what lens hands OpenTelemetry as an attribute key or value.

OpenTelemetry carries a str, bool, int or float, or a homogeneous sequence of one of
those. lens applies that rule the same way to metric points, spans and resources:

- A subclass of one of those types (an `IntEnum` or `StrEnum` member, `numpy.float64`,
  `numpy.str_`) is carried as a plain value of its base type, so every exporter writes
  the same thing (a Prometheus label would otherwise show an enum's `repr`-like `str`).
- A list or tuple becomes a tuple (older SDKs hash attribute values when aggregating),
  after the same conversion of each item; `bool` items never mix with `int` items.
- Whatever lens passes on must be encodable, or one value would make a whole export fail:
  a str with lone surrogates (what `os.fsdecode` gives for an undecodable file name) has
  each replaced by U+FFFD, and an int outside int64 (OTLP's integer) is not carried.
- Anything else is not carried: the caller drops it under its own logging policy.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

#: The exact types a value may already have to pass as it is (the recording fast path,
#: which also checks `str.isascii()` and the int64 range before it lets a value through).
EXACT_SCALAR_TYPES: Final = frozenset({str, bool, int, float})
#: OTLP carries integers as int64.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

# A surrogate code point on its own cannot be encoded as UTF-8 (protobuf, JSON, HTTP).
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
REPLACEMENT_CHARACTER: Final = "\ufffd"


def encodable_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT_CHARACTER, text)


def is_encodable(text: str) -> bool:
    """True when `text` encodes as UTF-8 as it is."""
    return text.isascii() or _SURROGATE.search(text) is None


def attribute_key(key: object) -> str | None:
    """`key` as a plain, encodable, non-empty str, or None when it cannot name an attribute."""
    if not isinstance(key, str):
        return None
    plain = key if type(key) is str else str.__str__(key)
    return encodable_text(plain) or None


def attribute_scalar(value: object) -> str | bool | int | float | None:
    """`value` as a plain, encodable str, bool, int or float, or None when it is none of those."""
    # A subclass: the base type's own slot gives the plain value, whatever the subclass
    # overrides (bool cannot be subclassed).
    if isinstance(value, str):
        return encodable_text(value if type(value) is str else str.__str__(value))
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        plain = value if type(value) is int else int.__int__(value)
        return plain if INT64_MIN <= plain <= INT64_MAX else None
    if isinstance(value, float):
        return value if type(value) is float else float.__float__(value)
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
