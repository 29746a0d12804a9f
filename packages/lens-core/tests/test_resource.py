"""The resource attributes an exporting process describes itself with."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from nemo.lens._sdk._pipeline import build_resource
from nemo.lens.resources import _attributes_for_setup, _clean_attributes, detect_resource
from nemo.lens.version import __version__


def attributes(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "service_name": "svc",
        "run_id": "run1",
        "user": "",
        "wandb_entity": "",
        "wandb_project": "",
        "rank": None,
        "world_size": None,
        "caller_attributes": None,
        "environ": {},
        "filesystem_root": Path("/nonexistent-root-for-lens-tests"),
    }
    arguments.update(overrides)
    return dict(_attributes_for_setup(**arguments))


def test_lens_keys_for_a_ranked_process() -> None:
    """Service, version, rank, run and instance ids, host and pid are written."""
    found = attributes(
        rank=2,
        world_size=4,
        user="u",
        wandb_entity="e",
        wandb_project="p",
        environ={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert found == {
        "service.name": "svc",
        "service.version": __version__,
        "dl.rank": 2,
        "dl.world_size": 4,
        "nemo.run.id": "run1",
        "service.instance.id": "run1-rank2",
        "nemo.user.id": "u",
        "wandb.entity": "e",
        "wandb.project": "p",
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "host.gpu.count": 2,
    }


def test_no_rank_means_no_dl_keys_and_a_unique_instance_id() -> None:
    """Without a rank, dl.* is absent and each process gets a distinct instance id."""
    first = attributes()
    second = attributes()
    assert "dl.rank" not in first
    assert "dl.world_size" not in first
    assert first["service.instance.id"].startswith("run1-")
    assert first["service.instance.id"] != second["service.instance.id"]


@pytest.mark.parametrize("key", ["dl.rank", "nv.dl.rank"])
def test_caller_rank_names_the_instance(key: str) -> None:
    """The caller's dl.rank or nv.dl.rank is used when no rank is passed."""
    found = attributes(caller_attributes={key: 5})
    assert found["service.instance.id"] == "run1-rank5"
    assert found[key] == 5


def test_forked_child_instance_id_carries_its_pid() -> None:
    """A forked child's instance id adds its pid, so it differs from its parent's."""
    found = attributes(rank=0, world_size=1, forked_child=True)
    assert found["service.instance.id"] == f"run1-rank0-pid{os.getpid()}"


def test_caller_attributes_win_over_every_lens_key() -> None:
    """Caller keys are applied last and arrive unchanged."""
    caller = {"service.name": "mine", "host.name": "h", "nv.dl.rank": 1, "tags": ["a", "b"]}
    found = attributes(rank=0, world_size=2, caller_attributes=caller)
    assert found["service.name"] == "mine"
    assert found["host.name"] == "h"
    assert found["nv.dl.rank"] == 1
    assert found["tags"] == ("a", "b")
    assert found["service.instance.id"] == "run1-rank0"


def test_detected_keys_are_nemo_lens_resources_and_lose_to_the_caller(tmp_path: Path) -> None:
    """Setup's detected keys are exactly `detect_resource()`'s, and caller keys beat them."""
    (tmp_path / "var/run/secrets/kubernetes.io").mkdir(parents=True)
    environ = {
        "CUDA_VISIBLE_DEVICES": "0,1,2",
        "SLURM_JOB_ID": "42",
        "SLURM_NTASKS": "8",
        "K8S_POD_NAME": "pod",
    }
    found = attributes(environ=environ, filesystem_root=tmp_path)
    detected = detect_resource(environ=environ, filesystem_root=tmp_path)
    assert {key: found[key] for key in detected} == detected
    caller = {"host.gpu.count": 1, "slurm.job.id": "mine", "k8s.pod.name": "p2", "process.pid": 1}
    overridden = attributes(environ=environ, filesystem_root=tmp_path, caller_attributes=caller)
    assert {key: overridden[key] for key in caller} == caller
    assert overridden["slurm.ntasks"] == "8"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"DEPLOYMENT_ENV": "prod", "ENVIRONMENT": "dev"}, "prod"),
        ({"ENVIRONMENT": "dev"}, "dev"),
        ({"DEPLOYMENT_ENV": "", "ENVIRONMENT": "dev"}, None),
        ({}, None),
    ],
)
def test_deployment_environment_rules(environ: dict[str, str], expected: str | None) -> None:
    """DEPLOYMENT_ENV wins; ENVIRONMENT is the fallback; a set-but-empty one blocks it."""
    assert attributes(environ=environ).get("deployment.environment") == expected


