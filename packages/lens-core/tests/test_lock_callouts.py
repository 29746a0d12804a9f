"""No lens lock is held while lens calls into the OpenTelemetry SDK or the logging module.

A logging handler may call back into lens (`record_metrics` from a handler that counts
log records is the common case): if lens logged, or let the SDK log, while holding one of
its own non-reentrant locks, that handler would deadlock the step, and every later
`fork()` (which takes the lens locks) would block on the same lock.
"""

from __future__ import annotations

import ast
import logging
import math
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lens_children import child_env, run_python
from lens_meters import FailingCreateMeter

import nemo.lens
from nemo.lens import (
    MetricSpec,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    unregister_metric_group,
)
from nemo.lens.instruments._record import API_HAS_BUCKET_ADVISORY

#: Where the `nemo.lens` these tests imported lives, so a child imports the same tree.
_SOURCE_ROOT = Path(nemo.lens.__file__).resolve().parents[2]

#: How long the child gives the step and the fork before calling them hung.
_STEP_WAIT_S = 10

# The step and the fork run in threads the child waits on with a timeout, so a deadlock
# shows as "hung" lines instead of a killed child; os._exit leaves hung threads behind.
_HANDLER_RECORDS_PROGRAM = textwrap.dedent(
    f"""
    import logging, os, threading, time
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from nemo.lens import MetricSpec, record_metrics, register_metric_group

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    meter = provider.get_meter("callouts")
    register_metric_group("first", [MetricSpec("t", "step.time", "histogram", buckets=(1, 2))])
    register_metric_group("second", [MetricSpec("t", "step.time", "histogram", buckets=(5, 9))])
    register_metric_group("logs", [MetricSpec("n", "log.records", "counter")])

    class CountingHandler(logging.Handler):
        def emit(self, record):
            record_metrics(meter, "logs", n=1)

    logging.getLogger("opentelemetry").addHandler(CountingHandler())

    def step():
        record_metrics(meter, "first", t=1.5)
        # The SDK warns that step.time exists with other buckets, inside create_histogram.
        record_metrics(meter, "second", t=1.5)

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    for name, action in (("step", step), ("fork", fork)):
        thread = threading.Thread(target=action, daemon=True)
        thread.start()
        thread.join({_STEP_WAIT_S})
        print(name, "hung" if thread.is_alive() else "done", flush=True)
    os._exit(0)
    """
)


