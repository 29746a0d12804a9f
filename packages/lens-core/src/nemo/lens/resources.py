"""Resource attributes detected from the host, from SLURM and from Kubernetes.

Each function returns a plain dict and never raises: whatever cannot be detected is left
out. `setup_telemetry` applies these keys beneath the caller's `resource_attributes`, so
a key the caller gives always wins over a detected one.

Importing this module reads nothing and starts no process. `detect_local()` asks
`nvidia-smi` for the GPU count the first time it needs to, and remembers the answer for
the rest of the process.

The whole resource of an exporting process is built here too, in a fixed order where
later keys win: lens's own keys, then what the `detect_*` functions find, then the
caller's `resource_attributes`, which therefore arrive unchanged.
"""

# `resource_attributes` is setup's, not public. `OTEL_RESOURCE_ATTRIBUTES` sits beneath
# all its keys (the SDK merges it), but for `service.name`: the caller passes the name
# already resolved in OpenTelemetry's order (`_otel_env.environment_service_name`).

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from nemo.lens import semconv
from nemo.lens._attributes import attribute_key, attribute_value, encodable_text
from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "detect_kubernetes",
    "detect_local",
    "detect_resource",
    "detect_slurm",
]

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "resource detection")

# (resource key, environment variables read in order); the first non-empty value wins.
_SLURM_KEYS: Final = (
    (semconv.SLURM_JOB_ID, ("SLURM_JOB_ID",)),
    (semconv.SLURM_JOB_NAME, ("SLURM_JOB_NAME",)),
    (semconv.SLURM_NODELIST, ("SLURM_JOB_NODELIST", "SLURM_NODELIST")),
    (semconv.SLURM_NNODES, ("SLURM_JOB_NUM_NODES", "SLURM_NNODES")),
    (semconv.SLURM_NTASKS, ("SLURM_NTASKS",)),
    (semconv.SLURM_PARTITION, ("SLURM_JOB_PARTITION",)),
    (semconv.SLURM_CLUSTER_NAME, ("SLURM_CLUSTER_NAME",)),
)
_K8S_KEYS: Final = (
    (semconv.K8S_NAMESPACE_NAME, "K8S_NAMESPACE_NAME"),
    (semconv.K8S_POD_NAME, "K8S_POD_NAME"),
    (semconv.K8S_POD_UID, "K8S_POD_UID"),
    (semconv.K8S_NODE_NAME, "K8S_NODE_NAME"),
    (semconv.K8S_CONTAINER_NAME, "K8S_CONTAINER_NAME"),
    (semconv.K8S_JOB_NAME, "K8S_JOB_NAME"),
)
_K8S_SECRETS: Final = os.path.join("var", "run", "secrets", "kubernetes.io")

_NVIDIA_SMI_COMMAND: Final = ("nvidia-smi", "--query-gpu=count", "--format=csv,noheader")
# Seconds nvidia-smi may take before it is killed and the count left out. Not Final: the
# tests lower it to keep a hung fake nvidia-smi quick.
_NVIDIA_SMI_TIMEOUT_S: float = 5.0
# CUDA_VISIBLE_DEVICES may name GPUs by UUID (`GPU-...`) or MIG instance (`MIG-...`).
_DEVICE_UUID_PREFIXES: Final = ("GPU-", "MIG-")


def detect_resource(
    *, environ: Mapping[str, str] | None = None, filesystem_root: str | os.PathLike[str] = "/"
) -> dict[str, str | int]:
    """Return the local, then SLURM, then Kubernetes keys; a later key wins.

    Args:
        environ: The environment to read (the process's by default).
        filesystem_root: Where Kubernetes' service-account directory is looked for.
    """
    found = detect_local(environ=environ)
    found.update(detect_slurm(environ=environ))
    found.update(detect_kubernetes(environ=environ, filesystem_root=filesystem_root))
    return found


