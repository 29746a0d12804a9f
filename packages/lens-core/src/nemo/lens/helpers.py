"""The span primitives frameworks instrument their loops with.

- `managed_span(group, name, ...)`: a gated span for code inside the loop. When its group
  is off it costs about as much as `contextlib.nullcontext()`, and the body still runs.
- `trace_fn(group, name, ...)`: the same gate as a decorator, checked on every call.
- `span_cm(name, ...)`: an ungated span for top-level phases (a whole job, a checkpoint).
- `safe_set_span_attributes(span, attributes)`: sets what OpenTelemetry can carry, redacts
  secret-looking keys, and never raises.

All three span helpers start the span with `tracer.start_span` and make it current
themselves, so that they can end it safely wherever the `with` block is left: a span held
across a generator's `yield` and resumed in another context cannot be detached there, and
lens then warns once instead of letting OpenTelemetry log an ERROR with a traceback on every
step. Whatever they hand the SDK is encodable (span names, attributes, exception texts), so
one odd value never makes a whole export batch fail.

Without a `tracer=`, a helper uses `trace.get_tracer(<its scope>)` of the global provider,
cached per scope: an entry is used only while `trace.get_tracer_provider()` and
`trace.get_tracer` are the objects it was made with, so a provider installed later is used
and a test may monkeypatch `trace.get_tracer` (both are read through the module attribute
`trace`). Nothing is cached while the global provider is the API's proxy.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import re
import traceback
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast, overload

from opentelemetry import context as otel_context
from opentelemetry import trace as trace  # a module attribute consumers' tests patch
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from nemo.lens import state as _state
from nemo.lens._attributes import attribute_key, attribute_value, encodable_text, is_encodable
from nemo.lens._warn_once import WarnOnce
from nemo.lens.state import is_span_group_enabled as is_span_group_enabled  # kept importable

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "managed_span",
    "redact_value",
    "safe_set_span_attributes",
    "span_cm",
    "trace_fn",
]

_logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute keys whose values never leave the process. A key matches an entry by words,
#: not by spelling (see `is_secret_key`): `PASSWORD`, `apiKey`, `X-Api-Key`,
#: `aws_secret_access_key` and `http.request.header.authorization` are all redacted.
DEFAULT_REDACT_KEYS: Final[frozenset[str]] = frozenset(
    {
        # lens v0.2.0's list
        "prompt",
        "input_text",
        "output_text",
        "text",
        "password",
        "token",
        "secret",
        "key",
        # credentials by their other names
        "passwd",
        "passphrase",
        "passwords",
        "secrets",
        "authorization",
        "api_key",
        "apikey",
        "credential",
        "credentials",
        "private_key",
        "cookie",
        "cookies",
    }
)
REDACTED: Final = "[REDACTED]"

# Tracer scopes: spans opened by trace_fn are told apart from the context managers' spans.
_HELPERS_SCOPE: Final = "nemo.lens.helpers"
_TRACE_FN_SCOPE: Final = "nemo.lens"

_warnings = WarnOnce(_logger, "nemo.lens span helpers")

# The tracer a helper uses without `tracer=`, per scope: `trace.get_tracer` costs ~10 us on
# SDK 1.45 (it rewrites the warning filters and builds scope objects), the hit test in
# `_Span.__enter__` well under 1 us. scope -> (the global provider and the
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


def _describe(exc: BaseException) -> str:
    """`TypeName: message` for a log line; an exception whose `str()` fails is still named."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return f"{type(exc).__name__} (its message cannot be shown)"


def _warn_once(where: str, exc: BaseException) -> None:
    """Log a recording failure once per (call site, exception type)."""
    kind = type(exc).__name__
    if _warnings.first((where, kind)):
        _logger.warning(
            "%s failed (%s); lens carries on without it. Further %s errors from this call "
            "site are not logged.",
            where,
            _describe(exc),
            kind,
        )


# --- redaction ------------------------------------------------------------------------------

