"""broadcast_trace_context and create_linked_span between two real ranks (torch, gloo).

The test starts this file as a script twice, as rank 0 and rank 1 of a gloo process group
on 127.0.0.1. Each rank runs the same scenarios in the same order (every call is a
collective) and writes what it saw to a JSON file; the tests compare the two reports.
Every wait is bounded: the process group's init and collectives by `COLLECTIVE_TIMEOUT_S`,
the children by `JOIN_TIMEOUT_S` (then they are killed).
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lens_children import child_env, free_port
from lens_integrations import require

pytestmark = pytest.mark.integration

WORLD_SIZE = 2
COLLECTIVE_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120
SUPPORT = Path(__file__).resolve().parent / "support"

Report = dict[str, Any]


# --- the child: one rank ----------------------------------------------------------------------


def run_rank(rank: int, out: Path) -> None:
    """Join the process group as `rank`, run every scenario, write the report to `out`."""
    dist = importlib.import_module("torch.distributed")
    from opentelemetry import propagate
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import CarrierT, TextMapPropagator, default_setter

    from nemo.lens import broadcast_trace_context, create_linked_span
    from nemo.lens.testing import in_memory_spans

    class Oversized(TextMapPropagator):
        """Writes a carrier far past what broadcast_trace_context sends."""

        def extract(
            self, carrier: CarrierT, context: Context | None = None, getter: Any = None
        ) -> Context:
            return Context()

        def inject(
            self, carrier: CarrierT, context: Context | None = None, setter: Any = default_setter
        ) -> None:
            setter.set(carrier, "x-huge", "a" * 1_000_000)

        @property
        def fields(self) -> set[str]:
            return {"x-huge"}

    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("nemo.lens.distributed").addHandler(Collect(logging.WARNING))
    dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    spans = in_memory_spans()
    tracer = spans.tracer
    report: Report = {"rank": rank}

    def ids(span_context: Any) -> list[str]:
        return [f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"]

    def linked(carrier: dict[str, str] | None) -> Report:
        """Link a span to `carrier`; what the finished span shows."""
        spans.clear()
        span = create_linked_span(tracer, "recv", remote_carrier=carrier, rank=rank)
        span.end()
        (finished,) = spans.finished()
        return {
            "links": [ids(link.context) for link in finished.links],
            "parent": None if finished.parent is None else ids(finished.parent),
            "attributes": dict(finished.attributes or {}),
        }

    # A step span on rank 0; rank 1 links to it.
    if rank == 0:
        with tracer.start_as_current_span("step") as step:
            carrier = broadcast_trace_context(rank)
        report["step"] = {"carrier": carrier, "span": ids(step.get_span_context())}
    else:
        carrier = broadcast_trace_context(rank)
        report["step"] = {"carrier": carrier, **linked(carrier)}

    # No active span on the source.
    report["no_span"] = broadcast_trace_context(rank)

    # Rank 1 is the source, inside a span of its own.
    if rank == 1:
        with tracer.start_as_current_span("step") as step:
            carrier = broadcast_trace_context(rank, src_rank=1)
        report["src_1"] = {"carrier": carrier, "span": ids(step.get_span_context())}
    else:
        carrier = broadcast_trace_context(rank, src_rank=1)
        report["src_1"] = {"carrier": carrier, **linked(carrier)}

    # A carrier too large to send: None on every rank.
    if rank == 0:
        saved = propagate.get_global_textmap()
        propagate.set_global_textmap(Oversized())
        report["oversized"] = broadcast_trace_context(rank)
        propagate.set_global_textmap(saved)
    else:
        report["oversized"] = broadcast_trace_context(rank)

    # Rank 1 wrongly says it is rank 0: the process group decides, rank 0 still sends.
    if rank == 0:
        with tracer.start_as_current_span("step") as step:
            carrier = broadcast_trace_context(0)
        report["mismatch"] = {"carrier": carrier, "span": ids(step.get_span_context())}
    else:
        carrier = broadcast_trace_context(0)
        report["mismatch"] = {"carrier": carrier, **linked(carrier)}

    dist.destroy_process_group()
    spans.shutdown()
    report["warnings"] = warnings
    out.write_text(json.dumps(report), encoding="utf-8")


# --- the parent: start both ranks, read their reports -----------------------------------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Report]:
    """Run both ranks once for the whole module; rank -> its report."""
    if importlib.util.find_spec("torch") is None:
        require("torch")  # skips here, or fails when this run requires torch
    directory = tmp_path_factory.mktemp("ranks")
    env = child_env(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}, python_path=[SUPPORT]
    )
    children = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(directory / f"rank{rank}.json")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD_SIZE)
    ]
    outputs: list[str] = []
    try:
        # Importing torch takes seconds: the parent does it while the children do theirs.
        torch = require("torch")
        assert torch.distributed.is_available()
        assert torch.distributed.is_gloo_available()
        for child in children:
            output, _ = child.communicate(timeout=JOIN_TIMEOUT_S)
            outputs.append(output)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate(timeout=10)
    for rank, child in enumerate(children):
        assert child.returncode == 0, f"rank {rank} exited {child.returncode}:\n{outputs[rank]}"
    return {
        rank: json.loads((directory / f"rank{rank}.json").read_text(encoding="utf-8"))
        for rank in range(WORLD_SIZE)
    }


def test_rank_1_links_to_rank_0s_step_span(reports: dict[int, Report]) -> None:
    """Rank 0 broadcasts inside its step span; rank 1's linked span links to that very span."""
    sent, received = reports[0]["step"], reports[1]["step"]
    trace_id, span_id = sent["span"]
    assert sent["carrier"]["traceparent"].split("-")[1:3] == [trace_id, span_id]
    assert received["carrier"] == sent["carrier"]
    assert received["links"] == [[trace_id, span_id]]
    assert received["parent"] is None  # no current span on rank 1: a root of its own
    assert received["attributes"] == {"rank": 1}


def test_no_active_span_gives_an_empty_carrier_on_both_ranks(reports: dict[int, Report]) -> None:
    """Without an active span on the source, every rank gets `{}`."""
    assert reports[0]["no_span"] == {}
    assert reports[1]["no_span"] == {}


def test_any_rank_can_be_the_source(reports: dict[int, Report]) -> None:
    """With src_rank=1, rank 0 receives rank 1's context and links to its span."""
    sent, received = reports[1]["src_1"], reports[0]["src_1"]
    assert received["carrier"] == sent["carrier"]
    assert received["links"] == [sent["span"]]


def test_a_carrier_too_large_to_send_is_none_on_every_rank(reports: dict[int, Report]) -> None:
    """An oversized carrier is sent as empty data: None on both ranks, a warning on the source."""
    assert reports[0]["oversized"] is None
    assert reports[1]["oversized"] is None
    assert any("over the" in message for message in reports[0]["warnings"])


def test_the_process_group_decides_the_source(reports: dict[int, Report]) -> None:
    """A rank passing the wrong rank number is warned, and still receives rank 0's context."""
    sent, received = reports[0]["mismatch"], reports[1]["mismatch"]
    assert received["carrier"] == sent["carrier"]
    assert received["links"] == [sent["span"]]
    assert any("lens follows the process group" in message for message in reports[1]["warnings"])
    assert not any("process group" in message for message in reports[0]["warnings"])


if __name__ == "__main__":
    run_rank(int(sys.argv[1]), Path(sys.argv[2]))
