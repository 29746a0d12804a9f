"""The documented span idioms (typed_examples/span_idioms.py) run, and type-check strictly."""

from __future__ import annotations

import importlib.util
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from lens_children import run_child, run_python
from lens_integrations import require
from lens_spans import one

from nemo.lens import set_enabled_span_groups
from nemo.lens.testing import InMemorySpans, in_memory_spans, reset_otel_globals, reset_span_state

pytest.importorskip("opentelemetry.sdk.trace")

TYPED_EXAMPLES = Path(__file__).parent / "typed_examples"
EXAMPLES = TYPED_EXAMPLES / "span_idioms.py"
OPTIONAL_LENS = TYPED_EXAMPLES / "optional_lens.py"
MYPY_TIMEOUT_S = 300
CHILD_TIMEOUT_S = 60


def load_examples(path: Path = EXAMPLES) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"lens_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def idioms() -> ModuleType:
    return load_examples()


@pytest.fixture
def spans() -> Iterator[InMemorySpans]:
    """A real in-memory pipeline installed globally: the idioms use lens's default tracers."""
    reset_span_state(clear_registry=True)
    pipeline = in_memory_spans(install=True)
    yield pipeline
    reset_otel_globals()
    reset_span_state(clear_registry=True)


def test_training_loop_idiom_records_job_step_and_traced_spans(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`**{"dl.iteration": it}` reaches the step span as a dotted attribute, under the job."""
    set_enabled_span_groups(frozenset({"step", "optimizer"}))
    assert idioms.train(2) == [0.5, 0.5]
    assert spans.names() == [
        "optimizer.step",
        "train_step",
        "optimizer.step",
        "train_step",
        "job",
    ]
    job = one(spans, "job")
    steps = [span for span in spans.finished() if span.name == "train_step"]
    assert [dict(step.attributes or {}) for step in steps] == [
        {"dl.iteration": 0, "dl.num_microbatches": 4},
        {"dl.iteration": 1, "dl.num_microbatches": 4},
    ]
    assert all(step.parent is not None for step in steps)
    assert {step.parent.span_id for step in steps if step.parent} == {job.context.span_id}
    assert dict(job.attributes or {}) == {"num_nodes": 8}


def test_training_loop_idiom_with_groups_off_records_only_the_job(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """With every group off the loop still runs; only the ungated `span_cm` is recorded."""
    set_enabled_span_groups(frozenset())
    assert idioms.train(3) == [0.5, 0.5, 0.5]
    assert spans.names() == ["job"]


def test_goodput_idiom_carries_the_bool_and_the_dotted_attribute(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`is_goodput_span=True` beside `**{"megatron.iteration": it}`: both set, None when off."""
    set_enabled_span_groups(frozenset({"step"}))
    assert idioms.megatron_iteration(7) is True
    assert dict(one(spans, "iteration").attributes or {}) == {
        "is_goodput_span": True,
        "megatron.iteration": 7,
    }
    set_enabled_span_groups(frozenset())
    assert idioms.megatron_iteration(8) is False


def test_tracer_keyword_idiom_uses_the_given_tracer(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`tracer=t, **{"rl.backend": ...}`: the span is on `t`'s scope with the attributes."""
    set_enabled_span_groups(frozenset({"rollout"}))
    own = in_memory_spans()
    try:
        tracer = own.provider.get_tracer("nemo_rl.rollout")
        assert idioms.rollout(tracer, "vllm", ["a", "b"]) == 2
        span = one(own, "generate")
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "nemo_rl.rollout"
        assert dict(span.attributes or {}) == {"rl.backend": "vllm", "rl.num_rollouts": 2}
        assert spans.names() == []
    finally:
        own.shutdown()


def test_span_cm_idioms_nest_and_keep_num_microbatches(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`span_cm(name, tracer=t, num_microbatches=n)` parents `span_cm(name, num_microbatches=4)`."""
    trace_id = idioms.forward_backward(spans.tracer, "fwd_bwd", 2)
    outer, inner = one(spans, "fwd_bwd"), one(spans, "fwd_bwd.inner")
    assert f"{outer.context.trace_id:032x}" == trace_id
    assert dict(outer.attributes or {}) == {"num_microbatches": 2}
    assert dict(inner.attributes or {}) == {"num_microbatches": 4, "dl.inner": True}
    assert inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id


def test_mapping_idiom_passes_every_attribute(idioms: ModuleType, spans: InMemorySpans) -> None:
    """`**attributes` from a Mapping, beside `tracer=` and `record_exception=`, sets them all."""
    idioms.checkpoint(spans.tracer, {"checkpoint.path": "/ckpt/1", "checkpoint.step": 100})
    assert dict(one(spans, "checkpoint.save").attributes or {}) == {
        "checkpoint.path": "/ckpt/1",
        "checkpoint.step": 100,
    }
    assert dict(one(spans, "checkpoint.verify").attributes or {}) == {"checkpoint.shards": 8}


def test_linked_span_idiom_sets_the_dotted_attribute(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`create_linked_span(t, n, remote_carrier=c, **{"pp.stage": s})` and the no-tracer form."""
    second = idioms.next_stage(spans.tracer, 3)
    second.end()
    first, default = one(spans, "pp.stage"), one(spans, "pp.stage.default_tracer")
    assert dict(first.attributes or {}) == {"pp.stage": 3}
    assert dict(default.attributes or {}) == {"pp.stage": 3}
    assert default.instrumentation_scope is not None
    assert default.instrumentation_scope.name == "nemo.lens.distributed"


def test_current_span_idiom_annotates_the_current_span(
    idioms: ModuleType, spans: InMemorySpans
) -> None:
    """`safe_set_span_attributes(trace.get_current_span(), {...})` inside a span sets them."""
    with spans.tracer.start_as_current_span("outer"):
        idioms.current_span_attributes(5)
    assert dict(one(spans, "outer").attributes or {}) == {"dl.iteration": 5, "dl.ok": True}


def test_fallbacks_pattern_with_lens_records_the_spans(spans: InMemorySpans) -> None:
    """optional_lens.py, lens importable: the real primitives run and record."""
    set_enabled_span_groups(frozenset({"step", "optimizer"}))
    module = load_examples(OPTIONAL_LENS)
    assert module.LENS is True
    assert module.step(3) == (True, 0.5)
    assert spans.names() == ["optimizer.step", "train_step", "job"]
    assert dict(one(spans, "train_step").attributes or {}) == {"dl.iteration": 3, "dl.loss": 0.5}


# `nemo.lens.helpers` made unimportable: the example takes its `except ImportError` branch.
WITHOUT_HELPERS_CHILD = """\
import importlib.util, sys
sys.modules["nemo.lens.helpers"] = None
spec = importlib.util.spec_from_file_location("optional_lens", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(module.LENS, module.step(3), module.managed_span.__module__)
"""


def test_fallbacks_pattern_without_lens_runs_on_the_no_op_twins() -> None:
    """optional_lens.py, `nemo.lens.helpers` unimportable: the fallbacks run the same code."""
    run = run_child(WITHOUT_HELPERS_CHILD, {}, CHILD_TIMEOUT_S, str(OPTIONAL_LENS))
    assert (run.returncode, run.timed_out) == (0, False), run.stderr
    assert run.stdout.strip() == "False (False, 0.5) nemo.lens.fallbacks"


WRONG_CALLS = """\
from opentelemetry import trace
from nemo.lens import managed_span, span_cm
from nemo.lens.distributed import create_linked_span

managed_span("step", "n", 5)
span_cm("n", trace.get_tracer("x"), "yes")
create_linked_span(trace.get_tracer("x"), "n", 5)
managed_span(1, "n", **{"dl.iteration": 1})
"""


def test_mypy_strict_accepts_the_idioms_and_still_checks_positional_arguments(
    tmp_path: Path,
) -> None:
    """mypy --strict passes both example files, and still rejects a wrong positional argument."""
    require("mypy")
    wrong = tmp_path / "wrong_calls.py"
    wrong.write_text(textwrap.dedent(WRONG_CALLS))
    root = Path(__file__).resolve().parents[3]
    command = [
        "-m",
        "mypy",
        "--config-file",
        str(root / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--no-error-summary",
    ]
    good = run_python(
        *command, str(EXAMPLES), str(OPTIONAL_LENS), cwd=root, timeout_s=MYPY_TIMEOUT_S
    )
    assert (good.returncode, good.stdout) == (0, "")
    bad = run_python(*command, str(wrong), cwd=root, timeout_s=MYPY_TIMEOUT_S)
    flagged = sorted(
        {int(line.split(":")[1]) for line in bad.stdout.splitlines() if ": error:" in line}
    )
    assert bad.returncode == 1
    assert flagged == [5, 6, 7, 8]
