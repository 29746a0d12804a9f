"""The resource attributes an exporting process describes itself with.

Keys are applied in a fixed order and later ones win: lens's own keys, then the host,
SLURM and Kubernetes detection, then the caller's `resource_attributes`, which therefore
arrive unchanged. `OTEL_RESOURCE_ATTRIBUTES` sits beneath them all (the SDK merges it).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.util.types import AttributeValue

__all__ = ["build_resource", "clean_attributes", "resource_attributes"]

_logger = logging.getLogger(__name__)

_SCALAR_TYPES: Final = (str, bool, int, float)

# (resource key, environment variables read in order); the first non-empty value wins.
_SLURM_KEYS: Final = (
    ("slurm.job.id", ("SLURM_JOB_ID",)),
    ("slurm.job.name", ("SLURM_JOB_NAME",)),
    ("slurm.nodelist", ("SLURM_JOB_NODELIST", "SLURM_NODELIST")),
    ("slurm.nnodes", ("SLURM_JOB_NUM_NODES", "SLURM_NNODES")),
    ("slurm.ntasks", ("SLURM_NTASKS",)),
    ("slurm.partition", ("SLURM_JOB_PARTITION",)),
    ("slurm.cluster.name", ("SLURM_CLUSTER_NAME",)),
)
_K8S_KEYS: Final = (
    ("k8s.namespace.name", "K8S_NAMESPACE_NAME"),
    ("k8s.pod.name", "K8S_POD_NAME"),
    ("k8s.pod.uid", "K8S_POD_UID"),
    ("k8s.node.name", "K8S_NODE_NAME"),
    ("k8s.container.name", "K8S_CONTAINER_NAME"),
    ("k8s.job.name", "K8S_JOB_NAME"),
)
_K8S_SECRETS: Final = Path("var/run/secrets/kubernetes.io")


def resource_attributes(
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
    filesystem_root: Path = Path("/"),
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
    caller = clean_attributes(caller_attributes)
    attributes: dict[str, AttributeValue] = {
        "service.name": service_name,
        "service.version": __version__,
    }
    if rank is not None and world_size is not None:
        attributes["dl.rank"] = rank
        attributes["dl.world_size"] = world_size
    if run_id:
        attributes["nemo.run.id"] = run_id
        attributes["service.instance.id"] = _instance_id(run_id, rank, caller, forked_child)
    for key, value in (
        ("nemo.user.id", user),
        ("wandb.entity", wandb_entity),
        ("wandb.project", wandb_project),
    ):
        if value:
            attributes[key] = value
    # A set-but-empty DEPLOYMENT_ENV deliberately blocks the ENVIRONMENT fallback.
    environment = env["DEPLOYMENT_ENV"] if "DEPLOYMENT_ENV" in env else env.get("ENVIRONMENT")
    if environment:
        attributes["deployment.environment"] = environment
    attributes["host.name"] = socket.gethostname()
    attributes["process.pid"] = os.getpid()
    attributes.update(_detect_slurm(env))
    attributes.update(_detect_kubernetes(env, filesystem_root))
    attributes.update(caller)
    return attributes


def build_resource(attributes: Mapping[str, AttributeValue]) -> Resource:
    """Return an SDK `Resource` of `attributes` over the SDK's own detection."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create(dict(attributes))


def clean_attributes(attributes: object) -> dict[str, AttributeValue]:
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
    for key, value in attributes.items():
        if not isinstance(key, str) or not key:
            _logger.warning(
                "resource_attributes: key %r is not a non-empty string; the entry was dropped",
                key,
            )
            continue
        carried = _as_attribute_value(value)
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


def _as_attribute_value(value: object) -> AttributeValue | None:
    if isinstance(value, _SCALAR_TYPES):
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            return tuple(value)
        first_type = type(value[0])
        if first_type in _SCALAR_TYPES and all(type(item) is first_type for item in value):
            return tuple(value)
    return None


def _instance_id(
    run_id: str, rank: int | None, caller: Mapping[str, AttributeValue], forked_child: bool
) -> str:
    """`<run_id>-rank<r>` when a rank is known; otherwise made unique with random hex."""
    known_rank: object = rank
    if known_rank is None:
        known_rank = caller.get("dl.rank", caller.get("nv.dl.rank"))
    if known_rank is None:
        return f"{run_id}-{uuid.uuid4().hex[:12]}"
    instance = f"{run_id}-rank{known_rank}"
    # A forked child shares its parent's rank; its pid keeps the two series apart.
    return f"{instance}-pid{os.getpid()}" if forked_child else instance


def _detect_slurm(env: Mapping[str, str]) -> dict[str, AttributeValue]:
    if not env.get("SLURM_JOB_ID", "").strip():
        return {}
    found: dict[str, AttributeValue] = {}
    for key, variables in _SLURM_KEYS:
        for variable in variables:
            value = env.get(variable, "").strip()
            if value:
                found[key] = value
                break
    return found


def _detect_kubernetes(env: Mapping[str, str], filesystem_root: Path) -> dict[str, AttributeValue]:
    in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST", "").strip())
    if not in_cluster:
        try:
            in_cluster = (filesystem_root / _K8S_SECRETS).exists()
        except OSError:
            in_cluster = False
    if not in_cluster:
        return {}
    found: dict[str, AttributeValue] = {}
    for key, variable in _K8S_KEYS:
        value = env.get(variable, "").strip()
        if value:
            found[key] = value
    if "k8s.pod.name" not in found:
        hostname = env.get("HOSTNAME", "").strip()
        if hostname:
            found["k8s.pod.name"] = hostname
    return found
