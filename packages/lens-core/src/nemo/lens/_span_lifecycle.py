"""The lifecycle of every span lens opens around user code, and what it hands the SDK.

`SpanLifecycle` runs the spans of `managed_span`, `span_cm` and `trace_fn`
(`nemo.lens.helpers`) and of `traced_remote_call` (`nemo.lens.contrib.ray`), so all of
them keep the same guarantees: nothing raises into the caller, the span is made current
and left by lens itself (detached only in the Context that attached it), an exception
from the body is recorded the same way, and names, attributes and exception texts are
encodable, secret-looking attributes redacted. One odd value never makes a whole export
batch fail.

The warnings of the span helpers go to the logger of `nemo.lens.helpers`, the module
consumers import them from (and filter on); `contrib.ray` names its own.
"""

from __future__ import annotations

import contextvars
import logging
import traceback
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from nemo.lens import _value_limits
from nemo.lens._attributes import attribute_key, attribute_value, encodable_text, is_encodable
from nemo.lens._redaction import DEFAULT_ENTRIES, REDACTED, matches, redaction_entries
from nemo.lens._warn_once import WarnOnce

#: The span helpers' warning memory, on the logger of the module they are imported from.
WARNINGS: Final = WarnOnce(logging.getLogger("nemo.lens.helpers"), "nemo.lens span helpers")
#: What the span helpers' failure warnings say happens next.
CARRY_ON: Final = "lens carries on without it"

# The tracer a helper uses without `tracer=`, per scope: `trace.get_tracer` costs ~10 us on
# SDK 1.45 (it rewrites the warning filters and builds scope objects), the hit test in
# `SpanLifecycle._start` well under 1 us. scope -> (the global provider and the
# `trace.get_tracer` function it was got with, the tracer). An entry is used only while
# both are the same objects. One dict entry is read or replaced at a time, which is
# atomic: no lock is needed.
_default_tracers: dict[str, tuple[object, object, Tracer]] = {}


def forget_default_tracers() -> None:
    """Drop the cached default tracers (`nemo.lens.testing` resets call it), so a provider
    the globals forgot is not kept alive by the cache."""
    _default_tracers.clear()


def _look_up_default_tracer(scope: str, provider: object) -> Tracer:
    """`trace.get_tracer(scope)`, cached under `provider` (the global one, read just before)."""
    get_tracer = trace.get_tracer
    tracer = get_tracer(scope)
    # Never cache under the proxy provider: its ProxyTracer binds itself for good to the
    # first real provider, while `nemo.lens.testing` can forget that provider and return
    # to the proxy. Re-reading the provider keeps out a tracer got across a swap.
    if not isinstance(provider, trace.ProxyTracerProvider) and (
        trace.get_tracer_provider() is provider
    ):
        _default_tracers[scope] = (provider, get_tracer, tracer)
    return tracer


def warn_failure(where: str, exc: BaseException) -> None:
    """Log a recording failure once per (call site, exception type)."""
    WARNINGS.failure(where, exc, CARRY_ON)


# --- setting attributes safely ----------------------------------------------------------------


def set_attributes_safely(
    span: Span | None,
    attributes: Mapping[str, object],
    redact_keys: frozenset[str] | None = None,
) -> None:
    """`nemo.lens.helpers.safe_set_span_attributes` (see there); never raises."""
    if span is None:
        return
    try:
        if not span.is_recording():
            return
        try:
            entries = redaction_entries(redact_keys)
        except Exception as exc:
            warn_failure("safe_set_span_attributes: reading redact_keys", exc)
            entries = DEFAULT_ENTRIES
        accepted: dict[str, Any] = {}
        for raw_key, value in attributes.items():
            key = attribute_key(raw_key)
            if value is None or key is None:
                continue
            if matches(key, entries):
                accepted[key] = REDACTED
                continue
            carried = attribute_value(value)
            if carried is not None:
                accepted[key] = carried
        if accepted:
            span.set_attributes(accepted)
    except Exception as exc:
        warn_failure("safe_set_span_attributes", exc)


# --- what the SDK is handed -------------------------------------------------------------------


