"""The process-global table of metric groups, its lock, and its fork handling.

A group's state object also carries what recording learns about it (instrument caches
per meter, warning memory). Re-registering a group swaps in a fresh state object, so a
new definition never reuses an old instrument and its warnings start afresh.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

from nemo.lens import _fork_hooks
from nemo.lens._warn_once import WarnOnce
from nemo.lens.errors import LensTypeError, LensValueError
from nemo.lens.instruments._spec import MetricSpec

if TYPE_CHECKING:
    from nemo.lens.instruments._coalesce import CoalescingBuffer

_logger = logging.getLogger(__name__)

#: How `record_metrics` records one key: the record method for a float, the one for an
#: int (for counters, behind the int64 guard), and the lowest value of the kind.
Emitter: TypeAlias = tuple[Callable[..., object], Callable[..., object], int]


class Keeper(Protocol):
    """What takes a `record_metrics` call's values at once (`MeterCache.keeper`)."""

    def keep_call(
        self,
        kept: Mapping[str, tuple[Any, float]],
        items: Mapping[Any, Any],
        attributes: Mapping[str, object] | None,
    ) -> dict[Any, Any]:
        """Keep what it can of `items`; return the rest."""
        ...


class MeterCache:
    """The instruments one group has created on one meter, which it holds weakly."""

    __slots__ = (
        "bounded",
        "buffer",
        "child",
        "emitters",
        "failed",
        "finished",
        "inherited",
        "keeper",
        "kept",
        "ref",
        "silent",
    )

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        #: key -> its instrument's record methods (`set`, `add` or `record`; see
        #: `Emitter`) and the lowest value its kind accepts on the fast path (0, or int64's
        #: minimum).
        self.emitters: dict[str, Emitter] = {}
        #: The same, each wrapped to apply the cardinality limit (with the attribute sets
        #: its instrument has seen): used for calls with attributes while a limit is set.
        self.bounded: dict[str, Emitter] = {}
        #: key -> its instrument in `keeper` and the lowest value of its kind, for keys
        #: whose values `record_metrics` hands `keeper` a call at a time.
        self.kept: dict[str, tuple[Any, float]] = {}
        #: What takes those values (`keep_call`): the coalescing buffer (`buffer`), or in
        #: a forked child its shared region's writer; None while nothing does.
        self.keeper: Keeper | None = None
        #: keys whose instrument could not be created on this meter.
        self.failed: set[str] = set()
        #: True in a forked child for a meter the parent recorded on: never recorded
        #: into again there (see `_drop_inherited_instruments`).
        self.inherited = False
        #: True once the setup whose provider made this meter was shut down: recording
        #: on it is dropped with a warning (see `nemo.lens.instruments._finished`).
        self.finished = False
        #: Where this meter's gauges and sums are buffered until a collection (a meter of
        #: a provider lens's pipeline built), or None: recorded directly.
        self.buffer: CoalescingBuffer | None = None
        #: True in a forked child once this (inherited) meter records into the child's
        #: shared region (see `nemo.lens._forked_children`).
        self.child = False
        #: True once recording learnt that this group records nothing on this meter (it
        #: is finished, or inherited by a child whose parent takes none of its values) and
        #: warned once: every later call returns at its first look, with `emitters` empty.
        self.silent = False


class MetricGroup:
    """A registered group: its specs and what recording has learned about it."""

    __slots__ = ("meters", "name", "spec_by_key", "specs", "warnings")

    def __init__(self, name: str, specs: tuple[MetricSpec, ...]) -> None:
        self.name = name
        self.specs = specs
        self.spec_by_key = {spec.key: spec for spec in specs}
        #: id(meter) -> its cache; the cache's weak reference removes the entry.
        self.meters: dict[int, MeterCache] = {}
        self.warnings = WarnOnce(_logger, f"record_metrics: group {name!r}")


# Mutated in place, never rebound, so the recording module can bind it once.
GROUPS: Final[dict[str, MetricGroup]] = {}
# Warning memory for calls naming a group that is not registered.
UNREGISTERED: Final = MetricGroup("<unregistered>", ())

