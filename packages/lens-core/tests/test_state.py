"""The span-group gate: pinned sets, stored specs, their warnings, and threads."""

from __future__ import annotations

import ast
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_children import python_stdout, run_child
from lens_env import clear_settings
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nemo.lens
from nemo.lens import SpanRegistry, state
from nemo.lens.state import (
    enabled_span_groups,
    get_pp_trace_carrier,
    is_span_group_enabled,
    pending_span_groups,
    refresh_enabled_span_groups,
    set_enabled_span_groups,
    set_pp_trace_carrier,
    set_span_group_spec,
)
from nemo.lens.testing import isolated_telemetry, reset_span_state

LENS_SRC = Path(state.__file__).parent


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


def state_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nemo.lens.state"]


def test_every_group_is_off_before_any_set_call() -> None:
    """A fresh interpreter reports every group, known or not, as disabled."""
    code = (
        "from nemo.lens.state import is_span_group_enabled as on, enabled_span_groups as e;"
        "print(on('job'), on('step'), on('anything'), sorted(e()))"
    )
    assert python_stdout("-c", code).strip() == "False False False []"


def test_gate_lives_in_state_and_is_re_exported() -> None:
    """Gym asserts `__module__`; the root exports the very same objects."""
    assert is_span_group_enabled.__module__ == "nemo.lens.state"
    assert set_enabled_span_groups.__module__ == "nemo.lens.state"
    assert nemo.lens.is_span_group_enabled is is_span_group_enabled
    assert nemo.lens.set_enabled_span_groups is set_enabled_span_groups
    assert nemo.lens.enabled_span_groups is enabled_span_groups
    assert nemo.lens.pending_span_groups is pending_span_groups