def test_slurm_detection_needs_a_job_id() -> None:
    """SLURM_* values become slurm.* keys only when SLURM_JOB_ID is set."""
    environ = {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "n[1-2]",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "16",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "c1",
    }
    found = attributes(environ=environ)
    assert {k: v for k, v in found.items() if k.startswith("slurm.")} == {
        "slurm.job.id": "42",
        "slurm.job.name": "train",
        "slurm.nodelist": "n[1-2]",
        "slurm.nnodes": "2",
        "slurm.ntasks": "16",
        "slurm.partition": "gpu",
        "slurm.cluster.name": "c1",
    }
    without_job = {k: v for k, v in environ.items() if k != "SLURM_JOB_ID"}
    assert not any(k.startswith("slurm.") for k in attributes(environ=without_job))


def test_kubernetes_detection_by_env_or_service_account(tmp_path: Path) -> None:
    """k8s.* keys appear under KUBERNETES_SERVICE_HOST or the service-account dir."""
    environ = {"K8S_NAMESPACE_NAME": "ns", "K8S_NODE_NAME": "node", "HOSTNAME": "pod-1"}
    assert not any(k.startswith("k8s.") for k in attributes(environ=environ))
    by_env = attributes(environ={**environ, "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert {k: v for k, v in by_env.items() if k.startswith("k8s.")} == {
        "k8s.namespace.name": "ns",
        "k8s.node.name": "node",
        "k8s.pod.name": "pod-1",
    }
    (tmp_path / "var/run/secrets/kubernetes.io").mkdir(parents=True)
    by_dir = attributes(environ=environ, filesystem_root=tmp_path)
    assert by_dir["k8s.namespace.name"] == "ns"


def test_unsupported_caller_values_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Values the SDK cannot carry are dropped, each warning naming its key."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.resources")
    cleaned = _clean_attributes(
        {"ok": 1.5, "none": None, "mixed": [1, "a"], "obj": object(), 3: "x", "flags": (True,)}
    )
    assert cleaned == {"ok": 1.5, "flags": (True,)}
    text = caplog.text
    for key in ("'none'", "'mixed'", "'obj'", "3"):
        assert key in text


def test_non_mapping_caller_attributes_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """A non-mapping is ignored with a warning."""
    caplog.set_level(logging.WARNING, logger="nemo.lens.resources")
    assert _clean_attributes(["a"]) == {}
    assert "must be a mapping" in caplog.text


def test_otel_resource_attributes_sit_beneath_lens_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_RESOURCE_ATTRIBUTES keys arrive unless lens or the caller sets the same key."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=ml,service.name=from-env")
    resource = build_resource(attributes())
    assert resource.attributes["team"] == "ml"
    assert resource.attributes["service.name"] == "svc"
    assert resource.attributes["telemetry.sdk.language"] == "python"