# One lock guards registration and instrument creation. It is held across fork() and
# replaced in the child, so the recording module reads it as `_registry.lock` at use time.
lock = threading.Lock()
_fork_hooks.hold_lock_across_fork("metric registry lock", sys.modules[__name__], "lock")


def _drop_inherited_instruments() -> None:
    # The SDK's aggregation locks are not replaced in a child: a parent thread that was
    # recording at the fork leaves them held forever. The child therefore never records
    # into an instrument its parent used; such points would not be exported from the
    # child anyway (see nemo.lens._fork). A setup made in the child records normally,
    # and counts its attribute sets towards the cardinality limit afresh.
    for group in GROUPS.values():
        for cache in group.meters.values():
            cache.emitters = {}
            cache.bounded = {}
            cache.kept = {}
            cache.inherited = True
            cache.buffer = None
            cache.keeper = None
            cache.child = False
            cache.silent = False


_fork_hooks.register("inherited instruments", after_in_child=_drop_inherited_instruments)


def register_metric_group(
    group: str, specs: Iterable[MetricSpec], *, allow_override: bool = False
) -> None:
    """Declare a metric group once; `record_metrics(meter, group, ...)` then records it.

    Args:
        group: The group's name, a non-empty string.
        specs: The group's `MetricSpec`s, kept as a tuple in declaration order.
        allow_override: Replace an existing group of this name. Its instrument caches and
            warning memory are dropped, so the new definition applies from the next record.

    Raises:
        ValueError: The group name is empty or not a string, there are no specs, a key or
            a name repeats, or the group exists and `allow_override` is false.
        TypeError: `specs` is not iterable, or an item is not a `MetricSpec`.
    """
    if not isinstance(group, str) or not group.strip():
        raise LensValueError(
            f"register_metric_group: group must be a non-empty string, got {group!r}"
        )
    try:
        spec_tuple = tuple(specs)
    except TypeError as exc:
        raise LensTypeError(
            f"register_metric_group: specs must be an iterable of MetricSpec, got "
            f"{type(specs).__name__}"
        ) from exc
    if not spec_tuple:
        raise LensValueError(
            f"register_metric_group: group {group!r} has no specs; pass at least one MetricSpec"
        )
    keys: set[str] = set()
    names: set[str] = set()
    for index, spec in enumerate(spec_tuple):
        if not isinstance(spec, MetricSpec):
            raise LensTypeError(
                f"register_metric_group: specs[{index}] must be a MetricSpec, got "
                f"{type(spec).__name__} ({spec!r})"
            )
        if spec.key in keys:
            raise LensValueError(
                f"register_metric_group: key {spec.key!r} appears twice in group {group!r}; "
                "each key must be unique within its group"
            )
        if spec.name in names:
            raise LensValueError(
                f"register_metric_group: name {spec.name!r} appears twice in group {group!r}; "
                "each instrument name must be unique within its group"
            )
        keys.add(spec.key)
        names.add(spec.name)
    with lock:
        if group in GROUPS and not allow_override:
            raise LensValueError(
                f"register_metric_group: group {group!r} is already registered; pass "
                "allow_override=True to replace it"
            )
        GROUPS[group] = MetricGroup(group, spec_tuple)


def unregister_metric_group(group: str) -> None:
    """Drop a group with its instrument caches and warning memory.

    Raises:
        ValueError: No group of that name is registered.
    """
    with lock:
        try:
            del GROUPS[group]
        except (KeyError, TypeError):
            registered = sorted(GROUPS)
        else:
            return
    raise LensValueError(
        f"unregister_metric_group: group {group!r} is not registered; registered groups: "
        f"{registered}"
    )


def registered_metric_groups() -> dict[str, tuple[MetricSpec, ...]]:
    """Return a snapshot of every registered group: name -> its specs in order."""
    with lock:
        return {name: state.specs for name, state in GROUPS.items()}


def clear() -> None:
    """Drop every group (lens's own included); used by `nemo.lens.testing`."""
    with lock:
        GROUPS.clear()
        UNREGISTERED.warnings.clear()
