"""SpanGroup (strict, subclassable), SpanRegistry (namespaced, lenient) and the resolver rule."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lens_children import python_stdout, run_child
from lens_env import clear_settings

from nemo.lens import (
    NemoLensConfig,
    SpanGroup,
    SpanRegistry,
    set_enabled_span_groups,
    setup_telemetry,
)
from nemo.lens.groups import _strict_resolver_for
from nemo.lens.state import enabled_span_groups, pending_span_groups, set_span_group_spec
from nemo.lens.testing import isolated_telemetry, reset_span_state

BASE = {
    "job",
    "checkpoint",
    "evaluate",
    "model_init",
    "load_checkpoint",
    "step",
    "forward_backward",
    "optimizer",
}


@pytest.fixture(autouse=True)
def _fresh_span_state() -> Iterator[None]:
    reset_span_state(clear_registry=True)
    yield
    reset_span_state(clear_registry=True)


class MegatronSpanGroup(SpanGroup):
    """A consumer subclass shaped like Megatron-LM's."""

    ITERATION = "iteration"
    ALL_GROUPS: ClassVar[frozenset[str]] = frozenset({"job", "iteration", "checkpoint"})
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {
        "default": frozenset({"job"}),
        "all": ALL_GROUPS,
    }


class GymSpanGroup(SpanGroup):
    """A consumer subclass shaped like NeMo-Gym's: the base table plus its own groups."""

    ROLLOUT = "rollout"
    ALL_GROUPS: ClassVar[frozenset[str]] = SpanGroup.ALL_GROUPS | {"rollout", "verify"}
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {**SpanGroup._PRESETS, "all": ALL_GROUPS}


def fs(*names: str) -> frozenset[str]:
    return frozenset(names)


# --- SpanGroup ---------------------------------------------------------------------------


def test_base_group_constants_and_all_groups() -> None:
    """The eight base constants carry their names and ALL_GROUPS is exactly them."""
    assert (
        SpanGroup.JOB,
        SpanGroup.CHECKPOINT,
        SpanGroup.EVALUATE,
        SpanGroup.MODEL_INIT,
        SpanGroup.LOAD_CHECKPOINT,
        SpanGroup.STEP,
        SpanGroup.FORWARD_BACKWARD,
        SpanGroup.OPTIMIZER,
    ) == (
        "job",
        "checkpoint",
        "evaluate",
        "model_init",
        "load_checkpoint",
        "step",
        "forward_backward",
        "optimizer",
    )
    assert SpanGroup.ALL_GROUPS == BASE
    assert isinstance(SpanGroup.ALL_GROUPS, frozenset)


def test_presets() -> None:
    """default is job/checkpoint/evaluate; per_step and all are every base group."""
    expected = {
        "default": frozenset({"job", "checkpoint", "evaluate"}),
        "per_step": frozenset(BASE),
        "all": SpanGroup.ALL_GROUPS,
    }
    assert expected == SpanGroup._PRESETS


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", set()),
        (" , ,", set()),
        ("default", {"job", "checkpoint", "evaluate"}),
        (" STEP , Optimizer ", {"step", "optimizer"}),
        ("default,step", {"job", "checkpoint", "evaluate", "step"}),
        ("all", BASE),
        ("per_step,job", BASE),
    ],
)
def test_resolve_strips_lowercases_and_unions(spec: str, expected: set[str]) -> None:
    """Parts are stripped and lower-cased, empty parts skipped, presets expanded."""
    assert SpanGroup.resolve(spec) == expected
    assert isinstance(SpanGroup.resolve(spec), frozenset)


def test_resolve_names_the_unknown_part_and_lists_valid_options() -> None:
    """A typo raises ValueError naming it and listing every group and preset, sorted."""
    with pytest.raises(ValueError) as info:
        SpanGroup.resolve("default, Per_Stp")
    valid = sorted(BASE | {"default", "per_step", "all"})
    assert str(info.value) == f"Unknown span group or preset: 'per_stp'. Valid options: {valid}"


CHILD_TIMEOUT_S = 60