def test_undecodable_environment_values_become_encodable() -> None:
    """Lone surrogates from undecodable environment bytes are replaced by U+FFFD, and the
    SDK resource built from them encodes (it would poison every export otherwise)."""
    undecodable = os.fsdecode(b"job-\xff")
    found = attributes(
        run_id=undecodable,
        environ={"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": undecodable, "DEPLOYMENT_ENV": undecodable},
        caller_attributes={"team": undecodable},
    )
    for key in ("nemo.run.id", "slurm.job.name", "deployment.environment", "team"):
        assert found[key] == "job-\ufffd"
    assert found["service.instance.id"].startswith("job-\ufffd-")
    for value in found.values():
        if isinstance(value, str):
            value.encode("utf-8")


def test_the_pipeline_resource_serializes_its_attributes_for_a_hash_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resource setup builds (which the OTLP span encoder hashes once per span) hashes
    without serializing its attributes again, and is equal to, and hashes as, a plain SDK
    resource of the same attributes, its redacted values included."""
    from opentelemetry.sdk import resources as sdk_resources

    resource = build_resource(attributes(caller_attributes={"hf_token": "sk-1"}))
    plain = sdk_resources.Resource(resource.attributes, resource.schema_url)
    assert resource.attributes["hf_token"] == "[REDACTED]"
    assert resource == plain
    assert hash(resource) == hash(plain)
    serialized: list[object] = []

    def counting_dumps(*args: Any, **kwargs: Any) -> str:
        serialized.append(args)
        return json.dumps(*args, **kwargs)

    # What the SDK's Resource.__hash__ serializes with.
    monkeypatch.setattr("opentelemetry.sdk.resources.dumps", counting_dumps)
    assert len({hash(resource) for _ in range(3)}) == 1
    assert serialized == []


@pytest.fixture
def detections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each call of the SDK's `Resource.create`, counted (the last detection forgotten)."""
    from opentelemetry.sdk import resources as sdk_resources

    from nemo.lens._sdk import _pipeline

    monkeypatch.setattr(_pipeline, "_last_detection", None)
    made: list[object] = []
    create = sdk_resources.Resource.create

    def counting_create(*args: Any, **kwargs: Any) -> Any:
        made.append(args)
        return create(*args, **kwargs)

    monkeypatch.setattr(sdk_resources.Resource, "create", staticmethod(counting_create))
    return made


def test_the_resource_is_what_the_sdk_would_build_from_the_same_attributes(
    detections: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same attributes, same order, same schema URL as `Resource.create(attributes)`, the
    environment's attributes included."""
    from opentelemetry.sdk.resources import Resource

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=ml,service.name=from-env")
    given = attributes(caller_attributes={"tags": ["a", "b"]})
    built = build_resource(given)
    expected = Resource.create(given)
    assert list(built.attributes.items()) == list(expected.attributes.items())
    assert built.attributes["tags"] == ("a", "b")
    assert built.schema_url == expected.schema_url


def test_a_second_setup_reuses_the_detection_while_the_environment_is_the_same(
    detections: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's detection runs once for two setups (with other attributes); a changed
    OpenTelemetry variable makes the next setup detect again, and reads the new value."""
    first = build_resource(attributes(run_id="one"))
    second = build_resource(attributes(run_id="two"))
    assert len(detections) == 1
    assert first.attributes["nemo.run.id"] == "one"
    assert second.attributes["nemo.run.id"] == "two"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=ml")
    third = build_resource(attributes())
    assert len(detections) == 2
    assert third.attributes["team"] == "ml"


def test_detectors_named_in_the_environment_detect_at_every_setup(
    detections: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Detectors a user names may find something new each time: never reused."""
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel")
    build_resource(attributes())
    build_resource(attributes())
    assert len(detections) == 2


@pytest.mark.fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process.*multi-threaded:DeprecationWarning")
def test_a_forked_child_detects_its_own_resource(detections: list[object]) -> None:
    """A detection is the process's: a forked child runs its own, once."""
    from lens_fork import in_child

    build_resource(attributes())

    def twice_in_child() -> int:
        before = len(detections)
        build_resource(attributes())
        build_resource(attributes())
        return len(detections) - before

    assert in_child(twice_in_child) == 1
    assert len(detections) == 1