# The words of a key: runs of letters split at camelCase humps, and runs of digits;
# everything else separates. "X-Api-Key" and "apiKey" both give ("api", "key").
_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Words that make a neighbouring entry a quantity, not a secret: "token_count",
# "num_token", "time_to_first_token", "prompt_len", "prompt_tokens", "gen_ai.token.type",
# "api_key_id".
_MEASURE_BEFORE: Final = frozenset(
    {"avg", "first", "last", "max", "mean", "min", "n", "next", "num", "per", "total"}
)
_MEASURE_AFTER: Final = frozenset(
    {
        "budget",
        "chars",
        "count",
        "counts",
        "fraction",
        "id",
        "ids",
        "idx",
        "index",
        "len",
        "length",
        "limit",
        "limits",
        "num",
        "number",
        "per",
        "rate",
        "ratio",
        "size",
        "sizes",
        "tokens",
        "total",
        "type",
        "types",
        "usage",
    }
)

_Entries = frozenset[tuple[str, ...]]


@functools.lru_cache(maxsize=4096)
def _words(key: str) -> tuple[str, ...]:
    return tuple(word.lower() for word in _WORD.findall(key))


def _entries_of(redact_keys: frozenset[object]) -> _Entries:
    return frozenset(
        words for entry in redact_keys if isinstance(entry, str) and (words := _words(entry))
    )


_DEFAULT_ENTRIES: Final = _entries_of(DEFAULT_REDACT_KEYS)


@functools.lru_cache(maxsize=64)
def _extended_entries(redact_keys: frozenset[object]) -> _Entries:
    return _DEFAULT_ENTRIES | _entries_of(redact_keys)


def _redaction_entries(redact_keys: Iterable[str] | None) -> _Entries:
    """The defaults plus the caller's keys, as word tuples."""
    if redact_keys is None or redact_keys is DEFAULT_REDACT_KEYS:
        return _DEFAULT_ENTRIES
    if not isinstance(redact_keys, frozenset):
        if isinstance(redact_keys, str):
            redact_keys = (redact_keys,)  # one key, not its letters
        redact_keys = frozenset(redact_keys)
    return _extended_entries(redact_keys)


@functools.lru_cache(maxsize=8192)
def _matches(key: str, entries: _Entries) -> bool:
    words = _words(key)
    if words in entries:  # a key made of exactly an entry's words is always redacted
        return True
    count = len(words)
    for entry in entries:
        size = len(entry)
        for start in range(count - size + 1):
            if words[start : start + size] != entry:
                continue
            before = words[start - 1] if start else ""
            after = words[start + size] if start + size < count else ""
            if before not in _MEASURE_BEFORE and after not in _MEASURE_AFTER:
                return True
    return False


def is_secret_key(key: object, redact_keys: Iterable[str] | None = None) -> bool:
    """True when the value of attribute `key` must be redacted; never raises.

    The rule: `key` and every entry (`DEFAULT_REDACT_KEYS` plus `redact_keys`, which
    extend the defaults, never replace them) are split into lower-case words, at
    non-alphanumerics and camelCase humps. The key is secret when an entry's words appear
    in it in a row, unless a quantity word stands right next to them (`num_`, `max_`,
    `first_` before; `_count`, `_len`, `_type`, `_id`, `_per`, ... after), so
    `access_token`, `AWS_SECRET_ACCESS_KEY` and `gen_ai.prompt` are secret while
    `token_count`, `num_token` and `time_to_first_token` are not. Entries match whole
    words only: `tokens_per_sec`, `num_tokens` and `tokenizer` never match `token`. A key
    made of exactly an entry's words always matches.
    """
    try:
        if not isinstance(key, str):
            return False
        plain = key if type(key) is str else str.__str__(key)
    except Exception:  # an object lying about its class
        return False
    try:
        entries = _redaction_entries(redact_keys)
    except Exception as exc:  # an unusable custom set: the defaults still apply
        _warn_once("redaction: reading redact_keys", exc)
        entries = _DEFAULT_ENTRIES
    return _matches(plain, entries)


