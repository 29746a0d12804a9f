"""Span groups: the names `managed_span` and `trace_fn` are gated by, and their resolvers.

Two resolvers coexist because two consumer generations do:

- `SpanGroup` is strict and subclassable. A framework subclasses it with its own
  `ALL_GROUPS` and `extra_presets()`, and a typo in the spec fails setup with a clear error
  (naming the environment variable `NemoLensConfig.from_env` read the spec from, when it did).
- `SpanRegistry` is namespaced and lenient. Frameworks register their groups at import, and
  a spec token nobody registered yet is kept pending instead of failing, so a library that
  registers late still gets its spans.

Both walk a spec with the one token loop `_resolve_tokens`. `_strict_resolver_for` holds the
rule that picks between them for a configuration.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Final, NoReturn, TypeAlias

from nemo.lens._fork_hooks import hold_lock_across_fork
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensTypeError, LensValueError

__all__ = ["SpanGroup", "SpanRegistry"]

_logger = logging.getLogger(__name__)


#: The preset every resolver understands as "every known group"; never a group name.
_ALL_PRESET: Final = "all"


#: Where `NemoLensConfig.from_env` read a span-group spec: `(variable, value)`, as
#: `NemoLensConfig._env_source("span_groups")` gives it; None for a spec set in code.
_SpecSource: TypeAlias = tuple[str, Any] | None


def _spec_tokens(spec: str) -> list[str]:
    """Split a comma list into stripped, lower-cased, non-empty tokens."""
    return [token for token in (part.strip().lower() for part in spec.split(",")) if token]


def _resolve_tokens(
    spec: str,
    presets: Mapping[str, frozenset[str]],
    groups: frozenset[str],
    unknown: Callable[[str], None],
) -> frozenset[str]:
    """The one token loop of both resolvers: the groups `spec` enables.

    Each token is looked up as a preset first (adding its members), then as a group; any
    other token goes to `unknown`, which raises (strict) or collects it (lenient).
    """
    enabled: set[str] = set()
    for token in _spec_tokens(spec):
        members = presets.get(token)
        if members is not None:
            enabled.update(members)
        elif token in groups:
            enabled.add(token)
        else:
            unknown(token)
    return frozenset(enabled)


def _source_note(source: _SpecSource) -> str:
    """How an error or warning names where its spec came from: `""` for a spec set in code,
    else `" (span_groups comes from the environment variable X='...')"`."""
    if source is None:
        return ""
    variable, value = source
    return f" (span_groups comes from the environment variable {variable}={value!r})"


class SpanGroup:
    """The strict span-group table: eight base groups and three presets.

    Subclass it to declare a framework's own groups. `ALL_GROUPS` lists the subclass's
    groups; the classmethod `extra_presets()` returns presets that join (or replace
    same-named presets of) the parent's, and `all` always means the subclass's
    `ALL_GROUPS`::

        class TrainerSpanGroup(SpanGroup):
            ROLLOUT = "rollout"
            ALL_GROUPS = SpanGroup.ALL_GROUPS | {ROLLOUT}

            @classmethod
            def extra_presets(cls):
                return {"rollouts": {cls.ROLLOUT}, "default": {"job", cls.ROLLOUT}}

    Every public attribute stays hashable (consumers test `getattr(cls, name) in groups`
    over `dir(cls)`), which is why the presets come from a method, not a mapping attribute.

    The presets are checked when the class is created: a member outside `ALL_GROUPS`, an
    empty name or a preset named `all` raises there. `presets()` returns the resulting
    table. A subclass written for lens 0.2, which assigns the whole preset table itself,
    keeps that table as written, unchecked.
    """

    JOB: ClassVar[str] = "job"
    CHECKPOINT: ClassVar[str] = "checkpoint"
    EVALUATE: ClassVar[str] = "evaluate"
    MODEL_INIT: ClassVar[str] = "model_init"
    LOAD_CHECKPOINT: ClassVar[str] = "load_checkpoint"
    STEP: ClassVar[str] = "step"
    FORWARD_BACKWARD: ClassVar[str] = "forward_backward"
    OPTIMIZER: ClassVar[str] = "optimizer"

    ALL_GROUPS: ClassVar[frozenset[str]] = frozenset(
        {
            JOB,
            CHECKPOINT,
            EVALUATE,
            MODEL_INIT,
            LOAD_CHECKPOINT,
            STEP,
            FORWARD_BACKWARD,
            OPTIMIZER,
        }
    )

    # Private, but part of the subclass contract (consumers replace it and compare to it).
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {
        "default": frozenset({JOB, CHECKPOINT, EVALUATE}),
        "per_step": ALL_GROUPS,
        _ALL_PRESET: ALL_GROUPS,
    }

    @classmethod
    def extra_presets(cls) -> Mapping[str, Iterable[str]]:
        """Presets this class adds to its parent's: preset name -> member groups.

        Override it in a subclass; it is called once, when the subclass is created. The
        base class adds none.
        """
        return {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Build a subclass's preset table from its parent's and its `extra_presets()`."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "EXTRA_PRESETS" in own:
            # A mapping attribute would be unhashable under consumers' dir() idiom.
            raise LensTypeError(
                f"{cls.__name__}: EXTRA_PRESETS is not read; return the presets from the "
                "classmethod extra_presets() instead"
            )
        if "_PRESETS" in own:
            if "extra_presets" in own:
                raise LensTypeError(
                    f"{cls.__name__}: define extra_presets() (presets added to the parent's) "
                    "or _PRESETS (the whole table), not both"
                )
            return  # the older contract: the subclass's table, as it wrote it
        if "ALL_GROUPS" not in own and "extra_presets" not in own:
            return  # nothing of its own: the parent's tables apply unchanged
        cls._PRESETS = _subclass_presets(cls)

    @classmethod
    def presets(cls) -> dict[str, frozenset[str]]:
        """Return a copy of this class's presets: preset name -> member groups."""
        return dict(cls._PRESETS)

    @classmethod
    def resolve(cls, spec: str) -> frozenset[str]:
        """Resolve a comma-separated spec of group and preset names to a set of groups.

        Parts are stripped and lower-cased; empty parts are skipped, so `""` gives the
        empty set. A preset adds its members; any other part must be one of
        `cls.ALL_GROUPS`. The tables are looked up on `cls`, so a subclass's apply.

        Raises:
            ValueError: A part is neither a group nor a preset of `cls`; the message names
                it and lists every valid option.
            TypeError: `spec` is not a string.
        """
        return _resolve_strictly(cls, spec, None)


