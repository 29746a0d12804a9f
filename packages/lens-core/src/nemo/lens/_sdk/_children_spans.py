"""A forked child's ended spans as bytes, and back, for its parent's trace pipeline.

In the child, the gated span processor (`nemo.lens._sdk._span_queue`) encodes each span
it would have queued and writes it into the child's region (`nemo.lens._forked_children`)
instead: the child never calls into its parent's batch processor, whose locks may be held
for good. In the parent, the records are decoded into spans of the parent's resource and
queued like the parent's own. Each span keeps its ids and its parent's (so a span started
under the span that was current at the fork nests under it) and gets the child's pid as
its `process.pid` attribute.

The encoding is JSON: every span attribute value (str, bool, int, float, and sequences of
them) has a JSON form, sequences come back as tuples.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from nemo.lens import semconv


def encode_span(span: ReadableSpan, pid: int) -> bytes:
    """`span` as one record's payload, with `pid` (the child's) to become `process.pid`."""
    scope = span.instrumentation_scope
    document = {
        "n": span.name,
        "c": _context(span.context),
        "p": _context(span.parent),
        "k": span.kind.name,
        "s": span.start_time,
        "e": span.end_time,
        "a": _attributes(span.attributes),
        "ev": [
            [event.name, event.timestamp, _attributes(event.attributes)] for event in span.events
        ],
        "l": [[_context(link.context), _attributes(link.attributes)] for link in span.links],
        "st": [span.status.status_code.name, span.status.description],
        "i": None if scope is None else [scope.name, scope.version, scope.schema_url],
        "pid": pid,
    }
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def decode_span(payload: bytes, resource: Resource) -> ReadableSpan:
    """The span a child encoded, under `resource` (the parent's pipeline's)."""
    document = json.loads(payload)
    attributes = _attributes_from(document["a"])
    attributes[semconv.PROCESS_PID] = document["pid"]
    scope = document["i"]
    code, description = document["st"]
    return ReadableSpan(
        name=document["n"],
        context=_context_from(document["c"]),
        parent=_context_from(document["p"]),
        resource=resource,
        attributes=attributes,
        events=[
            Event(name, _attributes_from(event_attributes), timestamp)
            for name, timestamp, event_attributes in document["ev"]
        ],
        links=[
            Link(_context_from(context), _attributes_from(link_attributes))  # type: ignore[arg-type]
            for context, link_attributes in document["l"]
        ],
        kind=SpanKind[document["k"]],
        status=Status(StatusCode[code], description),
        start_time=document["s"],
        end_time=document["e"],
        instrumentation_scope=None if scope is None else InstrumentationScope(*scope),
    )


def _context(context: SpanContext | None) -> list[Any] | None:
    if context is None:
        return None
    return [
        context.trace_id,
        context.span_id,
        int(context.trace_flags),
        context.is_remote,
        list(context.trace_state.items()),
    ]


def _context_from(encoded: list[Any] | None) -> SpanContext | None:
    if encoded is None:
        return None
    trace_id, span_id, flags, is_remote, state = encoded
    return SpanContext(
        trace_id=trace_id,
        span_id=span_id,
        is_remote=is_remote,
        trace_flags=TraceFlags(flags),
        trace_state=TraceState([(key, value) for key, value in state]),
    )


def _attributes(attributes: Mapping[str, Any] | None) -> list[list[Any]]:
    return [
        [key, list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value]
        for key, value in (attributes or {}).items()
    ]


def _attributes_from(encoded: list[list[Any]]) -> dict[str, Any]:
    return {key: tuple(value) if type(value) is list else value for key, value in encoded}
