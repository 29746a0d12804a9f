"""Applying the value length limits (`nemo.lens._value_limits`) and counting what they cut.

Span attributes are cut by the SDK itself, through the `SpanLimits` lens gives the tracer
provider (it cuts as a value is set, on the caller's thread). Newer API releases (1.45.1
does) log a warning, "String attribute value exceeds max length of %d, truncating.", on
the `opentelemetry.attributes` logger for EVERY value cut: a loop setting one long
attribute a step would log one a step. So a pipeline with limits installs
`TRUNCATION_RECORDS` on that logger (once per process, `nemo.lens._log_filters`), which
drops those records and passes the logger's others; the cuts are still counted, below.
Log bodies are cut by no SDK release, and log record attributes by none before 1.3x, so
lens cuts both on the way to the exporter (`limit_log_record`, which
`_logging.LimitingLogExporter` runs in the export thread: nothing on the logging call).

Each cut value adds 1 to the `nemo.lens.values.truncated` counter and to one warning at
shutdown (`TruncationCount.report`), as `nemo.lens.spans.dropped` counts refused spans.
The SDK does not say which span values it cut, so lens counts a span value whose length
is exactly its limit (a value that was exactly that long counts too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from nemo.lens import _log_filters, _otel_internals
from nemo.lens._sdk._forwarding import Forwarding
from nemo.lens._value_limits import ValueLimits
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider


_logger = logging.getLogger(__name__)

#: The counter of attribute values and log bodies lens's limits cut.
TRUNCATED_VALUES_METRIC: Final = "nemo.lens.values.truncated"
#: How deep a structured log body is searched for strings to cut.
_MAX_DEPTH: Final = 8
#: The logger OpenTelemetry's attribute cleaning warns on, for every value it cuts.
ATTRIBUTES_LOGGER: Final = "opentelemetry.attributes"
# What that warning's format string holds (1.45.1: "String attribute value exceeds max
# length of %d, truncating."); test_value_limits.py notices a release that rewords it.
_TRUNCATION_TEXT: Final = "exceeds max length"


class _TruncationRecords(logging.Filter):
    """Drops the attribute cleaning's "value exceeds max length" records (lens counts the
    cuts and warns once at shutdown); passes the logger's other records."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return _TRUNCATION_TEXT not in str(record.msg)
        except Exception:  # a filter must not raise into the SDK
            return True


#: The one filter lens installs on `ATTRIBUTES_LOGGER`.
TRUNCATION_RECORDS: Final = _TruncationRecords()


def bound_truncation_records() -> None:
    """Install `TRUNCATION_RECORDS` on `ATTRIBUTES_LOGGER`, once per process."""
    _log_filters.install_once(ATTRIBUTES_LOGGER, TRUNCATION_RECORDS)


def build_span_limits(limits: ValueLimits) -> SpanLimits:
    """The SDK `SpanLimits` of `limits`' span lengths; the SDK reads the count limits."""

    def length(value: int | None) -> int:
        return SpanLimits.UNSET if value is None else value

    return SpanLimits(
        max_attribute_length=length(limits.attribute),
        max_span_attribute_length=length(limits.span_attribute),
    )