class SpanRegistry:
    """The namespaced, lenient span-group registry (state lives on the class).

    lens registers nothing here; it is empty at import. Frameworks register their groups
    and presets under a namespace; presets of the same name union across namespaces.
    """

    # Mutated in place, never rebound, so subclasses and readers share one table.
    _groups_by_namespace: ClassVar[dict[str, frozenset[str]]] = {}
    _presets_by_namespace: ClassVar[dict[str, dict[str, frozenset[str]]]] = {}
    # Taken across fork() and replaced in the child, so a child never inherits it held.
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def register(
        cls,
        namespace: str,
        groups: Iterable[str],
        presets: Mapping[str, Iterable[str]] | None = None,
        *,
        allow_override: bool = False,
    ) -> None:
        """Register a namespace's span groups and presets.

        Names are stripped and lower-cased. A preset may name this namespace's groups or
        any group another namespace has registered. Re-registering a namespace replaces it
        wholesale. The stored span-group spec (`nemo.lens.state`) is re-resolved afterwards,
        so tokens that were pending become enabled.

        Args:
            namespace: The owner's name, e.g. `"nemo_rl"`.
            groups: The group names this namespace owns.
            presets: Preset name -> member groups; merged with same-named presets of other
                namespaces.
            allow_override: Allow replacing this namespace, and taking over groups another
                namespace owns.

        Raises:
            ValueError: An empty namespace, group or preset name; a group or preset named
                `"all"`; a preset member no namespace registered; the namespace exists, or
                a group belongs to another namespace, and `allow_override` is false.
            TypeError: A name is not a string, or `groups`/`presets` has the wrong shape.
        """
        name = _normalise_name(namespace, "namespace")
        new_groups = frozenset(_normalise_names(groups, f"groups of namespace {name!r}"))
        for group in new_groups:
            if group == _ALL_PRESET:
                raise LensValueError(
                    f"SpanRegistry.register: namespace {name!r} declares a group named "
                    f"'{_ALL_PRESET}', which is reserved for the preset of every group"
                )
        new_presets = _normalise_presets(presets, name)
        with cls._lock:
            if name in cls._groups_by_namespace and not allow_override:
                raise LensValueError(
                    f"SpanRegistry.register: namespace {name!r} is already registered; pass "
                    "allow_override=True to replace it"
                )
            owners = {
                group: owner
                for owner, owned in cls._groups_by_namespace.items()
                if owner != name
                for group in owned
            }
            claimed = sorted(group for group in new_groups if group in owners)
            if claimed and not allow_override:
                taken = ", ".join(f"{group!r} (namespace {owners[group]!r})" for group in claimed)
                raise LensValueError(
                    f"SpanRegistry.register: namespace {name!r} claims groups other "
                    f"namespaces own: {taken}; pass allow_override=True to take them over"
                )
            live = new_groups | owners.keys()
            for preset, members in new_presets.items():
                unknown = sorted(members - live)
                if unknown:
                    raise LensValueError(
                        f"SpanRegistry.register: preset {preset!r} of namespace {name!r} "
                        f"names unregistered groups {unknown}; registered groups: "
                        f"{sorted(live)}"
                    )
            for group in claimed:
                owner = owners[group]
                cls._groups_by_namespace[owner] = cls._groups_by_namespace[owner] - {group}
            cls._groups_by_namespace[name] = new_groups
            cls._presets_by_namespace[name] = new_presets
        _after_mutation(name)

    @classmethod
    def unregister(cls, namespace: str) -> None:
        """Remove a namespace with its groups and presets.

        Raises:
            ValueError: The namespace is not registered.
        """
        name = namespace.strip().lower() if isinstance(namespace, str) else namespace
        with cls._lock:
            if name not in cls._groups_by_namespace:
                registered = sorted(cls._groups_by_namespace)
                raise LensValueError(
                    f"SpanRegistry.unregister: namespace {namespace!r} is not registered; "
                    f"registered namespaces: {registered}"
                )
            del cls._groups_by_namespace[name]
            del cls._presets_by_namespace[name]
        _after_mutation(None)

    @classmethod
    def clear(cls) -> None:
        """Remove every namespace (for tests)."""
        with cls._lock:
            cls._groups_by_namespace.clear()
            cls._presets_by_namespace.clear()
        _after_mutation(None)

    @classmethod
    def groups(cls) -> frozenset[str]:
        """Return every registered group, across namespaces."""
        with cls._lock:
            return cls._live_groups()

    @classmethod
    def namespaces(cls) -> list[str]:
        """Return the registered namespaces, sorted."""
        with cls._lock:
            return sorted(cls._groups_by_namespace)

    @classmethod
    def presets(cls) -> dict[str, frozenset[str]]:
        """Return the merged presets, including `"all"`, with only live groups as members."""
        with cls._lock:
            return cls._merged_presets(cls._live_groups())

    @classmethod
    def resolve(cls, spec: str) -> tuple[frozenset[str], frozenset[str]]:
        """Resolve a spec leniently to `(enabled, pending)`; never raises.

        Tokens are case-insensitive and comma-separated; presets are looked up first, then
        groups. `"all"` means every registered group. A token nobody registered goes to
        `pending` and costs none of the valid tokens. A non-string spec resolves to nothing.
        """
        if not isinstance(spec, str):
            return frozenset(), frozenset()  # type: ignore[unreachable]  # callers ignoring hints
        with cls._lock:
            live = cls._live_groups()
            presets = cls._merged_presets(live)
        pending: set[str] = set()
        enabled = _resolve_tokens(spec, presets, live, pending.add)
        return enabled, frozenset(pending)

    # Callers hold `_lock`.
    @classmethod
    def _live_groups(cls) -> frozenset[str]:
        return frozenset().union(*cls._groups_by_namespace.values())

    @classmethod
    def _merged_presets(cls, live: frozenset[str]) -> dict[str, frozenset[str]]:
        merged: dict[str, frozenset[str]] = {}
        for presets in cls._presets_by_namespace.values():
            for preset, members in presets.items():
                merged[preset] = merged.get(preset, frozenset()) | (members & live)
        merged[_ALL_PRESET] = live
        return merged


