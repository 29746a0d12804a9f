"""No-op twins of lens's span primitives, for code that runs without lens.

A framework that makes lens optional imports these when `import nemo.lens` fails::

    try:
        from nemo.lens.helpers import managed_span, safe_set_span_attributes, span_cm, trace_fn
        from nemo.lens.state import is_span_group_enabled
    except ImportError:
        from my_framework._lens_fallbacks import (  # a copy of this module
            is_span_group_enabled, managed_span, safe_set_span_attributes, span_cm, trace_fn,
        )

Each function takes exactly the parameters of the real one, with the same defaults, and
no annotations, so `inspect.signature` compares equal parameter by parameter with a
consumer's copy. The module binds nothing else but `contextmanager`, so it can be copied
as is.
"""

from contextlib import contextmanager

__all__ = [
    "is_span_group_enabled",
    "managed_span",
    "safe_set_span_attributes",
    "span_cm",
    "trace_fn",
]


def trace_fn(group, name, tracer=None):  # type: ignore[no-untyped-def]  # mirrors lens
    """Return a decorator that returns the function unchanged."""

    def decorate(fn):  # type: ignore[no-untyped-def]  # mirrors lens
        return fn

    return decorate


@contextmanager
def managed_span(group, name, tracer=None, **attributes):  # type: ignore[no-untyped-def]  # mirrors lens
    """Yield None; exceptions from the body propagate."""
    yield None


@contextmanager
def span_cm(name, tracer=None, record_exception=True, **attributes):  # type: ignore[no-untyped-def]  # mirrors lens
    """Yield None; exceptions from the body propagate."""
    yield None


def is_span_group_enabled(group):  # type: ignore[no-untyped-def]  # mirrors lens
    """Return False: without lens no span group is on."""
    return False


def safe_set_span_attributes(span, attributes, redact_keys=None):  # type: ignore[no-untyped-def]  # mirrors lens
    """Do nothing; a None span is fine."""
