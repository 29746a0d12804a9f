"""The resource attributes an exporting process describes itself with.

Keys are applied in a fixed order and later ones win: lens's own keys, then what
`nemo.lens.resources` detects (host, SLURM, Kubernetes), then the caller's
`resource_attributes`, which therefore arrive unchanged. `OTEL_RESOURCE_ATTRIBUTES` sits
beneath them all (the SDK merges it), but for `service.name`: the caller passes the name
already resolved in OpenTelemetry's order (`_otel_env.environment_service_name`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nemo.lens import resources, semconv
from nemo.lens._attributes import attribute_key, attribute_value, encodable_text
from nemo.lens.version import __version__

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

_logger = logging.getLogger(__name__)


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
    attributes.update(resources.detect_resource(environ=env, filesystem_root=filesystem_root))
    # Environment values can hold lone surrogates (undecodable bytes); the SDK would fail
    # to encode every export under such a resource, so they pass the attribute rule too.
    for key, found in attributes.items():
        if isinstance(found, str):
            attributes[key] = encodable_text(found)
    attributes.update(caller)
    return attributes


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


def rank_from_attributes(attributes: object) -> tuple[int | None, int | None]:
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