class TruncationCount:
    """Values cut so far, their counter, and the one warning about them at shutdown."""

    def __init__(self, limits: ValueLimits | None = None) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._count = 0
        self._reported = False
        #: Called with each batch's count of cut values (the counter's `add`).
        self.on_cut: Any = None

    @property
    def count(self) -> int:
        return self._count

    def use(self, limits: ValueLimits, meter_provider: MeterProvider | None, scope: str) -> None:
        """Name `limits` in the warning, and count in `nemo.lens.values.truncated` on the
        meter `scope` of `meter_provider` (once; each signal's setup calls this)."""
        self.limits = limits
        if meter_provider is None or self.on_cut is not None:
            return
        meter = meter_provider.get_meter(scope, __version__)
        self.on_cut = meter.create_counter(
            TRUNCATED_VALUES_METRIC,
            unit="{value}",
            description="Attribute values and log bodies lens's value length limits cut",
        ).add

    def add(self, count: int) -> None:
        if count <= 0:
            return
        with self._lock:
            self._count += count
        on_cut = self.on_cut
        if on_cut is not None:
            try:
                on_cut(count)
            except Exception as exc:
                _logger.debug("counting cut values failed: %s: %s", type(exc).__name__, exc)

    def report(self) -> int:
        """Log, once, one warning with the number of values cut; return that number."""
        if self._reported:
            return 0
        self._reported = True
        count = self._count
        if count:
            limits = self.limits
            _logger.warning(
                "%d value(s) were truncated to their length limit (span attributes %s, "
                "log bodies %s characters; counted in %s); set "
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT (or the OTEL_SPAN_/OTEL_LOGRECORD_ "
                "variants) to keep more, within the collector's message limit",
                count,
                None if limits is None else limits.span_attribute,
                None if limits is None else limits.log_body,
                TRUNCATED_VALUES_METRIC,
            )
        return count


def _at_limit(value: object, limit: int | None) -> int:
    """1 for a string value exactly `limit` long (how the SDK leaves a value it cut);
    for a sequence, the count of such elements."""
    if limit is None:
        return 0
    if isinstance(value, (str, bytes)):
        return 1 if len(value) == limit else 0
    if isinstance(value, Sequence):
        return sum(1 for item in value if isinstance(item, str) and len(item) == limit)
    return 0


def span_values_at_limit(span: ReadableSpan, limits: ValueLimits) -> int:
    """How many of `span`'s attribute values (its own, its events' and links') the limits
    cut, by `_at_limit`."""
    attributes, events, links = _otel_internals.span_containers(span, ReadableSpan)
    count = 0
    if attributes:
        limit = limits.span_attribute
        count = sum(_at_limit(value, limit) for value in attributes.values())
    if events or links:  # most spans have neither
        holders: tuple[Any, ...] = (*events, *links)
        for holder in holders:
            held = holder.attributes or {}
            count += sum(_at_limit(value, limits.attribute) for value in held.values())
    return count


class TruncationCountingSpanExporter(Forwarding, SpanExporter):
    """Forwards to `exporter`; counts the span values the SDK's limits cut in `count`."""

    def __init__(self, exporter: SpanExporter, limits: ValueLimits, count: TruncationCount) -> None:
        super().__init__(exporter)
        self._limits = limits
        self._count = count

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self._count.add(sum(span_values_at_limit(span, self._limits) for span in spans))
        except Exception as exc:  # counting never costs the export
            _logger.debug("counting cut span values failed: %s: %s", type(exc).__name__, exc)
        result: SpanExportResult = self._exporter.export(spans)
        return result


def cut(value: Any, limit: int | None, depth: int = 0) -> tuple[Any, int]:
    """`value` with every string (or bytes) in it at most `limit` long, and how many were
    cut; lists, tuples and mappings (a structured log body) are searched `_MAX_DEPTH` deep."""
    if limit is None:
        return value, 0
    if isinstance(value, (str, bytes)):
        return (value[:limit], 1) if len(value) > limit else (value, 0)
    if depth >= _MAX_DEPTH:
        return value, 0
    if isinstance(value, Mapping):
        pairs = {key: cut(item, limit, depth + 1) for key, item in value.items()}
        count = sum(cut_count for _, cut_count in pairs.values())
        return ({key: item for key, (item, _) in pairs.items()}, count) if count else (value, 0)
    if isinstance(value, (list, tuple)):
        items = [cut(item, limit, depth + 1) for item in value]
        count = sum(cut_count for _, cut_count in items)
        return (type(value)(item for item, _ in items), count) if count else (value, 0)
    return value, 0


def limit_log_record(log_record: Any, limits: ValueLimits) -> int:
    """Cut `log_record`'s body and attribute values to `limits` in place; return the count."""
    body, count = cut(log_record.body, limits.log_body)
    if count:
        log_record.body = body
    attributes = log_record.attributes
    if not attributes:
        return count
    changed = {}
    for key, value in attributes.items():
        new, cut_count = cut(value, limits.log_attribute)
        if cut_count:
            changed[key] = new
            count += cut_count
    if changed:
        try:
            for key, new in changed.items():
                attributes[key] = new
        except TypeError:  # immutable attributes (a release that freezes them): replace them
            log_record.attributes = {**attributes, **changed}
    return count