def _resolve_strictly(cls: type[SpanGroup], spec: str, source: _SpecSource) -> frozenset[str]:
    """`SpanGroup.resolve` on `cls`'s tables; an unknown token's error also names `source`."""
    if not isinstance(spec, str):
        raise LensTypeError(
            f"{cls.__name__}.resolve: spec must be a comma-separated string of span "
            f"groups or presets, got {type(spec).__name__} ({spec!r})"
        )
    presets = cls._PRESETS
    known = cls.ALL_GROUPS

    def refuse(token: str) -> NoReturn:
        valid = sorted(known | presets.keys())
        raise LensValueError(
            f"Unknown span group or preset: '{token}'. Valid options: {valid}{_source_note(source)}"
        )

    return _resolve_tokens(spec, presets, known, refuse)


def _resolve_configured(cls: type[SpanGroup], spec: str, source: _SpecSource) -> frozenset[str]:
    """Resolve a configuration's spec strictly, as `cls.resolve(spec)` does (setup and
    `NemoLensConfig.resolved_span_groups` call it); an unknown token's error names `source`.

    A subclass that overrides `resolve` keeps it: that method is called, and names nothing.
    """
    if inspect.getattr_static(cls, "resolve") is not inspect.getattr_static(SpanGroup, "resolve"):
        return cls.resolve(spec)
    return _resolve_strictly(cls, spec, source)