def redact_value(key: str, value: str, redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS) -> str:
    """Return `"[REDACTED]"` if `key` is a secret key (see `is_secret_key`), else `value`.

    `redact_keys` extends `DEFAULT_REDACT_KEYS`; the default keys are always redacted.
    """
    return REDACTED if is_secret_key(key, redact_keys) else value


def safe_set_span_attributes(
    span: Span | None,
    attributes: Mapping[str, object],
    redact_keys: frozenset[str] | None = None,
) -> None:
    """Set `attributes` on `span`, skipping what OpenTelemetry cannot carry; never raises.

    Returns at once for a None or non-recording span. None values are skipped; bool, int,
    float and str values are set; lists and tuples of one scalar type are set as tuples;
    anything else is dropped silently (the rule of `nemo.lens._attributes`). A secret key
    (see `is_secret_key`) is set to `"[REDACTED]"`, whatever its value's type, and its
    value is never logged.

    Args:
        span: The span to annotate, or None.
        attributes: Attribute key -> value.
        redact_keys: Keys redacted besides `DEFAULT_REDACT_KEYS`; None means the defaults.
    """
    if span is None:
        return
    try:
        if not span.is_recording():
            return
        try:
            entries = _redaction_entries(redact_keys)
        except Exception as exc:
            _warn_once("safe_set_span_attributes: reading redact_keys", exc)
            entries = _DEFAULT_ENTRIES
        accepted: dict[str, Any] = {}
        for raw_key, value in attributes.items():
            key = attribute_key(raw_key)
            if value is None or key is None:
                continue
            if _matches(key, entries):
                accepted[key] = REDACTED
                continue
            carried = attribute_value(value)
            if carried is not None:
                accepted[key] = carried
        if accepted:
            span.set_attributes(accepted)
    except Exception as exc:
        _warn_once("safe_set_span_attributes", exc)


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
        _warn_once("span name: converting it to str", exc)
        return f"<{type(name).__name__}>"
    text = encodable_text(plain)
    if kind:
        _warnings.warn(
            ("span name", kind),
            "a span name must be a str that encodes as UTF-8, got %s; lens uses %r instead. "
            "Further span names of this kind are not logged.",
            kind,
            text,
        )
    return text


def record_span_error(
    span: Span, exc: Exception, record_exception: bool, typed_description: bool, where: str
) -> None:
    """Record `exc` on `span` (the SDK's exception event) and set ERROR status; never raises."""
    try:
        raw: str | None = str(exc)
    except Exception:
        raw = None
    message = encodable_text(raw) if raw is not None else f"<{type(exc).__name__}: str() failed>"
    try:
        if record_exception:
            if raw is None or is_encodable(raw):
                span.record_exception(exc)
            else:
                # The SDK writes str(exc) and the traceback (which repeats it) as they are,
                # and one lone surrogate there would make the whole batch unencodable.
                stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                span.record_exception(
                    exc,
                    attributes={
                        "exception.message": message,
                        "exception.stacktrace": encodable_text(stack),
                    },
                )
    except Exception as failure:
        _warn_once(f"{where}: recording the exception", failure)
    description = f"{type(exc).__name__}: {message}" if typed_description else message
    try:
        span.set_status(Status(StatusCode.ERROR, description))
    except Exception as failure:
        _warn_once(f"{where}: setting the ERROR status", failure)


# --- making a span current and leaving it, wherever that happens ------------------------------

# Set next to every attach: resetting it tells, without OpenTelemetry's ERROR log, whether
# the `with` block is left in the contextvars Context that entered it. Only there can the
# attach be undone; a generator resumed in another task or context leaves it elsewhere.
_ENTERED_HERE: Final[contextvars.ContextVar[None]] = contextvars.ContextVar(
    "nemo.lens.span_entered_here"
)