# A consumer's config from the environment, then setup: the strict error reaches stdout.
STRICT_SETUP_CHILD = """\
from nemo.lens import NemoLensConfig, SpanGroup, setup_telemetry
config = NemoLensConfig.from_env(prefix="NEMO_RL_OTEL", fallback_prefix="NEMO_LENS",
                                 span_group_cls=SpanGroup)
try:
    setup_telemetry(config)
except ValueError as exc:
    print(exc)
"""


# The prefixes these tests read settings under, besides lens's own; cleared from the start.
CONSUMER_PREFIXES = ("NEMO_RL_OTEL_", "MY_OTEL_")


def test_strict_error_names_the_environment_variable_the_spec_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """from_env + setup: the unknown-part error names `NEMO_RL_OTEL_SPAN_GROUPS` and its value."""
    clear_settings(monkeypatch, also_strip=CONSUMER_PREFIXES)
    run = run_child(
        STRICT_SETUP_CHILD,
        {"NEMO_RL_OTEL_ENABLED": "true", "NEMO_RL_OTEL_SPAN_GROUPS": "default, Per_Stp"},
        CHILD_TIMEOUT_S,
    )
    assert (run.returncode, run.timed_out) == (0, False), run.stderr
    valid = sorted(BASE | {"default", "per_step", "all"})
    assert run.stdout.strip() == (
        f"Unknown span group or preset: 'per_stp'. Valid options: {valid} (span_groups comes "
        "from the environment variable NEMO_RL_OTEL_SPAN_GROUPS='default, Per_Stp')"
    )


def test_strict_error_names_the_fallback_prefix_variable_when_that_one_was_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With only `NEMO_LENS_SPAN_GROUPS` set, the error names that variable."""
    clear_settings(monkeypatch, also_strip=CONSUMER_PREFIXES)
    run = run_child(
        STRICT_SETUP_CHILD,
        {"NEMO_RL_OTEL_ENABLED": "true", "NEMO_LENS_SPAN_GROUPS": "stepp"},
        CHILD_TIMEOUT_S,
    )
    assert (run.returncode, run.timed_out) == (0, False), run.stderr
    assert "'stepp'" in run.stdout
    assert "environment variable NEMO_LENS_SPAN_GROUPS='stepp')" in run.stdout
    assert "NEMO_RL_OTEL_SPAN_GROUPS" not in run.stdout


def test_strict_error_for_a_spec_set_in_code_names_no_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec assigned in code (an unrelated variable set) keeps the plain message."""
    clear_settings(monkeypatch, also_strip=CONSUMER_PREFIXES)
    program = STRICT_SETUP_CHILD.replace("try:", 'config.span_groups = "optimiser"\ntry:', 1)
    run = run_child(
        program,
        {"NEMO_RL_OTEL_ENABLED": "true", "NEMO_RL_OTEL_SPAN_GROUPS": "default"},
        CHILD_TIMEOUT_S,
    )
    assert (run.returncode, run.timed_out) == (0, False), run.stderr
    valid = sorted(BASE | {"default", "per_step", "all"})
    assert run.stdout.strip() == (
        f"Unknown span group or preset: 'optimiser'. Valid options: {valid}"
    )


def test_strict_error_names_the_variable_from_env_read_under_the_fallback_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Setup's strict error names `NEMO_LENS_SPAN_GROUPS`, the variable from_env read."""
    clear_settings(monkeypatch, also_strip=CONSUMER_PREFIXES)
    monkeypatch.setenv("MY_OTEL_ENABLED", "true")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "per_stp")
    config = NemoLensConfig.from_env(prefix="MY_OTEL", fallback_prefix="NEMO_LENS")
    with isolated_telemetry(), pytest.raises(ValueError) as info:
        setup_telemetry(config)
    valid = sorted(BASE | {"default", "per_step", "all"})
    assert str(info.value) == (
        f"Unknown span group or preset: 'per_stp'. Valid options: {valid} (span_groups comes "
        "from the environment variable NEMO_LENS_SPAN_GROUPS='per_stp')"
    )