def detect_local(*, environ: Mapping[str, str] | None = None) -> dict[str, str | int]:
    """Return `host.name`, `process.pid` and, when known, `host.gpu.count`.

    The GPU count comes from `CUDA_VISIBLE_DEVICES` when it is set: CUDA reads the list
    left to right and stops at the first entry that names no device, so `"0,1"` and
    `"GPU-a,GPU-b"` count 2, while a blank value, `"-1"` or `"NoDevFiles"` count 0 (an
    index is not checked against the GPUs actually present). When the variable is unset,
    `nvidia-smi` is asked, once per process (a forked child keeps its parent's answer); a
    missing, failing or slow (over 5 s) `nvidia-smi` leaves the key out.

    Args:
        environ: The environment to read (the process's by default). `nvidia-smi` always
            runs in the process's own environment.
    """
    try:
        env = os.environ if environ is None else environ
        found: dict[str, str | int] = {
            semconv.HOST_NAME: encodable_text(socket.gethostname()),
            semconv.PROCESS_PID: os.getpid(),
        }
        visible = env.get("CUDA_VISIBLE_DEVICES")
        gpu_count = _gpu_count_memory.get() if visible is None else _visible_gpu_count(visible)
        if gpu_count is not None:
            found[semconv.HOST_GPU_COUNT] = gpu_count
        return found
    except Exception as exc:
        return _failed("detect_local", exc)


def detect_slurm(*, environ: Mapping[str, str] | None = None) -> dict[str, str | int]:
    """Return the `slurm.*` keys, or `{}` unless `SLURM_JOB_ID` is set.

    Each key takes the first non-empty variable of its row: `slurm.job.id` from
    `SLURM_JOB_ID`, `slurm.job.name` from `SLURM_JOB_NAME`, `slurm.nodelist` from
    `SLURM_JOB_NODELIST` or `SLURM_NODELIST`, `slurm.nnodes` from `SLURM_JOB_NUM_NODES`
    or `SLURM_NNODES`, `slurm.ntasks` from `SLURM_NTASKS`, `slurm.partition` from
    `SLURM_JOB_PARTITION` and `slurm.cluster.name` from `SLURM_CLUSTER_NAME`.

    Args:
        environ: The environment to read (the process's by default).
    """
    try:
        env = os.environ if environ is None else environ
        if not env.get("SLURM_JOB_ID", "").strip():
            return {}
        found: dict[str, str | int] = {}
        for key, variables in _SLURM_KEYS:
            for variable in variables:
                value = env.get(variable, "").strip()
                if value:
                    found[key] = encodable_text(value)
                    break
        return found
    except Exception as exc:
        return _failed("detect_slurm", exc)


def detect_kubernetes(
    *, environ: Mapping[str, str] | None = None, filesystem_root: str | os.PathLike[str] = "/"
) -> dict[str, str | int]:
    """Return the `k8s.*` keys, or `{}` outside a Kubernetes pod.

    A process is in a pod when `KUBERNETES_SERVICE_HOST` is set or
    `var/run/secrets/kubernetes.io` exists under `filesystem_root`. The keys come from
    `K8S_NAMESPACE_NAME`, `K8S_POD_NAME`, `K8S_POD_UID`, `K8S_NODE_NAME`,
    `K8S_CONTAINER_NAME` and `K8S_JOB_NAME` (set through the downward API); `HOSTNAME`,
    which Kubernetes sets to the pod's name, stands in for a missing `K8S_POD_NAME`.

    Args:
        environ: The environment to read (the process's by default).
        filesystem_root: Where the service-account directory is looked for.
    """
    try:
        env = os.environ if environ is None else environ
        if not _in_kubernetes(env, filesystem_root):
            return {}
        found: dict[str, str | int] = {}
        for key, variable in _K8S_KEYS:
            value = env.get(variable, "").strip()
            if value:
                found[key] = encodable_text(value)
        if semconv.K8S_POD_NAME not in found:
            hostname = env.get("HOSTNAME", "").strip()
            if hostname:
                found[semconv.K8S_POD_NAME] = encodable_text(hostname)
        return found
    except Exception as exc:
        return _failed("detect_kubernetes", exc)


def _in_kubernetes(env: Mapping[str, str], filesystem_root: str | os.PathLike[str]) -> bool:
    if env.get("KUBERNETES_SERVICE_HOST", "").strip():
        return True
    # False, not an error, for a path too long, unreadable, or holding a NUL. os.path, not
    # pathlib: pathlib costs every process that sets up ~1 ms to import.
    return os.path.exists(os.path.join(filesystem_root, _K8S_SECRETS))


def _failed(function: str, exc: Exception) -> dict[str, str | int]:
    _warnings.warn(
        (function, type(exc)),
        "%s could not detect resource attributes (%s: %s); they were left out",
        function,
        type(exc).__name__,
        exc,
    )
    return {}