class _Span:
    """One span made current for a `with` block: the enabled `managed_span`, `span_cm`, `trace_fn`.

    It starts the span on the tracer, sets the attributes safely, attaches it to the
    current context and yields it; on the way out it records an `Exception` (ERROR
    status), detaches and ends the span. Each step that fails costs only itself (one
    warning per kind); nothing raises into the caller, and the body's own exception
    propagates unchanged.
    """

    __slots__ = (
        "_attached",
        "_attributes",
        "_fallback",
        "_marker",
        "_name",
        "_parent",
        "_record_exception",
        "_scope",
        "_span",
        "_token",
        "_tracer",
        "_typed_description",
        "_where",
    )

    # Set by __enter__ before `_span` (see __init__).
    _token: object
    _marker: contextvars.Token[None] | None
    _parent: otel_context.Context | None
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
    ) -> None:
        self._where = where
        self._name: object = name
        self._tracer = tracer
        self._scope = scope
        self._attributes = attributes
        self._record_exception = record_exception
        self._typed_description = typed_description
        self._fallback = fallback
        # __exit__ reads the other slots only once __enter__ has set `_span`, and __enter__
        # sets them all first: four stores less per span.
        self._span: Span | None = None

    def __enter__(self) -> Span | None:
        where = self._where
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
            # locked call on OpenTelemetry 1.23) and attached under the span below.
            parent = otel_context.get_current()
            span = tracer.start_span(name, context=parent)
        except Exception as exc:
            _warn_once(f"{where}: starting the span", exc)
            return self._fallback
        if span is None or not callable(getattr(span, "end", None)):
            _warnings.warn(
                (where, "not a span"),
                "%s: the tracer's start_span returned %s, not a span; lens runs the body "
                "without one. Further cases from this call site are not logged.",
                where,
                type(span).__name__,
            )
            return self._fallback
        if self._attributes:
            safe_set_span_attributes(span, self._attributes)
        token: object
        marker: contextvars.Token[None] | None
        attached: otel_context.Context | None
        try:
            attached = trace.set_span_in_context(span, parent)
            token = otel_context.attach(attached)
            marker = _ENTERED_HERE.set(None)
        except Exception as exc:
            _warn_once(f"{where}: making the span current", exc)
            token = marker = attached = None  # __exit__ then only ends the span
        self._token, self._marker, self._parent, self._attached = token, marker, parent, attached
        self._span = span
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        span = self._span
        if span is None:
            return
        token, marker, parent, attached = self._token, self._marker, self._parent, self._attached
        self._span = self._token = self._marker = self._parent = self._attached = None
        if isinstance(exc, Exception):
            record_span_error(
                span, exc, self._record_exception, self._typed_description, self._where
            )
        if token is not None and marker is not None:
            # Undo the attach if this is the Context that made it (inline: one call less).
            try:
                _ENTERED_HERE.reset(marker)
            except (ValueError, RuntimeError):
                _left_elsewhere(self._where, self._name, parent, attached)
            else:
                try:
                    otel_context.detach(token)  # type: ignore[arg-type]  # what attach returned
                except Exception as failure:
                    _warn_once(f"{self._where}: detaching the span", failure)
        try:
            span.end()
        except Exception as failure:
            _warn_once(f"{self._where}: ending the span", failure)


def _left_elsewhere(
    where: str,
    name: object,  # the coerced, encodable name
    parent: object,
    attached: object,
) -> None:
    """A span left in another Context than the one that attached it: warn once, no detach.

    Another Context (a generator resumed in another task, thread or copy_context().run):
    OpenTelemetry's detach would fail and log an ERROR with a traceback, every step.
    Where this Context still shows the span as current (it was copied while the span was
    open), its parent becomes current again.
    """
    try:
        if otel_context.get_current() is attached:
            otel_context.attach(parent)  # type: ignore[arg-type]  # the parent Context
    except Exception as exc:
        _warn_once(f"{where}: restoring the parent context", exc)
    _warnings.warn(
        (where, "left in another context"),
        "%s: span %r was left in another context than the one that entered it (held "
        "across a generator's yield and resumed in another task, thread or context); "
        "lens ended it without detaching, which only the entering context can do. "
        "Further cases from this call site are not logged.",
        where,
        name,
    )