def _subclass_presets(cls: type[SpanGroup]) -> dict[str, frozenset[str]]:
    """The parent's presets with `all` as `cls.ALL_GROUPS`, plus `cls.extra_presets()`, checked."""
    where = f"{cls.__name__}.extra_presets()"
    groups: object = cls.ALL_GROUPS
    if not isinstance(groups, (frozenset, set)):
        raise LensTypeError(
            f"{cls.__name__}.ALL_GROUPS must be a frozenset of group names, got "
            f"{type(groups).__name__} ({groups!r})"
        )
    # Only a hook of the class's own: an inherited one was applied to the parent's table.
    extra = cls.extra_presets() if "extra_presets" in vars(cls) else {}
    if not isinstance(extra, Mapping):
        raise LensTypeError(
            f"{where} must be a mapping of preset name -> group names, got "
            f"{type(extra).__name__} ({extra!r})"
        )
    # `cls` has no `_PRESETS` of its own yet, so this is the nearest parent's table.
    presets = {**cls._PRESETS, _ALL_PRESET: frozenset(groups)}
    for raw_name, raw_members in extra.items():
        if not isinstance(raw_name, str) or not raw_name.strip():
            raise LensValueError(
                f"{where}: a preset name must be a non-empty string, got {raw_name!r}"
            )
        name = raw_name.strip().lower()
        if name == _ALL_PRESET:
            raise LensValueError(
                f"{where}: a preset may not be named '{_ALL_PRESET}', which always means "
                f"every group of {cls.__name__}.ALL_GROUPS"
            )
        if isinstance(raw_members, str) or not isinstance(raw_members, Iterable):
            raise LensTypeError(
                f"{where}[{raw_name!r}] must be an iterable of group names, got "
                f"{type(raw_members).__name__} ({raw_members!r})"
            )
        members = frozenset(raw_members)
        unknown = sorted(str(member) for member in members - groups)
        if unknown:
            raise LensValueError(
                f"{where}[{raw_name!r}] names groups outside {cls.__name__}.ALL_GROUPS: "
                f"{unknown}; groups: {sorted(groups)}"
            )
        presets[name] = members
    return presets


