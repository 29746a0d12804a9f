"""The span primitives frameworks instrument their loops with.

- `managed_span(group, name, ...)`: a gated span for code inside the loop. When its group
  is off it costs about as much as `contextlib.nullcontext()`, and the body still runs.
- `trace_fn(group, name, ...)`: the same gate as a decorator, checked on every call.
- `span_cm(name, ...)`: an ungated span for top-level phases (a whole job, a checkpoint).
- `safe_set_span_attributes(span, attributes)`: sets what OpenTelemetry can carry, redacts
  secret-looking keys, and never raises.

`trace` is kept as a module attribute and `trace.get_tracer` is looked up at call time,
never cached, so tests can monkeypatch it and a provider installed later is used.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace as trace  # a module attribute consumers' tests patch
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from nemo.lens import state as _state
from nemo.lens._attributes import attribute_key, attribute_value
from nemo.lens._warn_once import WarnOnce
from nemo.lens.state import is_span_group_enabled

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

#: Attribute keys whose values never leave the process; matched exactly, case-sensitively.
DEFAULT_REDACT_KEYS: Final[frozenset[str]] = frozenset(
    {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
)
REDACTED: Final = "[REDACTED]"

# Tracer scopes: spans opened by trace_fn are told apart from the context managers' spans.
_HELPERS_SCOPE: Final = "nemo.lens.helpers"
_TRACE_FN_SCOPE: Final = "nemo.lens"

_warnings = WarnOnce(_logger, "nemo.lens span helpers")


def _warn_once(where: str, exc: BaseException) -> None:
    """Log a recording failure once per (call site, exception type)."""
    _warnings.warn(
        (where, type(exc).__name__),
        "%s failed (%s: %s); lens carries on without it. Further %s errors from this "
        "call site are not logged.",
        where,
        type(exc).__name__,
        exc,
        type(exc).__name__,
    )


def redact_value(key: str, value: str, redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS) -> str:
    """Return `"[REDACTED]"` if `key` is one of `redact_keys`, else `value`."""
    return REDACTED if key in redact_keys else value


def safe_set_span_attributes(
    span: Span | None,
    attributes: Mapping[str, object],
    redact_keys: frozenset[str] | None = None,
) -> None:
    """Set `attributes` on `span`, skipping what OpenTelemetry cannot carry; never raises.

    Returns at once for a None or non-recording span. None values are skipped; bool, int,
    float and str values are set; lists and tuples of one scalar type are set as tuples;
    anything else is dropped silently (the rule of `nemo.lens._attributes`). A key in
    `redact_keys` is set to `"[REDACTED]"`, whatever its value's type.

    Args:
        span: The span to annotate, or None.
        attributes: Attribute key -> value.
        redact_keys: Keys whose values are redacted; None means `DEFAULT_REDACT_KEYS`.
    """
    if span is None:
        return
    try:
        if not span.is_recording():
            return
        secret_keys = DEFAULT_REDACT_KEYS if redact_keys is None else redact_keys
        accepted: dict[str, Any] = {}
        for raw_key, value in attributes.items():
            key = attribute_key(raw_key)
            if value is None or key is None:
                continue
            if key in secret_keys:
                accepted[key] = REDACTED
                continue
            carried = attribute_value(value)
            if carried is not None:
                accepted[key] = carried
        if accepted:
            span.set_attributes(accepted)
    except Exception as exc:
        _warn_once("safe_set_span_attributes", exc)


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


class _ManagedSpan:
    """An enabled `managed_span`: a child span of the current context, attached while open."""

    __slots__ = ("_attributes", "_name", "_span", "_token", "_tracer")

    def __init__(self, name: str, tracer: Tracer | None, attributes: dict[str, object]) -> None:
        self._name = name
        self._tracer = tracer
        self._attributes = attributes
        self._span: Span | None = None
        self._token: object = None

    def __enter__(self) -> Span | None:
        try:
            tracer = self._tracer if self._tracer is not None else trace.get_tracer(_HELPERS_SCOPE)
            span = tracer.start_span(self._name)
        except Exception as exc:
            _warn_once("managed_span: starting the span", exc)
            return None
        safe_set_span_attributes(span, self._attributes)
        try:
            self._token = otel_context.attach(trace.set_span_in_context(span))
        except Exception as exc:
            _warn_once("managed_span: attaching the span", exc)
        self._span = span
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        span, token = self._span, self._token
        if span is None:
            return
        self._span = self._token = None
        if isinstance(exc, Exception):
            try:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            except Exception as failure:
                _warn_once("managed_span: recording the exception", failure)
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]  # the token attach returned
            except Exception as failure:
                _warn_once("managed_span: detaching the span", failure)
        try:
            span.end()
        except Exception as failure:
            _warn_once("managed_span: ending the span", failure)


def managed_span(
    group: str, name: str, tracer: Tracer | None = None, **attributes: object
) -> AbstractContextManager[Span | None]:
    """Open a span named `name` if span group `group` is enabled.

    The gate is the first thing that happens. Disabled, the context manager enters to None
    and the body still runs. Enabled, it starts a child of the current span on `tracer`
    (default: `trace.get_tracer("nemo.lens.helpers")`, looked up now), sets `attributes`
    safely, makes the span current and yields it. An `Exception` from the body is recorded
    with ERROR status and re-raised; the span is always ended.

    Example::

        with managed_span("step", "train_step", **{"dl.iteration": it}) as span:
            ...  # span is None when the "step" group is off

    Args:
        group: The span group gating this span.
        name: The span name.
        tracer: The tracer to use; None looks up lens's helpers tracer.
        **attributes: Span attributes, including dotted keys passed as `**{...}`.
    """
    if not is_span_group_enabled(group):
        return _SPAN_OFF
    return _ManagedSpan(name, tracer, attributes)


class _CurrentSpan:
    """An ungated span made current with `start_as_current_span`, failing soft."""

    __slots__ = ("_attributes", "_name", "_record_exception", "_scope", "_scope_cm", "_tracer")

    def __init__(
        self,
        name: str,
        tracer: Tracer | None,
        scope: str,
        record_exception: bool,
        attributes: Mapping[str, object],
    ) -> None:
        self._name = name
        self._tracer = tracer
        self._scope = scope
        self._record_exception = record_exception
        self._attributes = attributes
        self._scope_cm: Any = None

    def __enter__(self) -> Span:
        try:
            tracer = self._tracer if self._tracer is not None else trace.get_tracer(self._scope)
            scope_cm = tracer.start_as_current_span(
                self._name, record_exception=self._record_exception
            )
            span = scope_cm.__enter__()
        except Exception as exc:
            _warn_once(f"{self._name!r} span: starting it", exc)
            # Non-recording, so the body's span calls still work without a check.
            return trace.INVALID_SPAN
        self._scope_cm = scope_cm
        if self._attributes:
            safe_set_span_attributes(span, self._attributes)
        return span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        scope_cm, self._scope_cm = self._scope_cm, None
        if scope_cm is None:
            return
        try:
            # The SDK records the exception, sets ERROR and ends the span; the body's
            # exception then propagates because this method returns None.
            scope_cm.__exit__(exc_type, exc, tb)
        except Exception as failure:
            if failure is not exc:
                _warn_once(f"{self._name!r} span: ending it", failure)


def span_cm(
    name: str,
    tracer: Tracer | None = None,
    record_exception: bool = True,
    **attributes: object,
) -> AbstractContextManager[Span]:
    """Open an ungated span named `name`, made current for the body; for top-level phases.

    Calls `start_as_current_span(name, record_exception=record_exception)` on `tracer`
    (default: `trace.get_tracer("nemo.lens.helpers")`, looked up now), sets `attributes`
    safely and yields the span. An exception from the body sets ERROR status and propagates.
    If the span cannot be started, it yields a non-recording span and the body still runs.

    Example::

        with span_cm("checkpoint.save", num_shards=8) as span:
            save()
    """
    return _CurrentSpan(name, tracer, _HELPERS_SCOPE, record_exception, attributes)


def trace_fn(group: str, name: str, tracer: Tracer | None = None) -> Callable[[F], F]:
    """Decorate a function so each call runs in a span named `name` while `group` is on.

    The gate is checked on every call, so decorating at import, before setup, works;
    disabled, the call is a plain call. Enabled, the call runs inside
    `start_as_current_span(name)` on `tracer` (default: `trace.get_tracer("nemo.lens")`,
    looked up at call time), which records an exception and sets ERROR before it
    propagates. A coroutine function gets an async wrapper whose span covers the await.
    The wrapper keeps `functools.wraps` metadata.

    Example::

        @trace_fn("optimizer", "optimizer.step")
        def step(model, grads): ...
    """
    try:
        hash(group)
        gate: object = group
    except TypeError:
        gate = object()  # an unhashable name names no group: never traced

    def decorate(fn: F) -> F:
        import inspect  # at decoration time, kept off `import nemo.lens`

        if inspect.iscoroutinefunction(fn):
            return cast(F, _async_wrapper(fn, gate, name, tracer))
        traced = _traced_call(fn, name, tracer)
        wrapper = _same_signature_wrapper(fn, gate, traced)
        if wrapper is None:
            wrapper = _any_signature_wrapper(fn, gate, traced)
        return cast(F, functools.wraps(fn)(wrapper))

    return decorate


def _traced_call(fn: Callable[..., Any], name: str, tracer: Tracer | None) -> Callable[..., Any]:
    """Return a callable that runs `fn` inside a current span (the enabled path)."""

    def traced(*args: Any, **kwargs: Any) -> Any:
        with _CurrentSpan(name, tracer, _TRACE_FN_SCOPE, True, {}):
            return fn(*args, **kwargs)

    return traced


def _any_signature_wrapper(
    fn: Callable[..., Any], gate: object, traced: Callable[..., Any]
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            return traced(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


# Names the generated wrapper uses for itself; a function with such a parameter falls back.
_WRAPPER_NAMES: Final = frozenset({"_lens_fn", "_lens_gate", "_lens_state", "_lens_traced"})


def _same_signature_wrapper(
    fn: Callable[..., Any], gate: object, traced: Callable[..., Any]
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
        "_lens_state": _state,
        "_lens_traced": traced,
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
        f"        return _lens_traced({arguments})\n"
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
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            with _CurrentSpan(name, tracer, _TRACE_FN_SCOPE, True, {}):
                return await fn(*args, **kwargs)
        return await fn(*args, **kwargs)

    return wrapper
