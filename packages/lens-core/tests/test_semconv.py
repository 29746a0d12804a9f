"""nemo.lens.semconv: string constants named after their values, and nothing else."""

from __future__ import annotations

import ast
from pathlib import Path

from lens_children import python_stdout

from nemo.lens import semconv

# The names the spec lists, by family, plus the standard resource keys lens itself writes
# (semconv is the one place lens spells a key name).
EXPECTED_VALUES = {
    # OpenTelemetry resource keys lens sets
    "service.name",
    "service.version",
    "service.instance.id",
    "host.name",
    "process.pid",
    "deployment.environment",
    "host.gpu.count",
    # the metrics SDK's overflow series (metric_cardinality_limit)
    "otel.metric.overflow",
    # dl
    "dl.rank",
    "dl.world_size",
    "dl.local_rank",
    "dl.data_parallel.rank",
    "dl.data_parallel.size",
    "dl.tensor_parallel.rank",
    "dl.tensor_parallel.size",
    "dl.pipeline_parallel.rank",
    "dl.pipeline_parallel.size",
    "dl.iteration",
    "dl.loss",
    "dl.grad_norm",
    "dl.learning_rate",
    "dl.throughput_tflops",
    "dl.throughput_tokens_per_sec",
    "dl.batch_size",
    "dl.sequence_length",
    "dl.microbatch_id",
    # nv.dl
    "nv.dl.rank",
    "nv.dl.world_size",
    "nv.dl.local_rank",
    "nv.dl.role",
    # gen_ai
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.token.type",
    # rl span attributes
    "rl.algorithm",
    "rl.reward",
    "rl.generation.backend",
    "rl.num_rollouts",
    # gym attributes
    "gym.server.name",
    "gym.server.type",
    "gym.num_servers",
    "gym.rollout.batch_size",
    # slurm
    "slurm.job.id",
    "slurm.job.name",
    "slurm.nodelist",
    "slurm.nnodes",
    "slurm.ntasks",
    "slurm.partition",
    "slurm.cluster.name",
    # nemo and wandb
    "nemo.run.id",
    "nemo.user.id",
    "nemo.span.truncated",
    "nemo.span.truncated.reason",
    "wandb.entity",
    "wandb.project",
    # k8s
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.pod.uid",
    "k8s.node.name",
    "k8s.container.name",
    "k8s.job.name",
}


def constant_name(value: str) -> str:
    name = value.upper().replace(".", "_")
    return "GENAI_" + name.removeprefix("GEN_AI_") if value.startswith("gen_ai.") else name


def test_exactly_the_spec_names_each_named_after_its_value() -> None:
    """Every listed value has its constant, and `__all__` holds nothing else but the version."""
    assert semconv.SEMCONV_VERSION == "1.29.0"
    expected = {constant_name(value): value for value in EXPECTED_VALUES}
    assert set(semconv.__all__) == {*expected, "SEMCONV_VERSION"}
    for name, value in expected.items():
        assert getattr(semconv, name) == value


def test_all_is_sorted_and_public_names_match_it() -> None:
    """`__all__` is sorted, and the module defines no public name outside it."""
    assert semconv.__all__ == sorted(semconv.__all__)
    public = {name for name in vars(semconv) if not name.startswith("_")}
    assert public == set(semconv.__all__)


def test_literal_values_consumers_assert() -> None:
    """RL3 asserts the nv.dl literals; GenAI keys use the GENAI_ spelling."""
    assert (semconv.NV_DL_RANK, semconv.NV_DL_WORLD_SIZE) == ("nv.dl.rank", "nv.dl.world_size")
    assert semconv.GENAI_REQUEST_MODEL == "gen_ai.request.model"
    assert semconv.RL_GENERATION_BACKEND == "rl.generation.backend"


def test_no_metric_name_constants() -> None:
    """Upstream's rl/gym metric-name constants are gone: consumers own metric names."""
    for removed in ("RL_REWARD_MEAN", "RL_THROUGHPUT_TOKENS_PER_SEC", "GYM_VERIFY_SUCCESS_RATE"):
        assert not hasattr(semconv, removed)


def test_module_has_no_imports() -> None:
    """The module is string constants only: it imports nothing."""
    tree = ast.parse(Path(semconv.__file__).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_root_import_does_not_load_semconv() -> None:
    """`import nemo.lens` leaves semconv unloaded."""
    code = "import sys, nemo.lens; print('nemo.lens.semconv' in sys.modules)"
    assert python_stdout("-c", code).strip() == "False"