def test_strict_error_for_a_spec_set_in_code_ignores_a_variable_listing_the_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spec assigned in code names no variable, though some `*_SPAN_GROUPS` lists its token."""
    clear_settings(monkeypatch, also_strip=CONSUMER_PREFIXES)
    monkeypatch.setenv("MY_OTEL_ENABLED", "true")
    monkeypatch.setenv("NEMO_LENS_SPAN_GROUPS", "default")
    monkeypatch.setenv("OTHER_JOB_SPAN_GROUPS", "per_stp")  # read by nobody here
    config = NemoLensConfig.from_env(prefix="MY_OTEL", fallback_prefix="NEMO_LENS")
    config.span_groups = "per_stp"
    with isolated_telemetry(), pytest.raises(ValueError) as info:
        setup_telemetry(config)
    valid = sorted(BASE | {"default", "per_step", "all"})
    assert str(info.value) == f"Unknown span group or preset: 'per_stp'. Valid options: {valid}"
    with pytest.raises(ValueError) as direct:
        SpanGroup.resolve("per_stp")  # called directly, the spec has no origin either
    assert str(direct.value) == str(info.value)


def test_resolve_refuses_a_non_string_spec() -> None:
    """A spec that is not a string is a TypeError naming the type."""
    with pytest.raises(TypeError, match=r"must be a comma-separated string.*list"):
        SpanGroup.resolve(["job"])  # type: ignore[arg-type]


def test_subclass_tables_replace_the_base_ones() -> None:
    """A subclass resolves against its own tables only; nothing is merged from the base."""
    assert MegatronSpanGroup._PRESETS is not SpanGroup._PRESETS
    assert MegatronSpanGroup.resolve("all") == MegatronSpanGroup.ALL_GROUPS
    assert MegatronSpanGroup.resolve("default,iteration") == {"job", "iteration"}
    with pytest.raises(ValueError, match=r"'optimizer'\. Valid options: "):
        MegatronSpanGroup.resolve("optimizer")
    with pytest.raises(ValueError, match="'iteration'"):
        SpanGroup.resolve("iteration")


class TrainerSpanGroup(SpanGroup):
    """A subclass written the public way: its groups plus the extra_presets() hook."""

    ROLLOUT = "rollout"
    ALL_GROUPS: ClassVar[frozenset[str]] = SpanGroup.ALL_GROUPS | {ROLLOUT}

    @classmethod
    def extra_presets(cls) -> Mapping[str, Iterable[str]]:
        return {"rollouts": {cls.ROLLOUT}, "Default": ["job", cls.ROLLOUT]}


def test_extra_presets_add_to_and_override_the_parent_presets() -> None:
    """extra_presets() adds `rollouts`, replaces `default`, keeps `per_step`; `all` is the
    subclass's ALL_GROUPS."""
    assert TrainerSpanGroup.presets() == {
        "default": frozenset({"job", "rollout"}),
        "per_step": frozenset(BASE),
        "rollouts": frozenset({"rollout"}),
        "all": BASE | {"rollout"},
    }
    assert TrainerSpanGroup.resolve("all") == TrainerSpanGroup.ALL_GROUPS
    assert TrainerSpanGroup.resolve("rollouts, step") == {"rollout", "step"}
    assert SpanGroup.presets() == {
        "default": frozenset({"job", "checkpoint", "evaluate"}),
        "per_step": frozenset(BASE),
        "all": frozenset(BASE),
    }


def test_a_subclass_of_a_subclass_inherits_its_extra_presets() -> None:
    """A grandchild starts from its parent's table, with `all` as its own ALL_GROUPS."""

    class EvalSpanGroup(TrainerSpanGroup):
        JUDGE = "judge"
        ALL_GROUPS: ClassVar[frozenset[str]] = TrainerSpanGroup.ALL_GROUPS | {JUDGE}

        @classmethod
        def extra_presets(cls) -> Mapping[str, Iterable[str]]:
            return {"judging": [cls.JUDGE]}

    assert EvalSpanGroup.resolve("rollouts,judging") == {"rollout", "judge"}
    assert EvalSpanGroup.resolve("all") == BASE | {"rollout", "judge"}
    assert EvalSpanGroup.resolve("default") == {"job", "rollout"}
    assert "judging" not in TrainerSpanGroup.presets()


