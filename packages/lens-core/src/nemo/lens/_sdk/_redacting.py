"""Redaction at the export boundary of every signal a lens pipeline builds.

The rule is `nemo.lens._redaction`'s (`DEFAULT_REDACT_KEYS`, matched by words); this
module applies it to what leaves the process, whoever wrote it: a span helper, a direct
`span.set_attribute` on a lens tracer's span, an instrumentation library, the logging
bridge (a record's `extra`), a meter's caller.

- Spans (`RedactingSpanExporter`): span, event and link attributes; the exception texts
  (`exception.message`, `exception.stacktrace`) and an ERROR status description pass
  `redact_text`, which hides the value of each `key=value` pair whose key is secret.
- Logs (`redacted_log_batch`, run by `_logging.RedactingLogExporter`): log record
  attributes, the mappings and lists among their values included
  (`extra={"cfg": {"api_key": ...}}`), exception texts as for spans.
- Metrics (`redact_collections`): point attributes, in what every collection returns, so
  push readers, Prometheus's pull reader and injected readers all see the same; two
  series that differ only in a secret value become one series, their points merged.
  The point keys found to hide nothing are remembered (a bounded set), so a collection
  tests most points in one set comparison.
- The resource (`redacted_resource`): once, where `nemo.lens._sdk._pipeline.build_resource`
  builds it, after the SDK merged `OTEL_RESOURCE_ATTRIBUTES` in.

The work runs at export, once per batch or collection, never on the recording path;
anything with nothing to hide is handed on as the same object (no copy).
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics.export import (
    Gauge,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, Status, StatusCode

from nemo.lens import _otel_internals
from nemo.lens._redaction import DEFAULT_ENTRIES, matches, redact_text, redacted_mapping
from nemo.lens._sdk._forwarding import Forwarding
from nemo.lens._warn_once import WarnOnce

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens redaction at export")

#: The attributes the SDK writes exception texts into (semantic conventions); their
#: `key=value` pairs pass `redact_text`.
EXCEPTION_TEXT_KEYS: Final = frozenset({"exception.message", "exception.stacktrace"})


# --- attributes -------------------------------------------------------------------------------


def redacted_attributes(
    attributes: Mapping[str, Any] | None, *, nested: bool = False
) -> dict[str, Any] | None:
    """A copy of `attributes` with secret values redacted, or None when nothing changes.

    The key rule is `nemo.lens._redaction.redacted_mapping`'s (with `nested`, the
    mappings and lists of a log record's values are searched too); the exception texts
    pass `redact_text`.
    """
    if not attributes:
        return None
    changed = redacted_mapping(attributes, nested=nested)
    for key in EXCEPTION_TEXT_KEYS:
        value = (attributes if changed is None else changed).get(key)
        if not isinstance(value, str):
            continue
        hidden = redact_text(value)
        if hidden != value:
            if changed is None:
                changed = dict(attributes)
            changed[key] = hidden
    return changed


def redacted_resource(resource: Resource) -> Resource:
    """`resource` itself when no key is secret, else a copy (of the same class) with those
    values redacted."""
    attributes = redacted_mapping(resource.attributes)
    return resource if attributes is None else type(resource)(attributes, resource.schema_url)


def _bounded(values: Mapping[str, Any], dropped: int, *, always: bool = False) -> Mapping[str, Any]:
    """`values` (already cleaned by the SDK), still counting the `dropped` attributes.

    A plain mapping when nothing was dropped (a span's, event's or link's count then
    reads 0), unless `always` (a log record's count reads `.dropped` in SDK 1.23-1.30).
    """
    if not dropped and not always:
        return values
    bounded = BoundedAttributes(attributes=values, immutable=True)
    bounded.dropped = dropped
    return bounded


def _dropped(attributes: object) -> int:
    return attributes.dropped if isinstance(attributes, BoundedAttributes) else 0


def _bounded_list(items: Sequence[Any], dropped: int) -> Sequence[Any]:
    if not dropped:
        return items
    bounded = BoundedList.from_seq(None, items)
    bounded.dropped = dropped
    return bounded


# --- spans ------------------------------------------------------------------------------------


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """`span` itself when it has nothing to hide, else a copy with its secrets redacted
    (dropped counts kept)."""
    held_attributes, held_events, held_links = _otel_internals.span_containers(span, ReadableSpan)
    status = span.status
    if (
        not held_attributes
        and not held_events
        and not held_links
        and status.status_code is not StatusCode.ERROR
    ):
        return span  # the usual span: nothing a secret could be in
    attributes = redacted_attributes(held_attributes)
    original_events = span.events if held_events else ()
    events: list[Event] | None = None
    for index, event in enumerate(original_events):
        event_attributes = redacted_attributes(event.attributes)
        if event_attributes is not None:
            if events is None:
                events = list(original_events)
            events[index] = Event(
                event.name,
                _bounded(event_attributes, _dropped(event.attributes)),
                event.timestamp,
            )
    original_links = span.links if held_links else ()
    links: list[Link] | None = None
    for index, link in enumerate(original_links):
        link_attributes = redacted_attributes(link.attributes)
        if link_attributes is not None:
            if links is None:
                links = list(original_links)
            links[index] = Link(link.context, _bounded(link_attributes, _dropped(link.attributes)))
    description = status.description
    if status.status_code is StatusCode.ERROR and description:
        hidden = redact_text(description)
        if hidden != description:
            status = Status(StatusCode.ERROR, hidden)
    if attributes is None and events is None and links is None and status is span.status:
        return span
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=(
            span.attributes if attributes is None else _bounded(attributes, span.dropped_attributes)
        ),
        events=_bounded_list(original_events if events is None else events, span.dropped_events),
        links=_bounded_list(original_links if links is None else links, span.dropped_links),
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingSpanExporter(Forwarding, SpanExporter):
    """Forwards each batch to `exporter` with every span's secrets redacted.

    A span that cannot be redacted is dropped (with one warning), never sent as it was.
    """

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        handed: list[ReadableSpan] = []
        for span in spans:
            try:
                handed.append(redacted_span(span))
            except Exception as exc:
                _warnings.failure("redacting a span before export", exc, "the span was dropped")
        result: SpanExportResult = self._exporter.export(handed)
        return result


# --- logs -------------------------------------------------------------------------------------


def redacted_log_batch(batch: Sequence[Any]) -> list[Any]:
    """`batch` with every record's secret attributes redacted (`RedactingLogExporter`'s
    export, in `_logging`).

    A record's attributes are replaced in place: the batch processor hands each record to
    that one exporter, after every processor has seen it. A record that cannot be
    redacted is dropped (with one warning).
    """
    handed: list[Any] = []
    for item in batch:
        try:
            record = item.log_record
            attributes = redacted_attributes(record.attributes, nested=True)
            if attributes is not None:
                dropped = _dropped(record.attributes)
                record.attributes = _bounded(attributes, dropped, always=True)
            handed.append(item)
        except Exception as exc:
            _warnings.failure("redacting a log record before export", exc, "the record was dropped")
    return handed


# --- metrics ----------------------------------------------------------------------------------


def redact_collections(reader: object) -> bool:
    """Make every collection of `reader` return its points with secret attributes redacted.

    Wraps the collection callback the `MeterProvider` gave the reader, as the fork gate
    does (`nemo.lens._sdk._fork.gate_metric_reader`), so it covers every kind of reader.
    A collection that cannot be redacted returns nothing (with one warning). Returns
    False, leaving the reader as it was, on an SDK release without that callback.
    """
    original = _otel_internals.collect_callback(reader)
    if original is None:
        _logger.warning(
            "this OpenTelemetry SDK gives %s no collection callback; metric attributes "
            "with secret-looking keys are exported as they were recorded",
            type(reader).__name__,
        )
        return False

    def collect_redacted(*args: Any, **kwargs: Any) -> Any:
        collected = original(*args, **kwargs)
        if not isinstance(collected, MetricsData):
            return collected
        try:
            return redacted_metrics(collected)
        except Exception as exc:
            _warnings.failure(
                "redacting metric points before export", exc, "the collection was dropped"
            )
            return None

    _otel_internals.replace_collect_callback(reader, collect_redacted)
    return True


def redacted_metrics(data: MetricsData) -> MetricsData:
    """`data` itself when no point has a secret attribute, else a redacted copy."""
    changed = False
    resource_metrics = []
    for resource in data.resource_metrics:
        scopes = []
        scopes_changed = False
        for scope in resource.scope_metrics:
            metrics = list(map(_redacted_metric, scope.metrics))
            if any(map(operator.is_not, metrics, scope.metrics)):  # in C: most are equal
                scope = dataclasses.replace(scope, metrics=metrics)
                scopes_changed = True
            scopes.append(scope)
        if scopes_changed:
            changed = True
            resource = dataclasses.replace(resource, scope_metrics=scopes)
        resource_metrics.append(resource)
    return dataclasses.replace(data, resource_metrics=resource_metrics) if changed else data


#: Point attribute keys found to hide nothing (not secret, not an exception text), so a
#: collection tests most points in one set comparison; bounded, past it keys are tested.
_plain_point_keys: set[str] = set()
_PLAIN_POINT_KEYS_MAX: Final = 4096
_ATTRIBUTES: Final = operator.attrgetter("attributes")


def _hides_nothing(attributes: Mapping[str, Any]) -> bool:
    """True when no key of point `attributes` is secret or an exception text."""
    keys = attributes.keys()
    if keys <= _plain_point_keys:
        return True
    for key in keys:
        if type(key) is not str or key in EXCEPTION_TEXT_KEYS or matches(key, DEFAULT_ENTRIES):
            return False
    if len(_plain_point_keys) < _PLAIN_POINT_KEYS_MAX:
        _plain_point_keys.update(keys)
    return True


def _redacted_metric(metric: Metric) -> Metric:
    points = getattr(metric.data, "data_points", ())
    try:  # one set comparison per point, all in C (None attributes take the long way)
        if all(map(_plain_point_keys.issuperset, map(_ATTRIBUTES, points))):
            return metric
    except TypeError:
        pass
    hidden = [
        None
        if not point.attributes or _hides_nothing(point.attributes)
        else redacted_attributes(point.attributes)
        for point in points
    ]
    if all(attributes is None for attributes in hidden):
        return metric
    is_gauge = isinstance(metric.data, Gauge)
    # Series that differed only in a secret value are one series now: merge their points.
    merged: dict[str, Any] = {}
    for point, attributes in zip(points, hidden, strict=True):
        if attributes is not None:
            point = dataclasses.replace(point, attributes=attributes)
        key = repr(sorted(point.attributes.items()))
        earlier = merged.get(key)
        merged[key] = point if earlier is None else _merged(earlier, point, is_gauge, metric)
    data: Any = metric.data  # Sum, Gauge, Histogram or ExponentialHistogram
    data = dataclasses.replace(data, data_points=list(merged.values()))
    return dataclasses.replace(metric, data=data)


def _merged(first: Any, second: Any, is_gauge: bool, metric: Metric) -> Any:
    """One point for two of the same series: gauges keep the later value, sums add,
    explicit-bucket histograms add their buckets; any other kind keeps the first point."""
    starts = [t for t in (first.start_time_unix_nano, second.start_time_unix_nano) if t]
    span = {
        "start_time_unix_nano": min(starts) if starts else first.start_time_unix_nano,
        "time_unix_nano": max(first.time_unix_nano, second.time_unix_nano),
    }
    if isinstance(first, NumberDataPoint):
        if is_gauge:
            return second if second.time_unix_nano >= first.time_unix_nano else first
        return dataclasses.replace(first, value=first.value + second.value, **span)
    if isinstance(first, HistogramDataPoint) and first.explicit_bounds == second.explicit_bounds:
        return dataclasses.replace(
            first,
            count=first.count + second.count,
            sum=first.sum + second.sum,
            bucket_counts=[
                a + b for a, b in zip(first.bucket_counts, second.bucket_counts, strict=True)
            ],
            min=min(first.min, second.min),
            max=max(first.max, second.max),
            **span,
        )
    _warnings.warn(
        ("merge", metric.name),
        "metric %r: two series differ only in a redacted attribute value and their points "
        "(%s) cannot be merged; one of them is exported",
        metric.name,
        type(first).__name__,
    )
    return first
