"""Carry the trace context across Ray remote calls; this module never imports `ray`.

The driver writes its current context into a carrier dict and passes it as the reserved
keyword `_otel_carrier`; an actor method wrapped by `traced_remote_call` reads it back and
runs in a span parented to the driver's span::

    @ray.remote
    class Worker:
        @traced_remote_call
        def step(self, batch): ...

    ref = ray_dispatch_with_context(worker.step, batch)  # adds _otel_carrier=...

The carrier goes through OpenTelemetry's global text-map propagator, like
`nemo.lens.propagation`. In a Ray worker that never ran `setup_telemetry` the API's
default provider applies: the span does not record, and the call runs as usual.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Mapping
from types import MappingProxyType
from typing import Any, Final, ParamSpec, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from nemo.lens._span_lifecycle import SpanLifecycle
from nemo.lens._warn_once import WarnOnce
from nemo.lens.propagation import extract_context, inject_context

__all__ = [
    "extract_ray_context",
    "inject_ray_context",
    "ray_dispatch_with_context",
    "traced_remote_call",
]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens.contrib.ray")

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The tracer scope of the spans `traced_remote_call` opens (when no tracer is given).
_TRACER_SCOPE: Final = "nemo.lens.ray"
#: The keyword a wrapped method reserves for the carrier.
_CARRIER_KEYWORD: Final = "_otel_carrier"
#: What this module's failure warnings say happens next.
_RUNS_WITHOUT_IT: Final = "the method runs without it"
# A remote call's span has no attributes; one shared empty mapping.
_NO_ATTRIBUTES: Final[Mapping[str, object]] = MappingProxyType({})


def inject_ray_context() -> dict[str, str]:
    """Return a new carrier holding the current context; `{}` when no span is active.

    Call it on the driver before a remote call. Never raises.
    """
    carrier: dict[str, str] = {}
    inject_context(carrier)
    return carrier


def extract_ray_context(carrier: dict[str, str] | None = None) -> Context:
    """Return the context `carrier` describes; None gives the current context.

    Works in a process that never ran `setup_telemetry`, and never raises: a malformed
    carrier (garbage values, not a dict) gives a context without a valid span, so a span
    started under it becomes a new root.
    """
    if carrier is None:
        return otel_context.get_current()
    return extract_context(carrier)


def ray_dispatch_with_context(
    remote_fn: Any, *args: Any, _carrier: dict[str, str] | None = None, **kwargs: Any
) -> Any:
    """Call `remote_fn.remote(*args, **kwargs)` with the trace context as `_otel_carrier`.

    Args:
        remote_fn: Anything with a `.remote` method: a Ray actor method or remote function
            (typed `Any` because Ray's static types do not show `.remote` on them).
        *args: Passed on to `remote_fn.remote`.
        _carrier: The carrier to send; None (or empty) sends the current context.
        **kwargs: Passed on to `remote_fn.remote`.

    Returns:
        Whatever `remote_fn.remote` returns (for Ray, an `ObjectRef` or a generator of them).
    """
    return remote_fn.remote(*args, _otel_carrier=_carrier or inject_ray_context(), **kwargs)


def traced_remote_call(method: Callable[_P, _R], tracer: Tracer | None = None) -> Callable[_P, _R]:
    """Wrap `method` so each call runs in a span parented to the caller's carrier.

    The wrapper takes the reserved keyword-only argument `_otel_carrier: dict | None =
    None`, shown in its `__signature__` (Ray checks calls against it). It keeps what
    `functools.wraps` copies (name, qualname, module, doc, annotations, `__dict__`) but
    not `__wrapped__`: Ray unwraps an actor method before reading its signature, and the
    unwrapped one has no `_otel_carrier`.

    Each call opens an ungated span named `method.__qualname__` on `tracer` (default:
    `trace.get_tracer("nemo.lens.ray")` of the global provider at call time, so a
    provider installed later is used), parented to the carrier's context (None: the
    current context), and current for the method's body. An `Exception` from the body is
    recorded on the span with ERROR status and re-raised. The span runs through the span
    helpers' lifecycle (`managed_span`'s), with the same guarantees.

    The wrapper keeps the method's nature, which Ray reads to choose how to run it: a
    coroutine function gives a coroutine function whose span covers the whole awaited
    body; a generator or async-generator function gives one of the same kind whose span
    covers the whole iteration, current only while the body runs (the consumer between
    two items does not see it).

    Telemetry never breaks the call: when the span cannot be started or made current,
    the method runs without it (one warning per kind of failure).

    A method that declares `_otel_carrier` itself keeps its signature and receives the
    carrier too. Python's typing cannot add a keyword to a `ParamSpec`, so the static type
    is the method's own; a direct call passing `_otel_carrier` needs a `Callable[..., R]`.

    Args:
        method: The function or method to wrap.
        tracer: The tracer for the spans; None looks up `nemo.lens.ray` on each call.

    Returns:
        The wrapper, of the same kind as `method`.
    """
    name = getattr(method, "__qualname__", None) or getattr(method, "__name__", None)
    span_name = name if isinstance(name, str) else type(method).__name__
    signature, forwards = _signature_with_carrier(method)
    wrapper = _wrapper_for(method, span_name, tracer, forwards)
    functools.update_wrapper(wrapper, method)
    # Ray validates an actor method's arguments against `inspect.unwrap(method)`, which
    # follows `__wrapped__` past our `__signature__` and would refuse `_otel_carrier`.
    vars(wrapper).pop("__wrapped__", None)
    if signature is not None:
        wrapper.__signature__ = signature  # type: ignore[attr-defined]  # read by inspect
    return cast(Callable[_P, _R], wrapper)


# --- the signature --------------------------------------------------------------------------


def _signature_with_carrier(method: Callable[..., Any]) -> tuple[inspect.Signature | None, bool]:
    """`method`'s signature plus the keyword-only `_otel_carrier`, and whether `method`
    takes `_otel_carrier` itself (then its signature is kept and the carrier passed on).

    The new parameter goes last, before a `**kwargs` if there is one. An unreadable
    signature gives (None, False): the wrapper then has no `__signature__` of its own.
    """
    try:
        signature = inspect.signature(method)
        parameters = list(signature.parameters.values())
        for parameter in parameters:
            if parameter.name == _CARRIER_KEYWORD:
                by_keyword = parameter.kind in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    inspect.Parameter.KEYWORD_ONLY,
                )
                return signature, by_keyword
        carrier = inspect.Parameter(
            _CARRIER_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=dict[str, str] | None,
        )
        at = len(parameters)
        if parameters and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD:
            at -= 1
        parameters.insert(at, carrier)
        return signature.replace(parameters=parameters), False
    except Exception as exc:  # a builtin without a signature, or an odd __signature__
        _warnings.failure(
            "traced_remote_call: reading the method's signature",
            exc,
            "the wrapper has no signature of its own",
        )
        return None, False


# --- one traced call --------------------------------------------------------------------------


class _RemoteSpan(SpanLifecycle):
    """The span helpers' lifecycle, its warnings logged on this module's logger."""

    __slots__ = ()

    warnings = _warnings
    consequence = _RUNS_WITHOUT_IT


def _remote_span(name: str, tracer: Tracer | None, carrier: dict[str, str] | None) -> _RemoteSpan:
    """The span of one call, parented to the carrier's context (None: the current one)."""
    return _RemoteSpan(
        "traced_remote_call",
        name,
        tracer,
        _TRACER_SCOPE,
        _NO_ATTRIBUTES,
        True,  # record_exception
        True,  # typed_description
        None,  # fallback: the method runs without a span
        extract_ray_context(carrier),
    )