def test_a_subclass_declaring_only_its_groups_gets_all_as_its_groups() -> None:
    """Without a preset table of its own, `all` still means the subclass's ALL_GROUPS."""

    class WiderSpanGroup(SpanGroup):
        ALL_GROUPS: ClassVar[frozenset[str]] = SpanGroup.ALL_GROUPS | {"verify"}

    assert WiderSpanGroup.resolve("all") == BASE | {"verify"}
    assert WiderSpanGroup._PRESETS is not SpanGroup._PRESETS
    assert SpanGroup.resolve("all") == BASE


def test_the_older_contract_keeps_the_table_as_written() -> None:
    """A subclass that sets `_PRESETS` keeps that very dict, nothing merged or checked."""
    assert GymSpanGroup._PRESETS == {**SpanGroup._PRESETS, "all": GymSpanGroup.ALL_GROUPS}
    assert MegatronSpanGroup.presets() == {
        "default": frozenset({"job"}),
        "all": MegatronSpanGroup.ALL_GROUPS,
    }
    assert "per_step" not in MegatronSpanGroup.presets()


def test_presets_returns_a_copy() -> None:
    """Changing what presets() returned changes nothing the resolver reads."""
    table = TrainerSpanGroup.presets()
    table["rollouts"] = frozenset({"job"})
    assert TrainerSpanGroup.resolve("rollouts") == {"rollout"}


def test_an_extra_preset_naming_an_unknown_group_fails_at_class_creation() -> None:
    """The error names the class, the attribute, the preset, the bad member and the groups."""
    with pytest.raises(
        ValueError, match=r"^BadSpanGroup\.extra_presets\(\)\['fast'\] names"
    ) as info:

        class BadSpanGroup(SpanGroup):
            @classmethod
            def extra_presets(cls) -> Mapping[str, Iterable[str]]:
                return {"fast": ["step", "rolout"]}

    assert "['rolout']" in str(info.value)
    assert str(sorted(BASE)) in str(info.value)


@pytest.mark.parametrize(
    ("extra", "error", "pattern"),
    [
        ({"all": ["job"]}, ValueError, r"may not be named 'all'"),
        ({" ": ["job"]}, ValueError, r"preset name must be a non-empty string, got ' '"),
        ({"fast": "job"}, TypeError, r"\['fast'\] must be an iterable of group names, got str"),
        ([("fast", ["job"])], TypeError, r"must be a mapping of preset name -> group names"),
    ],
)
def test_malformed_extra_presets_fail_at_class_creation(
    extra: object, error: type[Exception], pattern: str
) -> None:
    """A preset named `all`, a blank name, a bare-string member list or a non-mapping raise."""
    with pytest.raises(error, match=pattern):
        type("Bad", (SpanGroup,), {"extra_presets": classmethod(lambda cls: extra)})


def test_setting_both_preset_tables_fails_at_class_creation() -> None:
    """extra_presets() and _PRESETS in one class body is a TypeError naming both."""
    pattern = r"^Both: define extra_presets\(\) .* or _PRESETS .*not both"
    with pytest.raises(TypeError, match=pattern):
        type("Both", (SpanGroup,), {"extra_presets": classmethod(lambda cls: {}), "_PRESETS": {}})


def test_an_extra_presets_attribute_is_refused_naming_the_hook() -> None:
    """A mapping attribute EXTRA_PRESETS (an earlier spelling) is not silently ignored: the
    class fails at creation and the message names the classmethod to use."""
    with pytest.raises(TypeError, match=r"^Old: EXTRA_PRESETS is not read; .*extra_presets\(\)"):
        type("Old", (SpanGroup,), {"EXTRA_PRESETS": {"fast": ["step"]}})


