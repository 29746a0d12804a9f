"""The span idioms lens documents, as a consumer writes them; `mypy --strict` checks this file.

Every call here is a shape from docs/spans.md or a consumer (the API spec's "consumer call
shapes"): dotted attributes passed as `**{...}`, bool attributes, a tracer by keyword.
The `typecheck` session's mypy checks it, and `tests/test_span_idioms.py` runs it against a
real in-memory tracer, so it is not dead code.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from nemo.lens import managed_span, safe_set_span_attributes, span_cm, trace_fn
from nemo.lens.distributed import create_linked_span
from nemo.lens.propagation import inject_context


@trace_fn("optimizer", "optimizer.step")
def optimizer_step(learning_rate: float) -> float:
    """A decorated function keeps its own signature for the type checker."""
    return learning_rate * 0.5


def train(iterations: int, num_microbatches: int = 4) -> list[float]:
    """The training loop of docs/spans.md: a job span, gated step spans, a traced call."""
    rates: list[float] = []
    with span_cm("job", num_nodes=8):
        for it in range(iterations):
            with managed_span("step", "train_step", **{"dl.iteration": it}) as span:
                safe_set_span_attributes(span, {"dl.num_microbatches": num_microbatches})
                rates.append(optimizer_step(1.0))
    return rates


def megatron_iteration(iteration: int) -> bool:
    """Megatron-LM's shape: a bool attribute beside a dotted one; None when disabled."""
    with managed_span(
        "step", "iteration", is_goodput_span=True, **{"megatron.iteration": iteration}
    ) as span:
        return span is not None


def rollout(tracer: Tracer, backend: str, prompts: list[str]) -> int:
    """NeMo-RL's shape: an explicit tracer by keyword, then a dotted `str` attribute."""
    with managed_span("rollout", "generate", tracer=tracer, **{"rl.backend": backend}) as span:
        outputs = [prompt.upper() for prompt in prompts]
        safe_set_span_attributes(span, {"rl.num_rollouts": len(outputs)})
    return len(outputs)


def forward_backward(tracer: Tracer, name: str, num_microbatches: int) -> str:
    """`span_cm(name, tracer=t, num_microbatches=n)` and `span_cm(name, num_microbatches=4)`."""
    with (
        span_cm(name, tracer=tracer, num_microbatches=num_microbatches) as outer,
        span_cm(f"{name}.inner", num_microbatches=4) as inner,
    ):
        inner.set_attribute("dl.inner", True)
    return outer.get_span_context().trace_id.to_bytes(16, "big").hex()


def checkpoint(tracer: Tracer, attributes: Mapping[str, object]) -> None:
    """Attributes gathered in a mapping first, passed as `**attributes`, strict or not."""
    with span_cm("checkpoint.save", tracer=tracer, record_exception=False, **attributes):
        pass
    with span_cm("checkpoint.verify", **{"checkpoint.shards": 8}):
        pass


def next_stage(tracer: Tracer, stage: int) -> Span:
    """A pipeline stage's span linked to the previous stage through a carrier."""
    carrier: dict[str, str] = {}
    inject_context(carrier)
    span = create_linked_span(tracer, "pp.stage", remote_carrier=carrier, **{"pp.stage": stage})
    span.end()
    return create_linked_span(None, "pp.stage.default_tracer", **{"pp.stage": stage})


def current_span_attributes(step: int) -> None:
    """`safe_set_span_attributes(trace.get_current_span(), {...})`."""
    safe_set_span_attributes(trace.get_current_span(), {"dl.iteration": step, "dl.ok": True})