# --- one wrapper per kind of method -----------------------------------------------------------


def _wrapper_for(
    method: Callable[..., Any], name: str, tracer: Tracer | None, forwards: bool
) -> Callable[..., Any]:
    """The wrapper of `method`'s kind (Ray reads the kind to decide how to run it)."""
    if inspect.isasyncgenfunction(method):
        return _async_generator_wrapper(method, name, tracer, forwards)
    if inspect.iscoroutinefunction(method):
        return _coroutine_wrapper(method, name, tracer, forwards)
    if inspect.isgeneratorfunction(method):
        return _generator_wrapper(method, name, tracer, forwards)
    return _function_wrapper(method, name, tracer, forwards)


def _function_wrapper(
    method: Callable[..., Any], name: str, tracer: Tracer | None, forwards: bool
) -> Callable[..., Any]:
    def wrapper(*args: Any, _otel_carrier: dict[str, str] | None = None, **kwargs: Any) -> Any:
        if forwards:
            kwargs[_CARRIER_KEYWORD] = _otel_carrier
        with _remote_span(name, tracer, _otel_carrier):
            return method(*args, **kwargs)

    return wrapper


def _coroutine_wrapper(
    method: Callable[..., Coroutine[Any, Any, Any]],
    name: str,
    tracer: Tracer | None,
    forwards: bool,
) -> Callable[..., Coroutine[Any, Any, Any]]:
    # The span starts when the coroutine starts running, not when it is created, and
    # ends after the last step of the awaited body.
    async def wrapper(
        *args: Any, _otel_carrier: dict[str, str] | None = None, **kwargs: Any
    ) -> Any:
        if forwards:
            kwargs[_CARRIER_KEYWORD] = _otel_carrier
        with _remote_span(name, tracer, _otel_carrier):
            return await method(*args, **kwargs)

    return wrapper


