"""The legacy `rl.*` series: what `record_rl_metrics` emitted before the metric registry."""

from __future__ import annotations

from typing import Final

from nemo.lens.instruments import MetricSpec

#: The registry group the shim records into, and registers when nobody else has.
LEGACY_RL_GROUP: Final = "rl"

#: One spec per legacy keyword of `record_rl_metrics`, in signature order. The key is the
#: keyword; name, kind and unit are the series existing dashboards already query.
LEGACY_RL_SPECS: Final[tuple[MetricSpec, ...]] = (
    MetricSpec("reward_mean", "rl.reward.mean", "gauge", description="Mean rollout reward"),
    MetricSpec(
        "kl_divergence",
        "rl.kl_divergence",
        "gauge",
        description="KL divergence of the policy from the reference model",
    ),
    MetricSpec("policy_loss", "rl.policy_loss", "gauge", description="Policy loss"),
    MetricSpec("value_loss", "rl.value_loss", "gauge", description="Value-function loss"),
    MetricSpec("entropy", "rl.entropy", "gauge", description="Policy entropy"),
    MetricSpec(
        "response_length_mean",
        "rl.response_length.mean",
        "gauge",
        description="Mean length of the generated responses, in tokens",
    ),
    MetricSpec("grad_norm", "rl.grad_norm", "gauge", description="Gradient norm of the update"),
    MetricSpec("learning_rate", "rl.learning_rate", "gauge", description="Optimizer learning rate"),
    MetricSpec(
        "throughput_tokens_per_sec",
        "rl.throughput.tokens_per_sec",
        "gauge",
        unit="{token}/s",
        description="Training throughput",
    ),
    MetricSpec(
        "generation_duration_ms",
        "rl.generation.duration_ms",
        "histogram",
        unit="ms",
        description="Time spent generating responses",
    ),
    MetricSpec(
        "rollout_duration_ms",
        "rl.rollout.duration_ms",
        "histogram",
        unit="ms",
        description="Time spent collecting a rollout",
    ),
    # The one lens revision with a `tokens_per_sec` keyword (the first commit of Lens PR #29)
    # set its own gauge under this name; callers that pass the old keyword query it.
    MetricSpec(
        "tokens_per_sec",
        "rl.tokens_per_sec",
        "gauge",
        unit="{token}/s",
        description="Training throughput, under the name of the first registry revision",
    ),
)