# --- what a type checker sees -------------------------------------------------------------
#
# mypy matches a `**dict[str, V]` argument against every keyword parameter it could fill,
# so with a plain signature `managed_span("g", "n", **{"dl.iteration": it})` fails on
# `tracer: Tracer | None`. Each protocol below gives a type checker two overloads: the
# first checks `tracer` (and `record_exception`) when they are passed, the second has
# neither, so a `**{...}` of any value type fits it. The functions are typed as these
# protocols by an identity decorator, not by `@overload`, because an overloaded name
# cannot be re-imported in the `except ImportError` branch of the fallbacks pattern
# (docs/spans.md); a protocol-typed one can. The functions themselves, their bodies
# type-checked and their runtime signatures unchanged, are what runs.


class _ManagedSpanSignature(Protocol):
    @overload
    def __call__(
        self, group: str, name: str, tracer: Tracer | None = None, **attributes: object
    ) -> AbstractContextManager[Span | None]: ...

    @overload
    def __call__(
        self, group: str, name: str, **attributes: object
    ) -> AbstractContextManager[Span | None]: ...


class _SpanCmSignature(Protocol):
    @overload
    def __call__(
        self,
        name: str,
        tracer: Tracer | None = None,
        record_exception: bool = True,
        **attributes: object,
    ) -> AbstractContextManager[Span]: ...

    @overload
    def __call__(self, name: str, **attributes: object) -> AbstractContextManager[Span]: ...


def _typed_as_managed_span(
    fn: Callable[..., AbstractContextManager[Span | None]],
) -> _ManagedSpanSignature:
    return cast(_ManagedSpanSignature, fn)


def _typed_as_span_cm(fn: Callable[..., AbstractContextManager[Span]]) -> _SpanCmSignature:
    return cast(_SpanCmSignature, fn)


# --- managed_span ---------------------------------------------------------------------------


class _SpanOff:
    """The shared context manager of a disabled `managed_span`: enters to None, does nothing.

    Both methods are C callables, so a disabled `with managed_span(...)` makes no Python
    call beyond `managed_span` and its gate (see `benchmarks/bench_spans.py`):

    - `__enter__` is `NoneType`, which the `with` statement calls with no argument: None.
    - `__exit__` is `object.__init__`, bound to the instance. It accepts the three exception
      arguments and returns None (so exceptions propagate) because this class defines
      `__new__` but not `__init__`, the case in which `object.__init__` ignores extra
      arguments.
    """

    __slots__ = ()

    def __new__(cls) -> _SpanOff:
        return object.__new__(cls)

    if TYPE_CHECKING:  # what the C callables below amount to

        def __enter__(self) -> None: ...

        def __exit__(self, *exc_info: object) -> None: ...

    else:
        __enter__ = type(None)
        __exit__ = object.__init__


_SPAN_OFF: Final = _SpanOff()


@_typed_as_managed_span
def managed_span(
    group: str, name: str, tracer: Tracer | None = None, **attributes: object
) -> AbstractContextManager[Span | None]:
    """Open a span named `name` if span group `group` is enabled.

    The gate is the first thing that happens. Disabled, the context manager enters to None
    and the body still runs. Enabled, it starts a child of the current span on `tracer`
    (default: `trace.get_tracer("nemo.lens.helpers")` of the current global provider,
    cached while that provider stays installed; see the module docstring), sets
    `attributes` safely, makes the span current and yields it. An `Exception` from the body
    is recorded with ERROR status and re-raised; the span is always ended. A group name that
    cannot be looked up (its `__hash__` or `__eq__` raises) counts as disabled, with one
    warning.

    Example::

        with managed_span("step", "train_step", **{"dl.iteration": it}) as span:
            ...  # span is None when the "step" group is off

    Args:
        group: The span group gating this span.
        name: The span name.
        tracer: The tracer to use; None looks up lens's helpers tracer.
        **attributes: Span attributes, including dotted keys passed as `**{...}`.
    """
    try:
        # is_span_group_enabled's own membership test, inline: one call less per step.
        if group not in _state._enabled:
            return _SPAN_OFF
    except Exception as exc:  # an unhashable name, or a __hash__/__eq__ that raises
        _warn_once("managed_span: looking up the span group", exc)
        return _SPAN_OFF
    return _Span("managed_span", name, tracer, _HELPERS_SCOPE, attributes)