def _generator_wrapper(
    method: Callable[..., Generator[Any, Any, Any]],
    name: str,
    tracer: Tracer | None,
    forwards: bool,
) -> Callable[..., Generator[Any, Any, Any]]:
    # Each step of the inner generator runs with the span current; between steps the
    # consumer's own context is current. send(), throw() and close() reach the body.
    def wrapper(
        *args: Any, _otel_carrier: dict[str, str] | None = None, **kwargs: Any
    ) -> Generator[Any, Any, Any]:
        if forwards:
            kwargs[_CARRIER_KEYWORD] = _otel_carrier
        call = _remote_span(name, tracer, _otel_carrier)
        call.open()
        failure: BaseException | None = None
        try:
            inner = method(*args, **kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                try:
                    with call.current():
                        if thrown is None:
                            item = inner.send(sent)
                        else:
                            item, thrown = inner.throw(thrown), None
                except StopIteration as stop:
                    return stop.value
                try:
                    sent = yield item
                except GeneratorExit:
                    with call.current():
                        inner.close()
                    raise
                except BaseException as exc:  # thrown in by the consumer: the body's to handle
                    thrown = exc
        except BaseException as exc:
            failure = exc
            raise
        finally:
            call.close(failure)

    return wrapper


def _async_generator_wrapper(
    method: Callable[..., AsyncGenerator[Any, Any]],
    name: str,
    tracer: Tracer | None,
    forwards: bool,
) -> Callable[..., AsyncGenerator[Any, Any]]:
    # As for a generator: the span covers the whole iteration, current during each step.
    async def wrapper(
        *args: Any, _otel_carrier: dict[str, str] | None = None, **kwargs: Any
    ) -> AsyncGenerator[Any, Any]:
        if forwards:
            kwargs[_CARRIER_KEYWORD] = _otel_carrier
        call = _remote_span(name, tracer, _otel_carrier)
        call.open()
        failure: BaseException | None = None
        try:
            inner = method(*args, **kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                try:
                    with call.current():
                        if thrown is None:
                            item = await inner.asend(sent)
                        else:
                            item, thrown = await inner.athrow(thrown), None
                except StopAsyncIteration:
                    return
                try:
                    sent = yield item
                except GeneratorExit:
                    with call.current():
                        await inner.aclose()
                    raise
                except BaseException as exc:  # thrown in by the consumer: the body's to handle
                    thrown = exc
        except BaseException as exc:
            failure = exc
            raise
        finally:
            call.close(failure)

    return wrapper
