"""`record_inference_metrics`: GenAI request metrics, recorded through the registry."""

from __future__ import annotations

import contextlib
from typing import Any, Final

from nemo.lens import semconv
from nemo.lens.instruments._record import record_metrics
from nemo.lens.instruments._registry import GROUPS, UNREGISTERED, register_metric_group
from nemo.lens.instruments._spec import MetricSpec

__all__ = ["INFERENCE_GROUP", "INFERENCE_SPECS", "record_inference_metrics"]

#: The lens-owned group, registered on the first call when absent.
INFERENCE_GROUP: Final = "nemo.lens.inference"
INFERENCE_SPECS: Final = (
    MetricSpec(
        "request_duration",
        "gen_ai.server.request.duration",
        "histogram",
        unit="s",
        description="Duration of a GenAI request",
    ),
    MetricSpec(
        "token_usage",
        "gen_ai.client.token.usage",
        "histogram",
        unit="{token}",
        description="Tokens used by a GenAI request, by gen_ai.token.type",
    ),
)


def record_inference_metrics(
    meter: Any,
    request_duration_s: float | None = None,
    model: object = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    provider_name: str = "nemo",
    operation_name: str = "text_completion",
) -> None:
    """Record one inference request: its duration and its input and output token counts.

    Every point carries `gen_ai.operation.name` and `gen_ai.provider.name`, plus
    `gen_ai.request.model` when `model` is truthy; token points also carry
    `gen_ai.token.type` (`input` or `output`). Never raises an `Exception`.
    """
    try:
        if INFERENCE_GROUP not in GROUPS:
            # ValueError: another thread registered it first, which is just as good.
            with contextlib.suppress(ValueError):
                register_metric_group(INFERENCE_GROUP, INFERENCE_SPECS)
        attributes: dict[str, object] = {
            semconv.GENAI_OPERATION_NAME: operation_name,
            semconv.GENAI_PROVIDER_NAME: provider_name,
        }
        model_name = _model_name(model)
        if model_name is not None:
            attributes[semconv.GENAI_REQUEST_MODEL] = model_name
        record_metrics(
            meter, INFERENCE_GROUP, attributes=attributes, request_duration=request_duration_s
        )
        for token_type, count in (("input", input_tokens), ("output", output_tokens)):
            if count is not None:
                record_metrics(
                    meter,
                    INFERENCE_GROUP,
                    attributes={**attributes, semconv.GENAI_TOKEN_TYPE: token_type},
                    token_usage=count,
                )
    except Exception as exc:  # never break the caller's request loop
        GROUPS.get(INFERENCE_GROUP, UNREGISTERED).warnings.warn(
            ("inference", type(exc).__name__),
            "record_inference_metrics: skipped a request (%s: %s)",
            type(exc).__name__,
            exc,
        )


def _model_name(model: object) -> str | None:
    """`str(model)` when `model` is truthy; None, with one warning, when asking fails.

    A model object whose `__bool__` or `__str__` raises costs only the attribute, never the
    request's duration and token counts.
    """
    try:
        return str(model) if model else None
    except Exception as exc:
        GROUPS.get(INFERENCE_GROUP, UNREGISTERED).warnings.warn(
            ("model", type(exc).__name__),
            "record_inference_metrics: the model could not be named (%s: %s); the request "
            "was recorded without gen_ai.request.model",
            type(exc).__name__,
            exc,
        )
        return None