def encodable_span_name(name: object) -> str:
    """`name` as a plain, encodable str: OTLP cannot encode bytes, objects or lone surrogates.

    Bytes are decoded as UTF-8 with U+FFFD for what does not decode, other objects go
    through `str()`, and lone surrogates (an `os.fsdecode`d file name) become U+FFFD. A
    name that had to change is warned about once per kind.
    """
    if type(name) is str and name.isascii():
        return name
    try:
        if isinstance(name, str):
            plain = str.__str__(name)
            kind = "" if is_encodable(plain) else "a str with lone surrogates"
        elif isinstance(name, (bytes, bytearray)):
            plain = bytes(name).decode("utf-8", "replace")
            kind = type(name).__name__
        else:
            plain = str(name)
            plain = plain if type(plain) is str else str.__str__(plain)
            kind = type(name).__name__
    except Exception as exc:
        warn_failure("span name: converting it to str", exc)
        return f"<{type(name).__name__}>"
    text = encodable_text(plain)
    if kind:
        WARNINGS.warn(
            ("span name", kind),
            "a span name must be a str that encodes as UTF-8, got %s; lens uses %r instead. "
            "Further span names of this kind are not logged.",
            kind,
            text,
        )
    return text


def record_span_error(
    span: Span,
    exc: Exception,
    record_exception: bool,
    typed_description: bool,
    where: str,
    *,
    warnings: WarnOnce = WARNINGS,
    consequence: str = CARRY_ON,
) -> None:
    """Record `exc` on `span` (the SDK's exception event) and set ERROR status; never raises.

    Under a lens pipeline's length limit (`_value_limits.event_attribute_limit`) the
    traceback is cut from its head, so its last lines (the exception's own) are kept; the
    SDK would keep its first.

    A step that fails is logged once through `warnings` (the span helpers' by default),
    as `<where>: <step> failed (...); <consequence>`.
    """
    try:
        raw: str | None = str(exc)
    except Exception:
        raw = None
    message = encodable_text(raw) if raw is not None else f"<{type(exc).__name__}: str() failed>"
    try:
        if record_exception:
            encodable = raw is None or is_encodable(raw)
            limit = _value_limits.event_attribute_limit()
            if encodable and limit is None:
                span.record_exception(exc)
            else:
                # The SDK writes str(exc) and the traceback (which repeats it) as they are,
                # and one lone surrogate there would make the whole batch unencodable; its
                # limit keeps the traceback's head. Given attributes win over the SDK's.
                stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                if not encodable:
                    stack = encodable_text(stack)
                given = {"exception.stacktrace": _value_limits.keep_tail(stack, limit)}
                if not encodable:
                    given["exception.message"] = message
                span.record_exception(exc, attributes=given)
    except Exception as failure:
        warnings.failure(f"{where}: recording the exception", failure, consequence)
    description = f"{type(exc).__name__}: {message}" if typed_description else message
    try:
        span.set_status(Status(StatusCode.ERROR, description))
    except Exception as failure:
        warnings.failure(f"{where}: setting the ERROR status", failure, consequence)


# --- the span lifecycle: start, make current, leave, end, wherever that happens ---------------

# Set next to every attach: resetting it tells, without OpenTelemetry's ERROR log, whether
# the span is left in the contextvars Context that made it current. Only there can the
# attach be undone; a generator resumed in another task or context leaves it elsewhere.
_ENTERED_HERE: Final[contextvars.ContextVar[None]] = contextvars.ContextVar(
    "nemo.lens.span_entered_here"
)


