"""How long an attribute value or a log body may be: the `OTEL_*_LIMIT` rules lens follows.

A gRPC collector refuses a request larger than its message limit (gRPC's default, which
the OpenTelemetry Collector keeps, is 4 MiB) with RESOURCE_EXHAUSTED, and the whole batch
is lost: one 5 MiB value cost 99 other spans. So lens bounds every value by default, and
the OpenTelemetry variables, when set, choose the bounds instead (in characters, as the
SDK counts them; `unset` means no bound):

- span attributes: `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else
  `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else 1024;
- span event and link attributes: `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else 1024;
- log record attributes: `OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else
  `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else 1024;
- log bodies (OpenTelemetry has no body limit): the log record attribute limit when one of
  its two variables is set, else 4096.

What the defaults guarantee, and what they do not: a full default batch stays under 4 MiB
when each item carries ONE long value at its limit, in single-byte (ASCII) text: 2048 spans
(lens's `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`) x (1024 characters + about 100 bytes of ids,
times and name) encode to 2.2 MiB; 512 log records (the SDK's
`OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`) x (a 4096-character body + a 1024-character attribute +
the handler's own) to 2.6 MiB (docs/exporters.md, "Value limits"). The limits bound each
value, not an item or a batch: two values at the limit per span take a full batch to
4.2 MiB, one value of 2-byte characters (`é`) to 4.2 MiB and of 3-byte ones (`€`, CJK) to
6.2 MiB, and an item may hold up to 128 attributes and 128 events (the SDK's count limits).
Where items carry several long values or non-ASCII text, lower
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (or `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`) or the length
limits, or raise the collector's limit.
The count limits (`OTEL_ATTRIBUTE_COUNT_LIMIT` and the span, event, link and log record
ones) stay the SDK's to read; lens checks their form here too, so a bad one fails where the
export plan is built.

The limits of the pipeline whose tracer provider is the global one are noted here
(`note_in_force`), so lens's own exception recording (`_span_lifecycle.record_span_error`)
can cut a traceback from its head and keep its last lines (`keep_tail`), where the SDK
would keep its first. Nothing here imports the SDK.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Final, NamedTuple

from opentelemetry import trace

from nemo.lens import _otel_env
from nemo.lens.errors import LensValueError

#: lens's attribute value length limit (characters) where no variable sets one.
DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT: Final = 1024
#: lens's log body length limit (characters) where no log record limit is set.
DEFAULT_LOG_BODY_LENGTH_LIMIT: Final = 4096
#: The SDK's count limits, read by the SDK itself; lens checks only their form.
COUNT_LIMIT_VARIABLES: Final = (
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT",
)
_UNSET: Final = "unset"
#: What a traceback cut by `keep_tail` starts with.
CUT_MARKER: Final = "...\n"


class ValueLimits(NamedTuple):
    """The longest value each place may hold, in characters; None is no bound."""

    span_attribute: int | None
    #: Span event and link attributes.
    attribute: int | None
    log_attribute: int | None
    log_body: int | None


def _limit(environ: Mapping[str, str] | None, name: str) -> tuple[int | None, bool]:
    """`name` as a limit and True (None for `unset`), or (None, False) when it is not set.

    Raises:
        LensValueError: Neither a non-negative integer nor `unset`; names the variable.
    """
    raw = _otel_env._read(environ, name)
    if not raw:
        return None, False
    if raw.lower() == _UNSET:
        return None, True
    if raw.isascii() and raw.isdigit():
        return int(raw), True
    raise LensValueError(
        f"Invalid value for {name}: {raw!r}; expected a non-negative integer (characters) "
        f"or {_UNSET!r} for no limit (lens's default is {DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT} "
        "for attribute values)"
    )


def value_limits(environ: Mapping[str, str] | None = None) -> ValueLimits:
    """The value length limits the environment gives, by the rules in this module's docstring.

    Raises:
        LensValueError: A length or count limit variable is neither a non-negative integer
            nor `unset`; the message names it.
    """
    for name in COUNT_LIMIT_VARIABLES:
        _limit(environ, name)
    general, general_set = _limit(environ, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    if not general_set:
        general = DEFAULT_ATTRIBUTE_VALUE_LENGTH_LIMIT
    span, span_set = _limit(environ, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    log, log_set = _limit(environ, "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    log_attribute = log if log_set else general
    return ValueLimits(
        span_attribute=span if span_set else general,
        attribute=general,
        log_attribute=log_attribute,
        log_body=log_attribute if log_set or general_set else DEFAULT_LOG_BODY_LENGTH_LIMIT,
    )


# (the tracer provider, its span event attribute limit): written once per setup, read on
# an exception; a tuple, so a reader sees both of one setup. The provider is held weakly:
# a finished setup's must not outlive its pipeline here.
_in_force: tuple[weakref.ref[object], int | None] | None = None


def note_in_force(tracer_provider: object, limits: ValueLimits) -> None:
    """Note that `tracer_provider` (a lens pipeline's) cuts span values to `limits`."""
    global _in_force
    _in_force = (weakref.ref(tracer_provider), limits.attribute)


def event_attribute_limit() -> int | None:
    """The length limit on span event attribute values (where `exception.stacktrace` is
    written) of lens's pipeline, while its tracer provider is the global one; else None."""
    in_force = _in_force
    if in_force is None or trace.get_tracer_provider() is not in_force[0]():
        return None
    return in_force[1]


def keep_tail(text: str, limit: int | None) -> str:
    """`text` at most `limit` long, cut from its head: `CUT_MARKER` + its last characters."""
    if limit is None or len(text) <= limit:
        return text
    if limit <= len(CUT_MARKER):
        return text[len(text) - limit :]
    return CUT_MARKER + text[len(text) - (limit - len(CUT_MARKER)) :]