UMBRELLA_GROUPS = frozenset({"job", "step", "rollout"})


@pytest.mark.parametrize(
    "cls",
    [SpanGroup, SpanRegistry, TrainerSpanGroup, GymSpanGroup, MegatronSpanGroup],
    ids=lambda cls: cls.__name__,
)
def test_consumers_introspection_idiom_works_on_every_class(cls: type) -> None:
    """NeMo-RL collects a class's group constants with
    `{a for a in dir(cls) if not a.startswith("_") and getattr(cls, a) in UMBRELLA_GROUPS}`:
    every public attribute must be hashable for that to run, and it finds the constants."""
    found = {a for a in dir(cls) if not a.startswith("_") and getattr(cls, a) in UMBRELLA_GROUPS}

    expected = {"JOB", "STEP"} if issubclass(cls, SpanGroup) else set()
    if "ROLLOUT" in dir(cls):
        expected.add("ROLLOUT")
    assert found == expected


def test_all_groups_that_are_not_a_set_fail_at_class_creation() -> None:
    """ALL_GROUPS given as a list is a TypeError naming the attribute."""
    with pytest.raises(TypeError, match=r"^ListSpanGroup\.ALL_GROUPS must be a frozenset"):
        type("ListSpanGroup", (SpanGroup,), {"ALL_GROUPS": ["job"]})


def test_subclass_resolve_intersected_with_base_groups() -> None:
    """Consumer shape: `MegatronSpanGroup.resolve(spec) & SpanGroup.ALL_GROUPS`."""
    assert MegatronSpanGroup.resolve("all") & SpanGroup.ALL_GROUPS == {"job", "checkpoint"}


def test_subclass_resolution_pins_the_gate() -> None:
    """Consumer shape: `set_enabled_span_groups(GymSpanGroup.resolve("all"))`."""
    set_enabled_span_groups(GymSpanGroup.resolve("all"))
    assert enabled_span_groups() == BASE | {"rollout", "verify"}


# --- SpanRegistry ------------------------------------------------------------------------


def test_registry_is_empty_at_import() -> None:
    """lens registers nothing: a fresh interpreter sees no namespace and no group."""
    code = (
        "from nemo.lens import SpanRegistry as R;"
        "print(R.namespaces(), sorted(R.groups()), sorted(R.presets()))"
    )
    assert python_stdout("-c", code).strip() == "[] [] ['all']"


def test_register_normalises_names_and_reports_them() -> None:
    """Names are stripped and lower-cased; groups, namespaces and presets report them."""
    SpanRegistry.register(" NeMo_RL ", [" Rollout", "GENERATION "], {" Per_Step ": ["rollout"]})
    assert SpanRegistry.namespaces() == ["nemo_rl"]
    assert SpanRegistry.groups() == {"rollout", "generation"}
    assert SpanRegistry.presets() == {
        "per_step": frozenset({"rollout"}),
        "all": frozenset({"rollout", "generation"}),
    }


def test_consumer_registration_shapes() -> None:
    """RL3 registers by keyword with allow_override, NVRx positionally; both resolve."""
    SpanRegistry.register(
        "nemo_rl",
        groups=["rollout", "generation", "training"],
        presets={"default": ["training"], "per_step": ["rollout", "generation"]},
        allow_override=True,
    )
    SpanRegistry.register("nvrx", ["fault_tolerance"], {"default": ["fault_tolerance"]})
    assert SpanRegistry.namespaces() == ["nemo_rl", "nvrx"]
    enabled, pending = SpanRegistry.resolve("default")
    assert enabled == {"training", "fault_tolerance"}
    assert pending == frozenset()


def test_presets_union_across_namespaces_and_may_name_other_namespaces_groups() -> None:
    """Same-named presets merge; a preset may list a group another namespace registered."""
    SpanRegistry.register("a", ["x"], {"p": ["x"]})
    SpanRegistry.register("b", ["y"], {"p": ["y", "x"], "q": ["x"]})
    assert SpanRegistry.presets() == {
        "p": frozenset({"x", "y"}),
        "q": frozenset({"x"}),
        "all": frozenset({"x", "y"}),
    }


