"""record_inference_metrics records GenAI request metrics through the registry."""

from __future__ import annotations

import pytest

from nemo.lens import registered_metric_groups
from nemo.lens.instruments import record_inference_metrics
from nemo.lens.instruments.inference import INFERENCE_GROUP, INFERENCE_SPECS
from nemo.lens.testing import InMemoryMetrics


def test_registers_its_group_on_first_use_only(pipeline: InMemoryMetrics) -> None:
    """Importing registers nothing; the first call registers the lens-owned group."""
    assert INFERENCE_GROUP not in registered_metric_groups()
    record_inference_metrics(pipeline.meter, request_duration_s=0.5)
    assert registered_metric_groups()[INFERENCE_GROUP] == INFERENCE_SPECS


def test_records_duration_and_one_token_point_per_type(pipeline: InMemoryMetrics) -> None:
    """One duration point and input/output token points, all carrying the GenAI attributes."""
    record_inference_metrics(
        pipeline.meter,
        request_duration_s=1.5,
        model="llama",
        input_tokens=10,
        output_tokens=4,
        provider_name="vllm",
    )
    common = {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.provider.name": "vllm",
        "gen_ai.request.model": "llama",
    }
    (duration,) = pipeline.points("gen_ai.server.request.duration")
    assert (dict(duration.attributes), duration.sum, duration.count) == (common, 1.5, 1)
    tokens = {
        p.attributes["gen_ai.token.type"]: (p.sum, dict(p.attributes))
        for p in pipeline.points("gen_ai.client.token.usage")
    }
    assert tokens == {
        "input": (10, {**common, "gen_ai.token.type": "input"}),
        "output": (4, {**common, "gen_ai.token.type": "output"}),
    }
    units = {name: metric.unit for name, metric in pipeline.metrics().items()}
    assert units == {"gen_ai.server.request.duration": "s", "gen_ai.client.token.usage": "{token}"}


def test_model_attribute_only_when_truthy(pipeline: InMemoryMetrics) -> None:
    """Without a model the points carry no gen_ai.request.model."""
    record_inference_metrics(pipeline.meter, input_tokens=3, model="")
    (point,) = pipeline.points("gen_ai.client.token.usage")
    assert "gen_ai.request.model" not in point.attributes
    assert pipeline.points("gen_ai.server.request.duration") == []


def test_reuses_a_group_registered_before(pipeline: InMemoryMetrics) -> None:
    """A second call, or a group registered by someone else first, does not fail."""
    record_inference_metrics(pipeline.meter, output_tokens=1)
    record_inference_metrics(pipeline.meter, output_tokens=2)
    (point,) = pipeline.points("gen_ai.client.token.usage")
    assert point.sum == 3


@pytest.mark.parametrize("meter", [None, object()])
def test_never_raises(meter: object) -> None:
    """Unusable meters and odd values never raise."""
    record_inference_metrics(meter, request_duration_s="slow", input_tokens=-1, model=object())  # type: ignore[arg-type]  # deliberately wrong


class _Unnameable:
    """A model object whose truth test and str() both raise."""

    def __bool__(self) -> bool:
        raise RuntimeError("no truth")

    def __str__(self) -> str:
        raise RuntimeError("no name")


def test_a_model_that_cannot_be_named_costs_only_the_attribute(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    """Duration and tokens still record, without gen_ai.request.model, with one warning."""
    for _ in range(2):
        record_inference_metrics(
            pipeline.meter, request_duration_s=0.5, model=_Unnameable(), input_tokens=3
        )
    (duration,) = pipeline.points("gen_ai.server.request.duration")
    assert duration.count == 2
    assert "gen_ai.request.model" not in duration.attributes
    (tokens,) = pipeline.points("gen_ai.client.token.usage")
    assert tokens.sum == 6
    assert sum("could not be named" in r.getMessage() for r in caplog.records) == 1


def test_an_internal_failure_is_logged_once_and_never_raised(
    pipeline: InMemoryMetrics, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect inside record_inference_metrics (injected here) warns once, never raises."""
    import nemo.lens.instruments.inference as inference

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("registry broken")

    monkeypatch.setattr(inference, "register_metric_group", broken)
    for _ in range(3):
        record_inference_metrics(pipeline.meter, request_duration_s=0.1)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("nemo.lens")]
    assert messages == [
        "record_inference_metrics: skipped a request (RuntimeError: registry broken)"
    ]
