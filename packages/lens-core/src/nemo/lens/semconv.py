"""Attribute and resource names lens and its consumers agree on.

String constants only, with no imports, so any framework can import this module freely.
Each constant is its value upper-cased with `.` turned into `_` (`dl.data_parallel.rank`
is `DL_DATA_PARALLEL_RANK`); `gen_ai.*` constants are spelled `GENAI_*`.
"""

__all__ = [
    "DEPLOYMENT_ENVIRONMENT",
    "DL_BATCH_SIZE",
    "DL_DATA_PARALLEL_RANK",
    "DL_DATA_PARALLEL_SIZE",
    "DL_GRAD_NORM",
    "DL_ITERATION",
    "DL_LEARNING_RATE",
    "DL_LOCAL_RANK",
    "DL_LOSS",
    "DL_MICROBATCH_ID",
    "DL_PIPELINE_PARALLEL_RANK",
    "DL_PIPELINE_PARALLEL_SIZE",
    "DL_RANK",
    "DL_SEQUENCE_LENGTH",
    "DL_TENSOR_PARALLEL_RANK",
    "DL_TENSOR_PARALLEL_SIZE",
    "DL_THROUGHPUT_TFLOPS",
    "DL_THROUGHPUT_TOKENS_PER_SEC",
    "DL_WORLD_SIZE",
    "GENAI_OPERATION_NAME",
    "GENAI_PROVIDER_NAME",
    "GENAI_REQUEST_MODEL",
    "GENAI_TOKEN_TYPE",
    "GYM_NUM_SERVERS",
    "GYM_ROLLOUT_BATCH_SIZE",
    "GYM_SERVER_NAME",
    "GYM_SERVER_TYPE",
    "HOST_GPU_COUNT",
    "HOST_NAME",
    "K8S_CONTAINER_NAME",
    "K8S_JOB_NAME",
    "K8S_NAMESPACE_NAME",
    "K8S_NODE_NAME",
    "K8S_POD_NAME",
    "K8S_POD_UID",
    "NEMO_RUN_ID",
    "NEMO_SPAN_TRUNCATED",
    "NEMO_SPAN_TRUNCATED_REASON",
    "NEMO_USER_ID",
    "NV_DL_LOCAL_RANK",
    "NV_DL_RANK",
    "NV_DL_ROLE",
    "NV_DL_WORLD_SIZE",
    "OTEL_METRIC_OVERFLOW",
    "PROCESS_PID",
    "RL_ALGORITHM",
    "RL_GENERATION_BACKEND",
    "RL_NUM_ROLLOUTS",
    "RL_REWARD",
    "SEMCONV_VERSION",
    "SERVICE_INSTANCE_ID",
    "SERVICE_NAME",
    "SERVICE_VERSION",
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_NNODES",
    "SLURM_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PARTITION",
    "WANDB_ENTITY",
    "WANDB_PROJECT",
]

#: The OpenTelemetry semantic-conventions release these names follow.
SEMCONV_VERSION = "1.29.0"

# OpenTelemetry resource keys lens sets on every exporting process.
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"
SERVICE_INSTANCE_ID = "service.instance.id"
HOST_NAME = "host.name"
PROCESS_PID = "process.pid"
DEPLOYMENT_ENVIRONMENT = "deployment.environment"
#: GPUs the process can use (`CUDA_VISIBLE_DEVICES`, else `nvidia-smi`); set when known.
HOST_GPU_COUNT = "host.gpu.count"

#: The OpenTelemetry metrics SDK's overflow attribute: the one attribute (value `True`) of
#: the series a point is recorded on once its instrument reached the cardinality limit.
OTEL_METRIC_OVERFLOW = "otel.metric.overflow"

# Deep-learning parallelism and training-step attributes.
DL_RANK = "dl.rank"
DL_WORLD_SIZE = "dl.world_size"
DL_LOCAL_RANK = "dl.local_rank"
DL_DATA_PARALLEL_RANK = "dl.data_parallel.rank"
DL_DATA_PARALLEL_SIZE = "dl.data_parallel.size"
DL_TENSOR_PARALLEL_RANK = "dl.tensor_parallel.rank"
DL_TENSOR_PARALLEL_SIZE = "dl.tensor_parallel.size"
DL_PIPELINE_PARALLEL_RANK = "dl.pipeline_parallel.rank"
DL_PIPELINE_PARALLEL_SIZE = "dl.pipeline_parallel.size"
DL_ITERATION = "dl.iteration"
DL_LOSS = "dl.loss"
DL_GRAD_NORM = "dl.grad_norm"
DL_LEARNING_RATE = "dl.learning_rate"
DL_THROUGHPUT_TFLOPS = "dl.throughput_tflops"
DL_THROUGHPUT_TOKENS_PER_SEC = "dl.throughput_tokens_per_sec"
DL_BATCH_SIZE = "dl.batch_size"
DL_SEQUENCE_LENGTH = "dl.sequence_length"
DL_MICROBATCH_ID = "dl.microbatch_id"

# NVIDIA resource keys for a process's place in the job (RL passes them as resource attributes).
NV_DL_RANK = "nv.dl.rank"
NV_DL_WORLD_SIZE = "nv.dl.world_size"
NV_DL_LOCAL_RANK = "nv.dl.local_rank"
NV_DL_ROLE = "nv.dl.role"

# OpenTelemetry GenAI semantic conventions (spelled GENAI_*).
GENAI_OPERATION_NAME = "gen_ai.operation.name"
GENAI_PROVIDER_NAME = "gen_ai.provider.name"
GENAI_REQUEST_MODEL = "gen_ai.request.model"
GENAI_TOKEN_TYPE = "gen_ai.token.type"

# Reinforcement-learning span attributes. Metric names are the consumer's own, so none live here.
RL_ALGORITHM = "rl.algorithm"
RL_REWARD = "rl.reward"
RL_GENERATION_BACKEND = "rl.generation.backend"
RL_NUM_ROLLOUTS = "rl.num_rollouts"

# Gym span attributes (no metric names, by the same rule).
GYM_SERVER_NAME = "gym.server.name"
GYM_SERVER_TYPE = "gym.server.type"
GYM_NUM_SERVERS = "gym.num_servers"
GYM_ROLLOUT_BATCH_SIZE = "gym.rollout.batch_size"

# Slurm job resource attributes.
SLURM_JOB_ID = "slurm.job.id"
SLURM_JOB_NAME = "slurm.job.name"
SLURM_NODELIST = "slurm.nodelist"
SLURM_NNODES = "slurm.nnodes"
SLURM_NTASKS = "slurm.ntasks"
SLURM_PARTITION = "slurm.partition"
SLURM_CLUSTER_NAME = "slurm.cluster.name"

# lens's own run attributes and Weights & Biases correlation keys.
NEMO_RUN_ID = "nemo.run.id"
NEMO_USER_ID = "nemo.user.id"
NEMO_SPAN_TRUNCATED = "nemo.span.truncated"
NEMO_SPAN_TRUNCATED_REASON = "nemo.span.truncated.reason"
WANDB_ENTITY = "wandb.entity"
WANDB_PROJECT = "wandb.project"

# Kubernetes resource attributes.
K8S_NAMESPACE_NAME = "k8s.namespace.name"
K8S_POD_NAME = "k8s.pod.name"
K8S_POD_UID = "k8s.pod.uid"
K8S_NODE_NAME = "k8s.node.name"
K8S_CONTAINER_NAME = "k8s.container.name"
K8S_JOB_NAME = "k8s.job.name"