def test_presets_keep_only_live_members() -> None:
    """After the owner of a group leaves, presets no longer list that group."""
    SpanRegistry.register("a", ["x"])
    SpanRegistry.register("b", ["y"], {"p": ["x", "y"]})
    SpanRegistry.unregister("a")
    assert SpanRegistry.presets() == {"p": frozenset({"y"}), "all": frozenset({"y"})}


@pytest.mark.parametrize(
    ("spec", "enabled", "pending"),
    [
        ("", set(), set()),
        ("ALL", {"rollout", "generation", "ckpt"}, set()),
        ("Fast, ckpt", {"rollout", "ckpt"}, set()),
        ("per_stp, rollout", {"rollout"}, {"per_stp"}),
        ("nope,also_nope", set(), {"nope", "also_nope"}),
        ("rollout", {"rollout"}, set()),
    ],
)
def test_resolve_is_lenient(spec: str, enabled: set[str], pending: set[str]) -> None:
    """Unknown tokens go to pending and cost none of the valid ones; `all` is every group."""
    SpanRegistry.register("nemo_rl", ["rollout", "generation"], {"fast": ["rollout"]})
    SpanRegistry.register("nvrx", ["ckpt"])
    assert SpanRegistry.resolve(spec) == (frozenset(enabled), frozenset(pending))


def test_resolve_looks_presets_up_first() -> None:
    """A token that is both a preset and a group expands as the preset."""
    SpanRegistry.register("a", ["x", "y"], {"x": ["y"]})
    assert SpanRegistry.resolve("x") == (frozenset({"y"}), frozenset())


@given(st.text())
def test_resolve_never_raises(spec: str) -> None:
    """Any text resolves; enabled is registered groups, pending the rest of the tokens."""
    SpanRegistry.clear()
    SpanRegistry.register("ns", ["a", "b"], {"p": ["a"]})
    enabled, pending = SpanRegistry.resolve(spec)
    tokens = {part.strip().lower() for part in spec.split(",")} - {""}
    assert enabled <= {"a", "b"}
    assert pending == tokens - {"a", "b", "p", "all"}


def test_resolve_of_a_non_string_resolves_to_nothing() -> None:
    """The lenient resolver never raises, even for a non-string spec."""
    SpanRegistry.register("ns", ["a"])
    assert SpanRegistry.resolve(None) == (frozenset(), frozenset())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", ["x"]), "namespace must be non-empty"),
        (("  ", ["x"]), "namespace must be non-empty"),
        (("ns", ["x", " "]), "must be non-empty"),
        (("ns", ["All"]), "group named 'all'"),
        (("ns", ["x"], {"ALL": ["x"]}), "preset named 'all'"),
        (("ns", ["x"], {"": ["x"]}), "preset name .* must be non-empty"),
        (("ns", ["x"], {"p": ["x", "ghost"]}), r"names unregistered groups \['ghost'\]"),
    ],
)
def test_register_refuses_bad_names(args: tuple[object, ...], message: str) -> None:
    """Empty names, the reserved `all`, and preset members nobody registered are refused."""
    with pytest.raises(ValueError, match=message):
        SpanRegistry.register(*args)  # type: ignore[arg-type]
    assert SpanRegistry.namespaces() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((3, ["x"]), "namespace must be a string, got int"),
        (("ns", "step"), "must be an iterable of strings, got str"),
        (("ns", [1]), "must be a string, got int"),
        (("ns", ["x"], ["x"]), "must be a mapping"),
        (("ns", ["x"], {"p": "x"}), "must be an iterable of strings, got str"),
    ],
)
def test_register_refuses_wrong_types(args: tuple[object, ...], message: str) -> None:
    """Wrong shapes are TypeErrors that name what was expected and what came."""
    with pytest.raises(TypeError, match=message):
        SpanRegistry.register(*args)  # type: ignore[arg-type]