def _lens_imports(module_file: Path) -> set[str]:
    tree = ast.parse(module_file.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_state_imports_nothing_from_opentelemetry() -> None:
    """state, and every lens module it imports, import no opentelemetry module at all."""
    to_visit, seen = ["nemo.lens.state"], set()
    while to_visit:
        module = to_visit.pop()
        if module in seen:
            continue
        seen.add(module)
        path = LENS_SRC / (module.removeprefix("nemo.lens.").replace(".", "/") + ".py")
        for imported in _lens_imports(path):
            assert not imported.startswith("opentelemetry"), (module, imported)
            if imported.startswith("nemo.lens.") and imported != "nemo.lens":
                to_visit.append(imported)
    assert {"nemo.lens.state", "nemo.lens.groups", "nemo.lens.errors"} <= seen


def test_pinning_sets_the_gate_and_last_write_wins() -> None:
    """set_enabled_span_groups pins exactly the given names, unvalidated; the last write wins."""
    set_enabled_span_groups(frozenset({"job", "made_up"}))
    assert is_span_group_enabled("job")
    assert is_span_group_enabled("made_up")
    assert not is_span_group_enabled("step")
    set_enabled_span_groups(frozenset({"step"}))
    assert enabled_span_groups() == {"step"}
    assert not is_span_group_enabled("job")
    set_enabled_span_groups(frozenset())
    assert enabled_span_groups() == frozenset()


def test_pinning_accepts_other_iterables_but_not_a_bare_string() -> None:
    """A set or list is frozen; a bare string (iterable of letters) is a TypeError."""
    set_enabled_span_groups({"job", "step"})  # type: ignore[arg-type]
    assert enabled_span_groups() == {"job", "step"}
    assert isinstance(enabled_span_groups(), frozenset)
    with pytest.raises(TypeError, match="got str"):
        set_enabled_span_groups("job")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        set_enabled_span_groups(3)  # type: ignore[arg-type]


def test_unhashable_names_are_simply_disabled() -> None:
    """The gate never raises: an unhashable name names no group."""
    set_enabled_span_groups(frozenset({"job"}))
    assert is_span_group_enabled(["job"]) is False  # type: ignore[arg-type]


def test_pinning_drops_the_stored_spec() -> None:
    """After a pin, registry changes no longer re-resolve the spec stored earlier."""
    SpanRegistry.register("ns", ["x"])
    set_span_group_spec("x,y")
    set_enabled_span_groups(frozenset({"job"}))
    assert pending_span_groups() == frozenset()
    SpanRegistry.register("other", ["y"])
    refresh_enabled_span_groups()
    assert enabled_span_groups() == {"job"}


def test_spec_resolves_against_the_registry() -> None:
    """A stored spec enables registered groups and keeps unknown tokens pending."""
    SpanRegistry.register("nemo_rl", ["rollout", "training"], {"default": ["training"]})
    set_span_group_spec("DEFAULT, rollout, later")
    assert enabled_span_groups() == {"training", "rollout"}
    assert pending_span_groups() == {"later"}
    assert is_span_group_enabled("rollout")
    assert not is_span_group_enabled("later")


def test_typo_warns_naming_it_and_what_is_registered(caplog: pytest.LogCaptureFixture) -> None:
    """RL3 shape: `span_groups="per_stp"` does not raise and the warning names "per_stp"."""
    SpanRegistry.register("nemo_rl", ["rollout", "training"], {"per_step": ["rollout"]})
    SpanRegistry.register("nvrx", ["ckpt"])
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec("per_stp,training,bogus")
    (message,) = state_warnings(caplog)
    assert "'per_stp'" in message
    assert "'bogus'" in message
    assert "['ckpt', 'rollout', 'training']" in message  # groups
    assert "['all', 'per_step']" in message  # presets
    assert "['nemo_rl', 'nvrx']" in message  # namespaces
    assert enabled_span_groups() == {"training"}


CHILD_TIMEOUT_S = 60

# RL3's shape: groups registered at import, the spec from the environment, setup, warnings
# shown; "unregister" then empties the registry, which re-resolves the stored spec.
LENIENT_CHILD = """\
import logging, sys
logging.basicConfig(stream=sys.stdout, format="%(name)s: %(message)s")
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from nemo.lens import NemoLensConfig, SpanRegistry, setup_telemetry
SpanRegistry.register("nemo_rl", ["rollout", "training"])
config = NemoLensConfig.from_env(prefix="NEMO_RL_OTEL", fallback_prefix="NEMO_LENS")
config.enabled = True
if len(sys.argv) > 2:
    config.span_groups = sys.argv[2]
handle = setup_telemetry(
    config, span_exporter=InMemorySpanExporter(), metric_reader=InMemoryMetricReader()
)
if sys.argv[1] == "unregister":
    SpanRegistry.unregister("nemo_rl")
handle.shutdown()
"""


def run_lenient_child(environ: dict[str, str], *args: str) -> str:
    """Run LENIENT_CHILD with only `environ`'s span-group variables; return its stdout."""
    run = run_child(LENIENT_CHILD, environ, CHILD_TIMEOUT_S, *args, also_strip=("NEMO_RL_OTEL_",))
    assert (run.returncode, run.timed_out) == (0, False), run.stderr
    return run.stdout


def test_unknown_token_warning_names_the_environment_variable() -> None:
    """A typo read from `NEMO_RL_OTEL_SPAN_GROUPS` is warned about with that variable named."""
    stdout = run_lenient_child({"NEMO_RL_OTEL_SPAN_GROUPS": "per_stp,training"}, "keep")
    (line,) = stdout.splitlines()
    assert line.startswith("nemo.lens.state: span_groups 'per_stp,training' names unknown")
    assert line.endswith(
        "(span_groups comes from the environment variable "
        "NEMO_RL_OTEL_SPAN_GROUPS='per_stp,training')"
    )


def test_empty_registry_warning_names_the_environment_variable() -> None:
    """Once nothing is registered, the warning names `NEMO_LENS_SPAN_GROUPS`, the one read."""
    stdout = run_lenient_child({"NEMO_LENS_SPAN_GROUPS": "rollout"}, "unregister")
    (line,) = stdout.splitlines()
    assert "no namespace has registered groups" in line
    assert line.endswith(
        "(span_groups comes from the environment variable NEMO_LENS_SPAN_GROUPS='rollout')"
    )


def test_warning_for_a_spec_set_in_code_names_no_variable() -> None:
    """A spec assigned in code over the environment's valid one names no variable."""
    stdout = run_lenient_child({"NEMO_RL_OTEL_SPAN_GROUPS": "training"}, "keep", "trainin")
    (line,) = stdout.splitlines()
    assert "span_groups 'trainin' names unknown span groups or presets ['trainin']" in line
    assert "environment variable" not in line
    assert line.endswith("namespaces: ['nemo_rl']")


def lenient_setup_warnings(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    environ: dict[str, str],
    in_code: str | None = None,
) -> list[str]:
    """Register a namespace, set up from `from_env(MY_OTEL, NEMO_LENS)` (its spec replaced
    by `in_code` when given) and return the state warnings setup's lenient path logged."""
    clear_settings(monkeypatch, also_strip=("MY_OTEL_",))
    for name, value in {"MY_OTEL_ENABLED": "true", **environ}.items():
        monkeypatch.setenv(name, value)
    SpanRegistry.register("nemo_rl", ["rollout", "training"])
    config = nemo.lens.NemoLensConfig.from_env(prefix="MY_OTEL", fallback_prefix="NEMO_LENS")
    if in_code is not None:
        config.span_groups = in_code
    with (
        isolated_telemetry(),
        caplog.at_level(logging.WARNING, logger="nemo.lens.state"),
    ):
        handle = nemo.lens.setup_telemetry(
            config, span_exporter=InMemorySpanExporter(), metric_reader=InMemoryMetricReader()
        )
        handle.shutdown()
    return state_warnings(caplog)


def test_setup_pending_warning_names_the_variable_from_env_read(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Setup's lenient warning names `NEMO_LENS_SPAN_GROUPS`, read under the fallback prefix."""
    (message,) = lenient_setup_warnings(
        monkeypatch, caplog, {"NEMO_LENS_SPAN_GROUPS": "per_stp,training"}
    )
    assert message.startswith("span_groups 'per_stp,training' names unknown")
    assert message.endswith(
        "(span_groups comes from the environment variable NEMO_LENS_SPAN_GROUPS='per_stp,training')"
    )


def test_setup_pending_warning_for_a_spec_set_in_code_ignores_a_variable_listing_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A spec assigned in code names no variable, though some `*_SPAN_GROUPS` lists its token."""
    (message,) = lenient_setup_warnings(
        monkeypatch,
        caplog,
        {"NEMO_LENS_SPAN_GROUPS": "training", "OTHER_JOB_SPAN_GROUPS": "per_stp"},
        in_code="per_stp,training",
    )
    assert "names unknown span groups or presets ['per_stp']" in message
    assert "environment variable" not in message
    assert message.endswith("namespaces: ['nemo_rl']")


def test_same_situation_never_warns_twice(caplog: pytest.LogCaptureFixture) -> None:
    """Re-storing or re-resolving the same bad spec stays quiet after the first warning."""
    SpanRegistry.register("nemo_rl", ["rollout"])
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec("per_stp")
        set_span_group_spec("per_stp")
        refresh_enabled_span_groups()
        SpanRegistry.register("other", ["unrelated"])
    assert len(state_warnings(caplog)) == 1


def test_a_new_situation_warns_again(caplog: pytest.LogCaptureFixture) -> None:
    """A different bad token, or the same one after a pin, is a new situation."""
    SpanRegistry.register("nemo_rl", ["rollout"])
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec("per_stp")
        set_span_group_spec("rollout,typo")
        set_enabled_span_groups(frozenset())
        set_span_group_spec("rollout,typo")
    assert len(state_warnings(caplog)) == 3


@pytest.mark.parametrize("spec", ["rollout", "ALL", "", " , ", "fast,rollout"])
def test_valid_specs_never_warn(caplog: pytest.LogCaptureFixture, spec: str) -> None:
    """A spec whose every token is known, or an empty one, logs nothing."""
    SpanRegistry.register("nemo_rl", ["rollout"], {"fast": ["rollout"]})
    with caplog.at_level(logging.DEBUG, logger="nemo.lens.state"):
        set_span_group_spec(spec)
    assert state_warnings(caplog) == []


def test_empty_registry_warns(caplog: pytest.LogCaptureFixture) -> None:
    """With no namespace registered the spec selects nothing, and says so once."""
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec("rollout")
        refresh_enabled_span_groups()
    (message,) = state_warnings(caplog)
    assert "no namespace has registered" in message
    assert "'rollout'" in message
    assert pending_span_groups() == {"rollout"}


def test_spec_selecting_nothing_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A preset whose members all left selects nothing: one warning."""
    SpanRegistry.register("owner", ["x"])
    SpanRegistry.register("presets", ["y"], {"only_x": ["x"]})
    SpanRegistry.unregister("owner")
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec("only_x")
    (message,) = state_warnings(caplog)
    assert "'only_x' selects no span group" in message
    assert enabled_span_groups() == frozenset()


def test_non_string_spec_warns_and_enables_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """set_span_group_spec never raises: a non-string spec enables nothing, with a warning."""
    SpanRegistry.register("ns", ["x"])
    with caplog.at_level(logging.WARNING, logger="nemo.lens.state"):
        set_span_group_spec(["x"])  # type: ignore[arg-type]
    assert "must be a comma-separated string, got list" in state_warnings(caplog)[0]
    assert enabled_span_groups() == frozenset()


@given(st.text())
def test_set_span_group_spec_never_raises(spec: str) -> None:
    """Any text is accepted; what it enables is always a subset of the registered groups."""
    reset_span_state(clear_registry=True)
    SpanRegistry.register("ns", ["a", "b"], {"p": ["a"]})
    set_span_group_spec(spec)
    assert enabled_span_groups() <= {"a", "b"}
    assert not enabled_span_groups() & pending_span_groups()


def test_refresh_is_a_no_op_while_pinned() -> None:
    """refresh_enabled_span_groups leaves a pinned set exactly as it was."""
    set_enabled_span_groups(frozenset({"job"}))
    pinned = enabled_span_groups()
    SpanRegistry.register("ns", ["x"])
    refresh_enabled_span_groups()
    assert enabled_span_groups() is pinned


def test_pipeline_parallel_carrier_round_trips() -> None:
    """The pipeline-parallel carrier is stored process-wide and cleared with None."""
    assert get_pp_trace_carrier() is None
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    set_pp_trace_carrier(carrier)
    assert get_pp_trace_carrier() is carrier
    set_pp_trace_carrier(None)
    assert get_pp_trace_carrier() is None


def test_readers_see_whole_sets_while_writers_race() -> None:
    """Lock-free readers only ever observe one of the sets writers pinned, never a mix."""
    first, second = frozenset({"job", "step"}), frozenset({"optimizer"})
    stop = threading.Event()
    seen: set[frozenset[str]] = set()
    errors: list[BaseException] = []

    def writer(groups: frozenset[str]) -> None:
        while not stop.is_set():
            set_enabled_span_groups(groups)

    def reader() -> None:
        try:
            for _ in range(20000):
                seen.add(enabled_span_groups())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(g,)) for g in (first, second)]
    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in writers + readers:
        thread.start()
    for thread in readers:
        thread.join(timeout=60)
    stop.set()
    for thread in writers:
        thread.join(timeout=60)
    assert errors == []
    assert seen <= {first, second, frozenset()}
    assert enabled_span_groups() in (first, second)
