"""The fallbacks pattern of docs/spans.md, as a framework that makes lens optional writes it.

`mypy --strict` checks it: the names imported in the `except ImportError` branch must stay
re-importable over lens's (an `@overload`ed name is not). `tests/test_span_idioms.py` runs
it both ways: with lens, and in a child interpreter where `nemo.lens.helpers` cannot load.
"""

from __future__ import annotations

try:
    from nemo.lens.helpers import managed_span, safe_set_span_attributes, span_cm, trace_fn
    from nemo.lens.state import is_span_group_enabled

    LENS = True
except ImportError:
    from nemo.lens.fallbacks import (  # a framework keeps a copy of this module
        is_span_group_enabled,
        managed_span,
        safe_set_span_attributes,
        span_cm,
        trace_fn,
    )

    LENS = False


@trace_fn("optimizer", "optimizer.step")
def optimizer_step(scale: float) -> float:
    """A traced function, plain without lens."""
    return scale * 2


def step(iteration: int) -> tuple[bool, float]:
    """One step with every shape the pattern allows; the span may be None either way."""
    with (
        span_cm("job", num_microbatches=4),
        managed_span("step", "train_step", **{"dl.iteration": iteration}) as span,
    ):
        safe_set_span_attributes(span, {"dl.loss": 0.5})
        result = optimizer_step(0.25)
    return is_span_group_enabled("step"), result