def _visible_gpu_count(visible: str) -> int:
    """The GPUs a `CUDA_VISIBLE_DEVICES` value lets CUDA see (entries before the first invalid)."""
    count = 0
    for entry in visible.split(","):
        device = entry.strip()
        by_index = device.isascii() and device.isdigit()
        by_uuid = device.upper().startswith(_DEVICE_UUID_PREFIXES) and len(device) > 4
        if not (by_index or by_uuid):
            break
        count += 1
    return count


# A line `_ask_nvidia_smi` leaves to be logged: (level, message, its arguments).
_LogLine = tuple[int, str, tuple[object, ...]]


class _GpuCountMemory:
    """nvidia-smi's answer, asked for at most once per process.

    The lock is held while nvidia-smi runs, so concurrent first callers ask only once. A
    fork while it is held would leave the child a lock nobody releases, so the lock is
    replaced in a process that did not create it; the answer itself is kept across fork
    (a child has its parent's GPUs). The lock is not held across fork (`_fork_hooks`): a
    fork would then wait for nvidia-smi.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock_built = BuiltHere()
        self._asked = False
        self._count: int | None = None

    def get(self) -> int | None:
        if self._asked:
            return self._count
        line = None
        with self._lock_of_this_process():
            if not self._asked:
                self._count, line = _ask_nvidia_smi()
                self._asked = True
            count = self._count
        if line is not None:  # after the lock: a logging handler may call back into lens
            level, message, arguments = line
            _logger.log(level, message, *arguments)
        return count

    def forget(self) -> None:
        """Ask nvidia-smi again on the next call (for tests)."""
        self._asked = False
        self._count = None

    def _lock_of_this_process(self) -> threading.Lock:
        if not self._lock_built.here():
            self._lock = threading.Lock()
            self._lock_built = BuiltHere()
        return self._lock


def _on_path(program: str) -> str | None:
    """Where `program` runs from, searched on PATH as `subprocess` searches it, or None.

    Starting a process to learn that nvidia-smi is missing costs a setup about 0.4 ms of
    CPU on a machine without GPUs; looking first costs about 30 us on an 11-entry PATH
    (and `shutil.which` would import `shutil`, about 1 ms).
    """
    for directory in os.get_exec_path():
        candidate = os.path.join(directory or os.curdir, program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _ask_nvidia_smi() -> tuple[int | None, _LogLine | None]:
    """The GPU count nvidia-smi reports, or None when it cannot tell (never raises), and
    the line to log about it: logged by the caller once it released its lock."""
    timeout_s = _NVIDIA_SMI_TIMEOUT_S
    try:
        program = _on_path(_NVIDIA_SMI_COMMAND[0])
        if program is None:
            return None, (logging.DEBUG, "nvidia-smi is not on PATH", ())
        completed = subprocess.run(
            (program, *_NVIDIA_SMI_COMMAND[1:]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, (
            logging.WARNING,
            "nvidia-smi did not answer within %s s, so host.gpu.count is left out of the "
            "resource (set CUDA_VISIBLE_DEVICES to give the count without nvidia-smi)",
            (timeout_s,),
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, (logging.DEBUG, "nvidia-smi could not run (%s: %s)", (type(exc).__name__, exc))
    if completed.returncode != 0:
        return None, (logging.DEBUG, "nvidia-smi exited with %d", (completed.returncode,))
    # One line per GPU, each holding the total count.
    first_line = completed.stdout.decode("utf-8", "replace").strip().partition("\n")[0].strip()
    if not (first_line.isascii() and first_line.isdigit()):
        return None, (logging.DEBUG, "nvidia-smi printed no GPU count: %r", (first_line[:100],))
    return int(first_line), None


_gpu_count_memory = _GpuCountMemory()


# --- the resource of an exporting process (setup's) ------------------------------------------


def _attributes_for_setup(
    *,
    service_name: str,
    run_id: str,
    user: str,
    wandb_entity: str,
    wandb_project: str,
    rank: int | None,
    world_size: int | None,
    caller_attributes: Mapping[str, object] | None,
    forked_child: bool = False,
    environ: Mapping[str, str] | None = None,
    filesystem_root: str | os.PathLike[str] = "/",
) -> dict[str, AttributeValue]:
    """Return the resource attributes for one exporting process, later keys winning.

    Args:
        service_name: `service.name`.
        run_id: The run id (`nemo.run.id`); part of `service.instance.id`.
        user: `nemo.user.id` when non-empty.
        wandb_entity: `wandb.entity` when non-empty.
        wandb_project: `wandb.project` when non-empty.
        rank: `dl.rank`, given together with `world_size` or not at all.
        world_size: `dl.world_size`.
        caller_attributes: Applied last; a value the SDK cannot carry is dropped with a
            warning naming its key.
        forked_child: This process was forked from one that had set lens up, so its
            rank alone does not tell it apart from its parent.
        environ: The environment to read (the process's by default).
        filesystem_root: Where Kubernetes' service-account directory is looked for.
    """
    env = os.environ if environ is None else environ
    caller = _clean_attributes(caller_attributes)
    attributes: dict[str, AttributeValue] = {
        semconv.SERVICE_NAME: service_name,
        semconv.SERVICE_VERSION: __version__,
    }
    if rank is not None and world_size is not None:
        attributes[semconv.DL_RANK] = rank
        attributes[semconv.DL_WORLD_SIZE] = world_size
    if run_id:
        attributes[semconv.NEMO_RUN_ID] = run_id
        attributes[semconv.SERVICE_INSTANCE_ID] = _instance_id(run_id, rank, caller, forked_child)
    for key, value in (
        (semconv.NEMO_USER_ID, user),
        (semconv.WANDB_ENTITY, wandb_entity),
        (semconv.WANDB_PROJECT, wandb_project),
    ):
        if value:
            attributes[key] = value
    # A set-but-empty DEPLOYMENT_ENV deliberately blocks the ENVIRONMENT fallback.
    environment = env["DEPLOYMENT_ENV"] if "DEPLOYMENT_ENV" in env else env.get("ENVIRONMENT")
    if environment:
        attributes[semconv.DEPLOYMENT_ENVIRONMENT] = environment
    attributes.update(detect_resource(environ=env, filesystem_root=filesystem_root))
    # Environment values can hold lone surrogates (undecodable bytes); the SDK would fail
    # to encode every export under such a resource, so they pass the attribute rule too.
    for key, found in attributes.items():
        if isinstance(found, str):
            attributes[key] = encodable_text(found)
    attributes.update(caller)
    return attributes


def _clean_attributes(attributes: object) -> dict[str, AttributeValue]:
    """Keep the entries an OpenTelemetry resource can carry; warn once per dropped key."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        _logger.warning(
            "resource_attributes must be a mapping of str -> attribute value, got %s; "
            "it was ignored",
            type(attributes).__name__,
        )
        return {}
    cleaned: dict[str, AttributeValue] = {}
    for raw_key, value in attributes.items():
        key = attribute_key(raw_key)
        if key is None:
            _logger.warning(
                "resource_attributes: key %r is not a non-empty string; the entry was dropped",
                raw_key,
            )
            continue
        carried = attribute_value(value)
        if carried is None:
            _logger.warning(
                "resource_attributes: the value of %r (%s: %r) is not a str, bool, int, "
                "float or a homogeneous sequence of one of those; the entry was dropped",
                key,
                type(value).__name__,
                value,
            )
            continue
        cleaned[key] = carried
    return cleaned