def _strict_resolver_for(span_group_cls: type[SpanGroup] | None) -> type[SpanGroup] | None:
    """Apply the "which resolver" rule: the strict class to use, or None for the registry.

    1. A configured `span_group_cls` resolves strictly.
    2. Else, when `SpanRegistry` has a namespace, resolution is lenient (None is returned;
       setup then calls `nemo.lens.state.set_span_group_spec`).
    3. Else `SpanGroup` resolves strictly.
    """
    if span_group_cls is not None:
        return span_group_cls
    if SpanRegistry.namespaces():
        return None
    return SpanGroup


def _normalise_name(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise LensTypeError(
            f"SpanRegistry.register: {what} must be a string, got {type(value).__name__} "
            f"({value!r})"
        )
    name = value.strip().lower()
    if not name:
        raise LensValueError(f"SpanRegistry.register: {what} must be non-empty, got {value!r}")
    return name


def _normalise_names(values: Iterable[str], what: str) -> list[str]:
    # A bare string is iterable too; reading it as single letters is never what was meant.
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise LensTypeError(
            f"SpanRegistry.register: {what} must be an iterable of strings, got "
            f"{type(values).__name__} ({values!r})"
        )
    return [_normalise_name(value, f"a name in {what}") for value in values]


def _normalise_presets(
    presets: Mapping[str, Iterable[str]] | None, namespace: str
) -> dict[str, frozenset[str]]:
    if presets is None:
        return {}
    if not isinstance(presets, Mapping):
        raise LensTypeError(
            f"SpanRegistry.register: presets of namespace {namespace!r} must be a mapping of "
            f"preset name -> group names, got {type(presets).__name__}"
        )
    normalised: dict[str, frozenset[str]] = {}
    for raw_name, members in presets.items():
        preset = _normalise_name(raw_name, f"a preset name of namespace {namespace!r}")
        if preset == _ALL_PRESET:
            raise LensValueError(
                f"SpanRegistry.register: namespace {namespace!r} declares a preset named "
                f"'{_ALL_PRESET}', which lens defines as every registered group"
            )
        normalised[preset] = normalised.get(preset, frozenset()) | frozenset(
            _normalise_names(members, f"preset {preset!r} of namespace {namespace!r}")
        )
    return normalised


# Called after every change to the registry; each returns True when span groups had already
# been chosen from it (so a namespace registering now comes late). `nemo.lens.state`
# listens, to re-resolve its stored spec; this module imports nothing of it.
_change_listeners: list[Callable[[], bool]] = []
_late_registrations = WarnOnce(_logger, "SpanRegistry late registrations")


def _on_registry_change(listener: Callable[[], bool]) -> None:
    """Call `listener()` after every change to `SpanRegistry`; see `_change_listeners`."""
    _change_listeners.append(listener)


def _after_mutation(registered: str | None) -> None:
    """Tell the listeners; warn once per namespace that registered after groups were chosen."""
    already_chosen = False
    for listener in list(_change_listeners):
        already_chosen = listener() or already_chosen
    if registered is not None and already_chosen:
        _late_registrations.warn(
            registered,
            "SpanRegistry: namespace %r registered after span groups were configured; "
            "its groups apply from now on, but spans gated earlier were not recorded. "
            "Register span groups before setup_telemetry.",
            registered,
        )


hold_lock_across_fork("span registry lock", SpanRegistry, "_lock")
