"""The wrappers `nemo.lens.helpers.trace_fn` puts around a function.

Each wrapper checks the span gate on every call and, while the group is on, runs the call
inside `new_span()` (the span helpers' lifecycle, handed in by `trace_fn`). For a plain
Python function the wrapper is generated with the function's own parameter list, so a
disabled call costs one extra frame and one set look-up; anything else gets a
`(*args, **kwargs)` wrapper, and a coroutine function an async one whose span covers the
await. Nothing here logs: a function the generator cannot copy falls back quietly.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Iterable
from contextlib import AbstractContextManager
from typing import Any, Final, cast

from nemo.lens import state as _state

#: What a wrapper calls for each span it opens.
NewSpan = Callable[[], AbstractContextManager[object]]

# Names the generated wrapper uses for itself; a function with such a parameter falls back.
_WRAPPER_NAMES: Final = frozenset({"_lens_fn", "_lens_gate", "_lens_span", "_lens_state"})


def any_signature_wrapper(
    fn: Callable[..., Any], gate: object, new_span: NewSpan
) -> Callable[..., Any]:
    """A `(*args, **kwargs)` wrapper: works for every callable, at the cost of packing."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            with new_span():
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


def async_wrapper(
    fn: Callable[..., Coroutine[Any, Any, Any]], gate: object, new_span: NewSpan
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """An async wrapper whose span covers the whole await of `fn`'s coroutine."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if gate in _state._enabled:
            with new_span():
                return await fn(*args, **kwargs)
        return await fn(*args, **kwargs)

    return wrapper


def same_signature_wrapper(
    fn: Callable[..., Any], gate: object, new_span: NewSpan
) -> Callable[..., Any] | None:
    """Build a wrapper with `fn`'s own parameter list, or None where that is not possible.

    A `(*args, **kwargs)` wrapper packs and unpacks every call, which costs several times
    a trivial function's own call. A wrapper with the same parameters passes them straight
    through, so the disabled path costs one extra frame and one set look-up.
    """
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
    lists = _parameter_lists(parameters, namespace)
    if lists is None:
        return None
    declared, passed = lists
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


def _parameter_lists(
    parameters: Iterable[inspect.Parameter], namespace: dict[str, Any]
) -> tuple[list[str], list[str]] | None:
    """The wrapper's declared parameters and the arguments it passes on, in source form.

    Each default goes into `namespace` as `_lens_default_<index>`, so the wrapper's
    defaults are the very objects `fn` has. None when a parameter's name cannot be used.
    """
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
    return declared, passed