def _rank_from_attributes(attributes: object) -> tuple[int | None, int | None]:
    """The rank and world size a caller gave as resource attributes, or (None, None).

    Generation-B consumers pass no `rank=` to setup but `dl.rank`/`nv.dl.rank` and
    `dl.world_size`/`nv.dl.world_size` as resource attributes; the rank-aware sampler
    hashes that rank. Both must be ints with 0 <= rank < world size.
    """
    if not isinstance(attributes, Mapping):
        return None, None
    rank = attributes.get(semconv.DL_RANK, attributes.get(semconv.NV_DL_RANK))
    world = attributes.get(semconv.DL_WORLD_SIZE, attributes.get(semconv.NV_DL_WORLD_SIZE))
    if type(rank) is int and type(world) is int and 0 <= rank < world:
        return rank, world
    return None, None


def _instance_id(
    run_id: str, rank: int | None, caller: Mapping[str, AttributeValue], forked_child: bool
) -> str:
    """`<run_id>-rank<r>` when a rank is known; otherwise made unique with random hex."""
    known_rank: object = rank
    if known_rank is None:
        known_rank = caller.get(semconv.DL_RANK, caller.get(semconv.NV_DL_RANK))
    if known_rank is None:
        return f"{run_id}-{uuid.uuid4().hex[:12]}"
    instance = f"{run_id}-rank{known_rank}"
    # A forked child shares its parent's rank; its pid keeps the two series apart.
    return f"{instance}-pid{os.getpid()}" if forked_child else instance
