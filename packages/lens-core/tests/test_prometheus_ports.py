"""Prometheus with several exporting ranks per node: rank LOCAL_RANK=k serves on base + k.

Each case runs setup in a child interpreter with only the variables it sets.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from lens_children import free_port, run_child

from nemo.lens import _otel_env
from nemo.lens.errors import LensValueError

_CHILD = """
import json, socket, sys
from nemo.lens import NemoLensConfig, setup_telemetry
strategy, base = sys.argv[1], int(sys.argv[2])
def bound(port):
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))
        return False
    except OSError:
        return True
    finally:
        probe.close()
config = NemoLensConfig(enabled=True, exporter="prometheus", traces_enabled=False)
config.export_rank = 3  # single_rank picks this child (rank 3 of 8)
custom = None
if strategy == "custom":
    custom = lambda config, rank, world_size: True
else:
    config.export_strategy = strategy
outcome = {"error": None}
try:
    handle = setup_telemetry(config, rank=3, world_size=8, export_strategy=custom)
except Exception as exc:
    outcome["error"] = [type(exc).__name__, str(exc)]
else:
    outcome["bound"] = [offset for offset in range(5) if bound(base + offset)]
    handle.shutdown(timeout_ms=500)
print(json.dumps(outcome))
"""


def free_run(length: int) -> int:
    """A base port such that base .. base + length - 1 are free on 127.0.0.1 right now."""
    for _ in range(50):
        base = free_port()
        if base + length > 65535:
            continue
        try:
            probes = []
            for offset in range(length):
                extra = socket.socket()
                probes.append(extra)
                extra.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        finally:
            for extra in probes:
                extra.close()
        return base
    raise AssertionError("no run of free ports found")


def setup_as(strategy: str, local_rank: str, base: int | None = None) -> dict[str, Any]:
    """Rank 3 of 8 sets up Prometheus under `strategy` with LOCAL_RANK; what it bound."""
    port = free_run(5) if base is None else base
    environ = {"OTEL_EXPORTER_PROMETHEUS_PORT": str(port), "LOCAL_RANK": local_rank}
    run = run_child(_CHILD, environ, 120, strategy, str(port))
    assert run.returncode == 0, run.stderr
    outcome: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return outcome


@pytest.mark.parametrize("strategy", ["all_ranks", "custom"])
def test_several_exporters_per_node_offset_the_port_by_local_rank(strategy: str) -> None:
    """all_ranks (or a custom strategy) with LOCAL_RANK=3: the endpoint serves on base + 3."""
    assert setup_as(strategy, "3") == {"error": None, "bound": [3]}


@pytest.mark.parametrize(
    ("strategy", "local_rank"), [("single_rank", "3"), ("first_rank_per_node", "0")]
)
def test_single_exporter_strategies_keep_the_base_port(strategy: str, local_rank: str) -> None:
    """single_rank / first_rank_per_node serve on OTEL_EXPORTER_PROMETHEUS_PORT itself."""
    assert setup_as(strategy, local_rank) == {"error": None, "bound": [0]}


def test_a_port_beyond_65535_after_the_offset_fails_naming_both_variables() -> None:
    """Base 65534 with LOCAL_RANK=3 under all_ranks: a LensValueError naming both."""
    outcome = setup_as("all_ranks", "3", base=65534)
    assert outcome["error"] is not None
    kind, message = outcome["error"]
    assert kind == "LensValueError"
    assert "OTEL_EXPORTER_PROMETHEUS_PORT" in message
    assert "LOCAL_RANK" in message
    assert "65535" in message


def test_the_rule_offsets_only_when_several_ranks_per_node_export() -> None:
    """prometheus_serving_address: base + LOCAL_RANK, base when one per node, 0 stays 0."""
    environ = {"OTEL_EXPORTER_PROMETHEUS_PORT": "9464", "LOCAL_RANK": "7"}
    serve = _otel_env.prometheus_serving_address
    assert serve(one_exporter_per_node=False, environ=environ) == ("127.0.0.1", 9471)
    assert serve(one_exporter_per_node=True, environ=environ) == ("127.0.0.1", 9464)
    assert serve(one_exporter_per_node=False, environ={"LOCAL_RANK": "2"})[1] == 9466
    zero = {"OTEL_EXPORTER_PROMETHEUS_PORT": "0", "LOCAL_RANK": "2"}
    assert serve(one_exporter_per_node=False, environ=zero)[1] == 0
    with pytest.raises(LensValueError, match="LOCAL_RANK"):
        serve(one_exporter_per_node=False, environ={"LOCAL_RANK": "-1"})