# --- span_cm --------------------------------------------------------------------------------


@_typed_as_span_cm
def span_cm(
    name: str,
    tracer: Tracer | None = None,
    record_exception: bool = True,
    **attributes: object,
) -> AbstractContextManager[Span]:
    """Open an ungated span named `name`, made current for the body; for top-level phases.

    Starts the span on `tracer` (default: `trace.get_tracer("nemo.lens.helpers")` of the
    current global provider, cached while that provider stays installed), sets `attributes`
    safely and yields the span. An exception from the body sets ERROR status
    (`TypeName: message`), is recorded as an event when `record_exception` is true, and
    propagates. If the span cannot be started, it yields a non-recording span and the body
    still runs.

    Example::

        with span_cm("checkpoint.save", num_shards=8) as span:
            save()
    """
    return cast(
        "AbstractContextManager[Span]",  # a str: no generic alias built per call
        _Span(
            "span_cm",
            name,
            tracer,
            _HELPERS_SCOPE,
            attributes,
            record_exception=record_exception,
            typed_description=True,
            fallback=trace.INVALID_SPAN,  # non-recording: the body's span calls still work
        ),
    )


# --- trace_fn -------------------------------------------------------------------------------


class _GuardedGate:
    """A non-str group name as a gate: its hash is read once and a failing `__eq__` is False.

    `gate in _state._enabled` then never raises, whatever the object does later.
    """

    __slots__ = ("_group", "_hash")

    def __init__(self, group: Hashable, group_hash: int) -> None:
        self._group = group
        self._hash = group_hash

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        try:
            return bool(self._group == other)
        except Exception as exc:
            _warn_once("trace_fn: comparing the span group name", exc)
            return False


def _gate_of(group: object) -> object:
    """What `trace_fn`'s wrappers look up in the enabled set for `group`; never raises."""
    if type(group) is str:
        return group
    try:
        if isinstance(group, str):
            return str.__str__(group)
        return _GuardedGate(group, hash(group))
    except Exception as exc:
        _warn_once("trace_fn: reading the span group name", exc)
        return object()  # a name that cannot be looked up names no group: never traced


def trace_fn(group: str, name: str, tracer: Tracer | None = None) -> Callable[[F], F]:
    """Decorate a function so each call runs in a span named `name` while `group` is on.

    The gate is checked on every call, so decorating at import, before setup, works;
    disabled, the call is a plain call. Enabled, the call runs inside a span named `name`
    on `tracer` (default: `trace.get_tracer("nemo.lens")` of the global provider at call
    time, cached while that provider stays installed), made current for the call, which
    records an exception and sets ERROR before it propagates. A coroutine function gets an
    async wrapper whose span covers the await. The wrapper keeps `functools.wraps`
    metadata. A group name that cannot be looked up never traces.

    Example::

        @trace_fn("optimizer", "optimizer.step")
        def step(model, grads): ...
    """
    gate = _gate_of(group)
    span_name = encodable_span_name(name)

    def decorate(fn: F) -> F:
        import inspect  # at decoration time, kept off `import nemo.lens`

        if inspect.iscoroutinefunction(fn):
            return cast(F, _async_wrapper(fn, gate, span_name, tracer))
        new_span = _trace_fn_spans(span_name, tracer)
        wrapper = _same_signature_wrapper(fn, gate, new_span)
        if wrapper is None:
            wrapper = _any_signature_wrapper(fn, gate, new_span)
        return cast(F, functools.wraps(fn)(wrapper))

    return decorate