class SpanLifecycle:
    """One span, started, made current, left and ended without ever raising into the caller.

    The lifecycle of every span lens opens around user code: the enabled `managed_span`,
    `span_cm` and `trace_fn`, and `nemo.lens.contrib.ray`'s `traced_remote_call`. Its
    guarantees: each step that fails costs only itself (one warning per kind, through
    `warnings`) and the body runs whatever happens; the body's own exception propagates
    unchanged, an `Exception` being recorded first (`record_span_error`: event and ERROR
    status); the attach is undone only in the Context that made it (elsewhere lens warns
    once and ends the span without detaching); the span name and attributes handed to the
    SDK are encodable, and secret-looking attributes are redacted.

    Two ways to use it:

    - `with SpanLifecycle(...) as span:` starts the span, makes it current for the block,
      then leaves it and ends it.
    - Step by step, for a span over a generator's whole iteration but current only while
      its body runs: `open()`, then `with lifecycle.current():` around each step, then
      `close(failure)`.

    Args:
        where: The caller's name, for warnings ("managed_span").
        name: The span name (made an encodable str).
        tracer: The tracer; None uses `trace.get_tracer(scope)`, cached per provider.
        scope: The default tracer's scope.
        attributes: Set on the span with `safe_set_span_attributes`.
        record_exception: Record an `Exception` as the span's exception event.
        typed_description: The ERROR description reads `TypeName: message`.
        fallback: What `__enter__` gives when no span could be started.
        parent: The Context to start the span under (a carried one); None uses the
            current Context. A carried parent stays current under a span that is not
            valid (the no-op tracer of API 1.23 returns the invalid span, which would cut
            the carried trace for everything the body starts).
    """

    __slots__ = (
        "_attached",
        "_attributes",
        "_fallback",
        "_marker",
        "_name",
        "_parent",
        "_prior",
        "_record_exception",
        "_scope",
        "_span",
        "_token",
        "_tracer",
        "_typed_description",
        "_under",
        "_where",
    )

    #: Where the failure warnings go, and what they say happens next. A subclass names its
    #: own (`nemo.lens.contrib.ray` logs on its logger: "the method runs without it").
    warnings: ClassVar[WarnOnce] = WARNINGS
    consequence: ClassVar[str] = CARRY_ON

    # Set by `_start` (`_under`) and `_make_current` (the rest).
    _under: otel_context.Context
    _token: object
    _marker: contextvars.Token[None] | None
    _prior: otel_context.Context | None
    _attached: otel_context.Context | None

    def __init__(
        self,
        where: str,
        name: object,
        tracer: Tracer | None,
        scope: str,
        attributes: Mapping[str, object],
        record_exception: bool = True,  # positional too: trace_fn's partial passes no keyword
        typed_description: bool = False,
        fallback: Span | None = None,
        parent: otel_context.Context | None = None,
    ) -> None:
        self._where = where
        self._name: object = name
        self._tracer = tracer
        self._scope = scope
        self._attributes = attributes
        self._record_exception = record_exception
        self._typed_description = typed_description
        self._fallback = fallback
        self._parent = parent
        # The other five slots are set by `_start` and `_make_current` before anything reads
        # them: five stores less per span.
        self._span: Span | None = None

    def __enter__(self) -> Span | None:
        span = self._start()
        if span is None:
            return self._fallback
        # Under the current Context, the Context before the attach is the parent, read once.
        self._make_current(span, self._under if self._parent is None else None)
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        span = self._span
        if span is None:
            return
        self._leave()
        self._end(span, exc)

    # -- step by step --------------------------------------------------------------------

    def open(self) -> None:
        """Start the span without making it current (a warning, and no span, on failure)."""
        self._start()

    def current(self) -> AbstractContextManager[None]:
        """A `with` block during which the open span is current; a no-op without one."""
        return _Step(self)

    def close(self, failure: BaseException | None) -> None:
        """End the span, recording `failure` first if it is an `Exception`; once."""
        span = self._span
        if span is not None:
            self._end(span, failure)

    # -- the steps themselves ----------------------------------------------------------------

    def _failed(self, step: str, exc: BaseException) -> None:
        self.warnings.failure(f"{self._where}: {step}", exc, self.consequence)

    def _start(self) -> Span | None:
        """Start the span under the parent and set its attributes; None if none could be had."""
        name = self._name
        if type(name) is not str or not name.isascii():  # a plain name needs no call
            self._name = name = encodable_span_name(name)
        try:
            tracer = self._tracer
            if tracer is None:
                # The cache hit test, inline: one call less per span.
                provider = trace.get_tracer_provider()
                cached = _default_tracers.get(self._scope)
                if cached is not None and cached[0] is provider and cached[1] is trace.get_tracer:
                    tracer = cached[2]
                else:
                    tracer = _look_up_default_tracer(self._scope, provider)
            # The parent, read once: handed to the tracer (which would read it again, a
            # locked call on OpenTelemetry 1.23) and attached under the span.
            under = self._parent
            if under is None:
                under = otel_context.get_current()
            span = tracer.start_span(name, context=under)
        except Exception as exc:
            self._failed("starting the span", exc)
            return None
        if span is None or not callable(getattr(span, "end", None)):
            self.warnings.warn(
                (self._where, "not a span"),
                "%s: the tracer's start_span returned %s, not a span; lens runs the body "
                "without one. Further cases from this call site are not logged.",
                self._where,
                type(span).__name__,
            )
            return None
        if self._attributes:
            set_attributes_safely(span, self._attributes)
        self._under = under
        self._span = span
        return span

    def _make_current(self, span: Span, prior: otel_context.Context | None) -> None:
        """Attach the span's Context; `prior` is the current Context (None: read it here)."""
        token: object
        marker: contextvars.Token[None] | None
        attached: otel_context.Context | None
        try:
            if prior is None:
                prior = otel_context.get_current()
            attached = self._under
            if self._parent is None or span.get_span_context().is_valid:
                attached = trace.set_span_in_context(span, attached)
            token = otel_context.attach(attached)
            marker = _ENTERED_HERE.set(None)
        except Exception as exc:
            self._failed("making the span current", exc)
            token = marker = attached = None  # leaving then does nothing
        self._token, self._marker, self._prior, self._attached = token, marker, prior, attached

    def _leave(self) -> None:
        """Undo `_make_current`, if this is the Context that made it."""
        token, marker = self._token, self._marker
        if token is None or marker is None:
            return
        self._token = self._marker = None
        try:
            _ENTERED_HERE.reset(marker)
        except (ValueError, RuntimeError):
            self._left_elsewhere()
        else:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]  # what attach returned
            except Exception as failure:
                self._failed("detaching the span", failure)

    def _left_elsewhere(self) -> None:
        """The span is left in another Context than the one that attached it: warn once, no
        detach.

        Another Context (a generator resumed in another task, thread or copy_context().run):
        OpenTelemetry's detach would fail and log an ERROR with a traceback, every step.
        Where this Context still shows the span as current (it was copied while the span
        was current), the Context before it becomes current again.
        """
        try:
            if otel_context.get_current() is self._attached:
                otel_context.attach(self._prior)  # type: ignore[arg-type]  # a Context
        except Exception as exc:
            self._failed("restoring the parent context", exc)
        self.warnings.warn(
            (self._where, "left in another context"),
            "%s: span %r was left in another context than the one that entered it (held "
            "across a generator's yield and resumed in another task, thread or context); "
            "lens ended it without detaching, which only the entering context can do. "
            "Further cases from this call site are not logged.",
            self._where,
            self._name,
        )

    def _end(self, span: Span, exc: BaseException | None) -> None:
        """Record an `Exception`, then end the span; `_span` is cleared first (ends once)."""
        self._span = None
        self._prior = self._attached = None
        if isinstance(exc, Exception):
            record_span_error(
                span,
                exc,
                self._record_exception,
                self._typed_description,
                self._where,
                warnings=self.warnings,
                consequence=self.consequence,
            )
        try:
            span.end()
        except Exception as failure:
            self._failed("ending the span", failure)


class _Step:
    """`SpanLifecycle.current()`: makes the open span current on the way in, leaves it on
    the way out (one Context does both: an async step suspends only within its task)."""

    __slots__ = ("_entered", "_lifecycle")

    def __init__(self, lifecycle: SpanLifecycle) -> None:
        self._lifecycle = lifecycle
        self._entered = False

    def __enter__(self) -> None:
        lifecycle = self._lifecycle
        span = lifecycle._span
        if span is not None:
            lifecycle._make_current(span, None)
            self._entered = True

    def __exit__(self, *exc_info: object) -> None:
        if self._entered:
            self._entered = False
            self._lifecycle._leave()
