"""nemo.lens.fallbacks: exactly five no-ops, parameter for parameter like the real primitives."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nemo.lens import fallbacks as fallbacks_module
from nemo.lens import helpers, set_enabled_span_groups, state
from nemo.lens.testing import reset_span_state

# The fallbacks are unannotated on purpose; the tests call them as untyped code would.
fallbacks: Any = fallbacks_module

FIVE = [
    "is_span_group_enabled",
    "managed_span",
    "safe_set_span_attributes",
    "span_cm",
    "trace_fn",
]
REAL: dict[str, Callable[..., Any]] = {
    "is_span_group_enabled": state.is_span_group_enabled,
    "managed_span": helpers.managed_span,
    "safe_set_span_attributes": helpers.safe_set_span_attributes,
    "span_cm": helpers.span_cm,
    "trace_fn": helpers.trace_fn,
}


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


def test_public_surface_is_exactly_the_five() -> None:
    """`__all__` is the five names, sorted; the only other binding is `contextmanager`."""
    assert fallbacks.__all__ == FIVE
    public = {name for name in vars(fallbacks) if not name.startswith("_")}
    assert public == {*FIVE, "contextmanager"}


def test_module_imports_only_contextmanager() -> None:
    """The module's one import is `from contextlib import contextmanager`."""
    tree = ast.parse(Path(fallbacks.__file__).read_text())
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert len(imports) == 1
    (only,) = imports
    assert isinstance(only, ast.ImportFrom)
    assert (only.module, [alias.name for alias in only.names]) == ("contextlib", ["contextmanager"])


@pytest.mark.parametrize("name", FIVE)
def test_parameters_match_the_real_primitives(name: str) -> None:
    """Names, kinds, order and defaults match the real function; fallbacks carry no hints."""
    fallback = inspect.signature(getattr(fallbacks, name)).parameters
    real = inspect.signature(REAL[name]).parameters
    assert [(p.name, p.kind, p.default) for p in fallback.values()] == [
        (p.name, p.kind, p.default) for p in real.values()
    ]
    assert all(p.annotation is inspect.Parameter.empty for p in fallback.values())


def test_trace_fn_returns_the_function_itself() -> None:
    """The fallback decorator hands back the very same function."""

    def step(x: int) -> int:
        return x + 1

    assert fallbacks.trace_fn("step", "name")(step) is step
    assert fallbacks.trace_fn("step", "name", tracer=object())(step)(1) == 2


def test_managed_span_yields_none_and_propagates() -> None:
    """The fallback managed_span yields None, accepts attributes and lets exceptions out."""
    with fallbacks.managed_span("step", "n", tracer=None, **{"a.b": 1}) as span:
        assert span is None
    with pytest.raises(ZeroDivisionError), fallbacks.managed_span("step", "n"):
        1 / 0  # noqa: B018


def test_span_cm_yields_none_and_propagates() -> None:
    """The fallback span_cm yields None and lets exceptions out."""
    with fallbacks.span_cm("job", record_exception=False, n=3) as span:
        assert span is None
    with pytest.raises(LookupError), fallbacks.span_cm("job"):
        raise LookupError


def test_is_span_group_enabled_is_always_false() -> None:
    """Without lens no group is on, even if lens's own gate has it enabled."""
    set_enabled_span_groups(frozenset({"job"}))
    assert fallbacks.is_span_group_enabled("job") is False


def test_safe_set_span_attributes_accepts_anything() -> None:
    """The fallback does nothing, for a None span too."""
    assert fallbacks.safe_set_span_attributes(None, {"a": 1}) is None
    assert fallbacks.safe_set_span_attributes(object(), {"a": 1}, redact_keys=None) is None