# A trace_fn span has no attributes; one shared empty mapping, not a dict per call.
_NO_ATTRIBUTES: Final[Mapping[str, object]] = MappingProxyType({})


def _trace_fn_spans(name: str, tracer: Tracer | None) -> Callable[[], _Span]:
    """What a wrapper calls for each span: a partial with positional arguments only, which
    C calls without building a dict or a Python frame."""
    return functools.partial(
        _Span, "trace_fn", name, tracer, _TRACE_FN_SCOPE, _NO_ATTRIBUTES, True, True
    )


def _any_signature_wrapper(
    fn: Callable[..., Any], gate: object, new_span: Callable[[], _Span]
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            with new_span():
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


# Names the generated wrapper uses for itself; a function with such a parameter falls back.
_WRAPPER_NAMES: Final = frozenset({"_lens_fn", "_lens_gate", "_lens_span", "_lens_state"})


def _same_signature_wrapper(
    fn: Callable[..., Any], gate: object, new_span: Callable[[], _Span]
) -> Callable[..., Any] | None:
    """Build a wrapper with `fn`'s own parameter list, or None where that is not possible.

    A `(*args, **kwargs)` wrapper packs and unpacks every call, which costs several times
    a trivial function's own call. A wrapper with the same parameters passes them straight
    through, so the disabled path costs one extra frame and one set look-up.
    """
    import inspect

    if not inspect.isfunction(fn) or "__signature__" in vars(fn):
        return None
    try:
        parameters = inspect.signature(fn, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return None
    namespace: dict[str, Any] = {
        "_lens_fn": fn,
        "_lens_gate": gate,
        "_lens_span": new_span,
        "_lens_state": _state,
    }
    declared: list[str] = []
    passed: list[str] = []
    positional_only = False
    keyword_marker_needed = True
    for index, parameter in enumerate(parameters):
        pname = parameter.name
        if pname in _WRAPPER_NAMES or not pname.isidentifier():
            return None
        if positional_only and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY:
            declared.append("/")
            positional_only = False
        default = ""
        if parameter.default is not inspect.Parameter.empty:
            namespace[f"_lens_default_{index}"] = parameter.default
            default = f"=_lens_default_{index}"
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional_only = True
            declared.append(pname + default)
            passed.append(pname)
        elif parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            declared.append(pname + default)
            passed.append(pname)
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            keyword_marker_needed = False
            declared.append("*" + pname)
            passed.append("*" + pname)
        elif parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if keyword_marker_needed:
                declared.append("*")
                keyword_marker_needed = False
            declared.append(pname + default)
            passed.append(f"{pname}={pname}")
        else:  # VAR_KEYWORD
            declared.append("**" + pname)
            passed.append("**" + pname)
    if positional_only:
        declared.append("/")
    arguments = ", ".join(passed)
    source = (
        f"def wrapper({', '.join(declared)}):\n"
        f"    if _lens_gate in _lens_state._enabled:\n"
        f"        with _lens_span():\n"
        f"            return _lens_fn({arguments})\n"
        f"    return _lens_fn({arguments})\n"
    )
    exec(compile(source, f"<nemo.lens.trace_fn {fn.__qualname__}>", "exec"), namespace)
    return cast(Callable[..., Any], namespace["wrapper"])


def _async_wrapper(
    fn: Callable[..., Coroutine[Any, Any, Any]],
    gate: object,
    name: str,
    tracer: Tracer | None,
) -> Callable[..., Coroutine[Any, Any, Any]]:
    new_span = _trace_fn_spans(name, tracer)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            with new_span():
                return await fn(*args, **kwargs)
        return await fn(*args, **kwargs)

    return wrapper