@pytest.mark.skipif(
    not API_HAS_BUCKET_ADVISORY, reason="the bucket conflict needs the API's advisory buckets"
)
def test_handler_that_records_during_instrument_creation_does_not_deadlock() -> None:
    """An SDK warning inside lens's instrument creation, whose handler records, lets the step
    and a later fork complete."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    result = run_python(
        "-c", _HANDLER_RECORDS_PROGRAM, env=child_env(python_path=[_SOURCE_ROOT]), timeout_s=60
    )
    assert result.stdout.split("\n")[:2] == ["step done", "fork done"], result.stderr


# --- the walk: every lens lock, and what runs while it is held --------------------------

_PACKAGE = _SOURCE_ROOT / "nemo" / "lens"
_LOCK_TYPES = frozenset({"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"})


def _lock_constructions() -> set[tuple[str, str]]:
    """(module path under nemo/lens, the name it is bound to) of every `threading` lock
    lens constructs: the assignment's target, else the enclosing function's name."""
    found: set[tuple[str, str]] = set()
    for path in sorted(_PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Attribute)
                and node.attr in _LOCK_TYPES
                and isinstance(node.value, ast.Name)
                and node.value.id == "threading"
                and not isinstance(parents.get(node), ast.Attribute)
            ) or _in_annotation(node, parents):
                continue
            found.add((path.relative_to(_PACKAGE).as_posix(), _bound_name(node, parents)))
    return found


def _in_annotation(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        parent = parents[node]
        if isinstance(parent, (ast.AnnAssign, ast.arg)) and node is parent.annotation:
            return True
        if isinstance(parent, ast.FunctionDef) and node is parent.returns:
            return True
        if isinstance(parent, ast.Subscript):  # a type argument, e.g. dict[..., Lock]
            return True
        node = parent
    return False


def _bound_name(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
        for target in targets:
            if isinstance(target, ast.Name):
                return target.id
            if isinstance(target, ast.Attribute):
                return target.attr
    return "<module>"


# The finders read loaded modules only: one called from inside an import must not import.
def _loaded(module: str) -> Any:
    return sys.modules.get(f"nemo.lens.{module}")


def _int64_sum_locks() -> list[object]:
    _record, _registry = _loaded("instruments._record"), _loaded("instruments._registry")
    if _record is None or _registry is None:
        return []
    return [
        entry[1]._lock
        for group in _registry.GROUPS.values()
        for cache in group.meters.values()
        for entry in cache.emitters.values()
        if isinstance(entry[1], _record._Int64Sum)
    ]


def _buffer_locks() -> list[object]:
    _coalesce = _loaded("instruments._coalesce")
    if _coalesce is None:
        return []
    buffers = [reference() for reference in list(_coalesce._buffers.values())]
    return [buffer._lock for buffer in buffers if buffer is not None]


def _shard_locks() -> list[object]:
    _coalesce = _loaded("instruments._coalesce")
    if _coalesce is None:
        return []
    buffers = [reference() for reference in list(_coalesce._buffers.values())]
    return [shard.lock for buffer in buffers if buffer is not None for shard in buffer._shards]


def _int64_guard_locks() -> list[object]:
    _coalesce = _loaded("instruments._coalesce")
    if _coalesce is None:
        return []
    buffers = [reference() for reference in list(_coalesce._buffers.values())]
    return [
        pending.int64_lock
        for buffer in buffers
        if buffer is not None
        for pending in list(buffer._pending.values())
    ]


def _span_queue_locks() -> list[object]:
    _span_queue = _loaded("_sdk._span_queue")
    live = getattr(_span_queue, "_live_gates", ())  # also absent while it is imported
    return [gate._lock for gate in list(live)]


def _module_lock(module: str, *attributes: str) -> Callable[[], list[object]]:
    def locks() -> list[object]:
        owner: object = _loaded(module)
        for attribute in attributes:
            owner = getattr(owner, attribute, None)
        return [] if owner is None else [owner]

    return locks


#: Each lock lens constructs -> how to find the instances the walk drives, or, for a
#: lock that is not walked, why: the walk fails if a lock is missing from this table.
_WALKED: dict[tuple[str, str], Callable[[], list[object]]] = {
    ("instruments/_registry.py", "lock"): _module_lock("instruments._registry", "lock"),
    ("groups.py", "_lock"): _module_lock("groups", "SpanRegistry", "_lock"),
    ("state.py", "_lock"): _module_lock("state", "_lock"),
    ("strategies.py", "_lock"): _module_lock("strategies", "_lock"),
    ("instruments/_record.py", "_lock"): _int64_sum_locks,
    ("instruments/_coalesce.py", "_lock"): _buffer_locks,
    ("instruments/_shard.py", "lock"): _shard_locks,
    ("instruments/_coalesce.py", "int64_lock"): _int64_guard_locks,
    ("_log_filters.py", "_lock"): _module_lock("_log_filters", "_lock"),
    ("resources.py", "_lock"): _module_lock("resources", "_gpu_count_memory", "_lock"),
    ("_sdk/_span_queue.py", "_lock"): _span_queue_locks,
    ("_forked_children.py", "_lock"): _module_lock("_forked_children", "_lock"),
    ("_shared_region.py", "_lock"): _module_lock("_forked_children", "_writer", "_lock"),
}
_NOT_WALKED: dict[tuple[str, str], str] = {
    ("instruments/_coalesce.py", "_flush_lock"): (
        "orders flushes: held while a flush hands values to the SDK (by design, so a "
        "collection starts only once earlier values reached it); record_metrics never "
        "takes it and nothing is logged under it"
    ),
    ("_sdk/_fork.py", "_gate"): (
        "the collection gate: held around each SDK collection by design (a fork must not "
        "split one); re-entrant, and fork() waits for it at most FORK_GATE_TIMEOUT_S"
    ),
    ("handle.py", "_setup_lock"): (
        "held across setup_telemetry, which builds the SDK pipeline; re-entrant, and a "
        "shutdown waits for it at most _GUARD_RELEASE_WAIT_S"
    ),
    ("propagation.py", "_import_lock"): (
        "held across the one import of opentelemetry.propagate (OTEL_PROPAGATORS is "
        "swapped for it); recording never takes it"
    ),
    ("contrib/aiohttp.py", "_instrument_lock"): "held while the instrumentor instruments",
    ("contrib/fastapi.py", "_instrument_lock"): "held while the instrumentor instruments",
    ("_sdk/_value_limits.py", "_lock"): "guards one counter; nothing is called under it",
    ("_sdk/_prometheus.py", "_serving_lock"): "another module's owner reviews it",
    ("_sdk/_console.py", "_lock"): "another module's owner reviews it",
    ("_sdk/_console.py", "_process_lock"): "another module's owner reviews it",
    ("_shutdown.py", "claim"): "another module's owner reviews it",
    ("_forked_children.py", "_drain_lock"): (
        "orders drains of children's span records: held while they are handed to the "
        "batch span processor (by design, so a flush sees every record taken before it); "
        "re-entrant, never taken by recording, and replaced in a forked child"
    ),
    ("_sdk/_children_metrics.py", "_lock"): (
        "one merge of a reader's collection at a time: held while the children's totals "
        "are read (taking _forked_children's lock, a leaf) and the collected points are "
        "rebuilt with them (SDK data classes only); its warnings are logged after it is "
        "released"
    ),
    ("_fork_hooks.py", "hold_lock"): "not a lock: the default factory of a child's lock",
}


def test_lock_table_names_every_lock_lens_constructs() -> None:
    """Every threading lock constructed under nemo/lens is either walked or excused."""
    assert _lock_constructions() == _WALKED.keys() | _NOT_WALKED.keys()


def _held_here(lock: Any) -> bool:
    """True when the calling thread holds `lock` (the walk is single-threaded)."""
    is_owned = getattr(lock, "_is_owned", None)
    return bool(is_owned()) if is_owned is not None else bool(lock.locked())


class _CalloutProbe(logging.Handler):
    """Notes every walked lock held when lens logs or calls one of the patched SDK methods."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.violations: list[str] = []
        self.callouts = 0

    def check(self, where: str) -> None:
        self.callouts += 1
        for (module, name), locks in _WALKED.items():
            if any(_held_here(lock) for lock in locks()):
                self.violations.append(f"{module}:{name} held at {where}")

    def emit(self, record: logging.LogRecord) -> None:
        self.check(f"log record {record.getMessage()[:70]!r}")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[_CalloutProbe]:
    """A probe on the root logger (lens's and OpenTelemetry's loggers at DEBUG) and on the
    SDK's instrument creation and recording methods."""
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics._internal import Meter as SdkMeter
    from opentelemetry.sdk.metrics._internal import instrument as sdk_instruments

    found = _CalloutProbe()
    patched: list[tuple[type, str]] = [
        (SdkMeter, name) for name in dir(SdkMeter) if name.startswith("create_")
    ]
    patched += [
        (getattr(sdk_instruments, kind), method)
        for kind, method in (
            ("_Counter", "add"),
            ("_UpDownCounter", "add"),
            ("_Histogram", "record"),
            ("_Gauge", "set"),
        )
        if hasattr(sdk_instruments, kind)
    ]
    patched.append((logging.Logger, "addFilter"))
    for owner, name in patched:
        monkeypatch.setattr(owner, name, _checked(found, owner, name))
    for logger_name in ("nemo.lens", "opentelemetry"):
        monkeypatch.setattr(logging.getLogger(logger_name), "level", logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(found)
    try:
        yield found
    finally:
        root.removeHandler(found)


def _checked(probe: _CalloutProbe, owner: type, name: str) -> Callable[..., Any]:
    original = getattr(owner, name)

    def checked(*args: Any, **kwargs: Any) -> Any:
        probe.check(f"{owner.__name__}.{name}")
        return original(*args, **kwargs)

    return checked


def test_probe_notices_a_lock_held_while_logging(probe: _CalloutProbe) -> None:
    """The walk's probe reports a walked lock that is held while lens logs (it can fail)."""
    from nemo.lens.instruments import _registry

    with _registry.lock:
        logging.getLogger("nemo.lens.test").warning("under the registry lock")
    assert probe.violations == [
        "instruments/_registry.py:lock held at log record 'under the registry lock'"
    ]


def test_no_walked_lock_is_held_while_lens_calls_the_sdk_or_logs(
    probe: _CalloutProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registration, recording (direct, coalesced, limited), flushes, span groups, strategies,
    propagation, GPU detection and span queues call out to the SDK and logging only with
    every walked lock released."""
    _walk_metrics()
    _walk_span_groups(monkeypatch)
    _walk_strategies_and_propagation(monkeypatch)
    _walk_resources_and_queues(monkeypatch)
    assert probe.violations == []
    assert probe.callouts > 20  # the walk did reach the SDK and the logging module


def _walk_metrics() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from nemo.lens import _otel_internals
    from nemo.lens.instruments import _cardinality, _coalesce

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    try:
        meter = provider.get_meter("walk")
        # The buffer lens's pipeline gives its provider, so gauges and sums coalesce.
        buffer = _coalesce.CoalescingBuffer(single_reader=True)
        _coalesce.register(_otel_internals.meter_consumer(meter), buffer, type(meter))
        register_metric_group(
            "walk",
            [
                MetricSpec("g", "walk.gauge", "gauge"),
                MetricSpec("c", "walk.count", "counter"),
                MetricSpec("h", "walk.time", "histogram", buckets=(1, 2)),
            ],
        )
        register_metric_group("other", [MetricSpec("h", "walk.time", "histogram", buckets=(5, 9))])
        record_metrics(meter, "walk", g=1.0, c=2**62, h=1.5)
        record_metrics(meter, "walk", c=2**62)  # the int64 guard warns
        record_metrics(meter, "walk", g=math.nan, unknown=1)  # lens warns
        record_metrics(meter, "other", h=1.0)  # the SDK warns: other buckets (API >= 1.30)
        record_metrics(meter, "missing", x=1)
        record_metrics(FailingCreateMeter(meter, "create_gauge"), "walk", g=1.0)
        _cardinality.set_limit(1)
        for step in range(3):
            record_metrics(meter, "walk", attributes={"step": step}, g=1.0, h=1.0)
        buffer.flush()
        reader.get_metrics_data()
        registered_metric_groups()
        with pytest.raises(ValueError):
            unregister_metric_group("missing")
    finally:
        _cardinality.set_limit(0)
        provider.shutdown()


def _walk_span_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    from nemo.lens import state
    from nemo.lens.groups import SpanRegistry
    from nemo.lens.testing import reset_span_state

    monkeypatch.setattr(state._warnings, "_cap", 1)
    try:
        state.set_span_group_spec("walk_unknown")  # warns: nothing is registered
        state.set_span_group_spec("walk_other")  # the warning memory's cap line
        state._warnings.clear()
        SpanRegistry.register("walk", ["alpha"], {"both": ["alpha"]})
        state.set_span_group_spec("alpha,nope")
        SpanRegistry.unregister("walk")
        with pytest.raises(ValueError):
            SpanRegistry.unregister("walk")
    finally:
        reset_span_state(clear_registry=True)


def _walk_strategies_and_propagation(monkeypatch: pytest.MonkeyPatch) -> None:
    from nemo.lens import propagation
    from nemo.lens.strategies import (
        register_export_strategy,
        registered_strategies,
        unregister_export_strategy,
    )

    register_export_strategy("walk", lambda config, rank, world_size: True)
    registered_strategies()
    unregister_export_strategy("walk")
    from nemo.lens import _log_filters

    monkeypatch.setattr(_log_filters, "_installed", set())
    propagation._bound_baggage_warnings()


def _walk_resources_and_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    from nemo.lens import resources
    from nemo.lens._process import BuiltHere
    from nemo.lens._sdk._span_queue import QueueGate

    failing = (sys.executable, "-c", "raise SystemExit(3)")
    monkeypatch.setattr(resources, "_NVIDIA_SMI_COMMAND", failing)
    resources._gpu_count_memory.forget()
    try:
        resources._gpu_count_memory.get()  # logs at DEBUG that nvidia-smi exited with 3
    finally:
        resources._gpu_count_memory.forget()
    provider = MeterProvider(shutdown_on_exit=False)
    try:
        gate = QueueGate(0, BuiltHere())
        gate.count_drops_on(provider, "walk")
        gate.admit()  # refused: the drop counter's add
        gate.report()  # the drop warning
    finally:
        provider.shutdown()