def test_reregistering_needs_override_and_replaces_wholesale() -> None:
    """A second registration of a namespace fails unless overridden, then replaces it all."""
    SpanRegistry.register("ns", ["x", "y"], {"p": ["x"]})
    with pytest.raises(ValueError, match="'ns' is already registered; pass allow_override=True"):
        SpanRegistry.register("NS", ["z"])
    SpanRegistry.register("ns", ["z"], allow_override=True)
    assert SpanRegistry.groups() == {"z"}
    assert SpanRegistry.presets() == {"all": frozenset({"z"})}


def test_claiming_another_namespaces_group_needs_override() -> None:
    """A group another namespace owns is refused, then moves over with allow_override."""
    SpanRegistry.register("a", ["shared", "own_a"])
    with pytest.raises(ValueError, match=r"'shared' \(namespace 'a'\)"):
        SpanRegistry.register("b", ["shared"])
    assert SpanRegistry.namespaces() == ["a"]
    SpanRegistry.register("b", ["shared"], allow_override=True)
    SpanRegistry.unregister("b")
    assert SpanRegistry.groups() == {"own_a"}


def test_unregister_unknown_namespace_lists_the_registered_ones() -> None:
    """Unregistering a namespace nobody registered is a ValueError listing the others."""
    SpanRegistry.register("nemo_rl", ["x"])
    with pytest.raises(ValueError, match=r"'nvrx' is not registered.*\['nemo_rl'\]"):
        SpanRegistry.unregister("nvrx")


def test_clear_empties_the_registry() -> None:
    """clear() removes every namespace, group and preset."""
    SpanRegistry.register("a", ["x"], {"p": ["x"]})
    SpanRegistry.clear()
    assert (SpanRegistry.namespaces(), SpanRegistry.groups()) == ([], frozenset())
    assert SpanRegistry.presets() == {"all": frozenset()}


def test_mutations_re_resolve_the_stored_spec() -> None:
    """Registering makes pending tokens enabled; unregistering makes them pending again."""
    SpanRegistry.register("nemo_rl", ["training"])
    set_span_group_spec("training,rollout")
    assert (enabled_span_groups(), pending_span_groups()) == (fs("training"), fs("rollout"))
    SpanRegistry.register("late", ["rollout"])
    assert (enabled_span_groups(), pending_span_groups()) == (fs("training", "rollout"), fs())
    SpanRegistry.unregister("late")
    assert (enabled_span_groups(), pending_span_groups()) == (fs("training"), fs("rollout"))


def test_mutations_leave_a_pinned_set_alone() -> None:
    """While the strict path has pinned the set, registry changes do not touch it."""
    set_enabled_span_groups(frozenset({"job"}))
    SpanRegistry.register("nemo_rl", ["rollout"])
    assert enabled_span_groups() == {"job"}


def test_late_registration_warns_once_per_namespace(caplog: pytest.LogCaptureFixture) -> None:
    """Registering after span groups were configured works, with one warning per namespace."""
    SpanRegistry.register("early", ["training"])
    assert not [r for r in caplog.records if r.name == "nemo.lens.groups"]
    set_span_group_spec("training,rollout")
    with caplog.at_level(logging.WARNING, logger="nemo.lens.groups"):
        SpanRegistry.register("late", ["rollout"])
        SpanRegistry.register("late", ["rollout"], allow_override=True)
    late = [r for r in caplog.records if r.name == "nemo.lens.groups"]
    assert len(late) == 1
    assert "'late' registered after span groups were configured" in late[0].getMessage()
    assert enabled_span_groups() == {"training", "rollout"}


# --- the "which resolver" rule -------------------------------------------------------------


def test_resolver_rule() -> None:
    """A configured class is strict; else a non-empty registry is lenient; else SpanGroup."""
    assert _strict_resolver_for(GymSpanGroup) is GymSpanGroup
    assert _strict_resolver_for(None) is SpanGroup
    SpanRegistry.register("nemo_rl", ["rollout"])
    assert _strict_resolver_for(None) is None
    assert _strict_resolver_for(GymSpanGroup) is GymSpanGroup
