"""What a forked child inherited from its parent, so lens never touches it there.

A child forked while parent threads record (a data-loader worker) inherits the SDK's
locks in whatever state those threads left them: a lock held at the fork stays held in
the child for good. So in a child lens never records through a meter whose provider
existed in the parent. It cannot ask a meter which process made it, so before every fork
it notes every provider the child could reach: the ones lens built, the global one, and
those of every meter lens has recorded on. A meter of one of those is "inherited":
`record_metrics` writes its values into the child's shared region instead, for the parent
to export (`nemo.lens._forked_children`), and `nemo.lens.get_meter()` returns
the meter of the child's own setup, or before one a `ParentsMeter`, instead of one from
the inherited global provider.

A provider is known by its measurement consumer, the object its meters share (the one
thing a meter keeps of its provider; see `nemo.lens._otel_internals`).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from opentelemetry import metrics

from nemo.lens import _fork_hooks, _forked_children, _otel_internals
from nemo.lens._process import BuiltHere
from nemo.lens._warn_once import WarnOnce

_logger = logging.getLogger(__name__)
_warnings = WarnOnce(_logger, "nemo.lens.get_meter")

# Providers lens built in this process, oldest first (weakly: a discarded one may go).
_own_providers: list[weakref.ReferenceType[Any]] = []
# Consumers of every meter lens recorded on in this process.
_seen_consumers: weakref.WeakSet[Any] = weakref.WeakSet()
# Consumers this process inherited from its parent (and theirs), and the snapshot a fork
# in progress hands to its child.
_inherited_consumers: weakref.WeakSet[Any] = weakref.WeakSet()
_at_fork: weakref.WeakSet[Any] = weakref.WeakSet()
_pipelines_built = 0
_inherited_pipeline = False
# Each logger provider lens built, with the process that built it. Logs reach a pipeline only
# through the global logger provider, so a child's own setup must replace an inherited one.
_logger_providers_built: weakref.WeakKeyDictionary[Any, BuiltHere] = weakref.WeakKeyDictionary()


def note_pipeline_built(meter_provider: object | None) -> None:
    """Record that this process built a pipeline (and its meter provider, if any)."""
    global _pipelines_built
    _pipelines_built += 1
    if meter_provider is not None:
        _own_providers.append(weakref.ref(meter_provider))


def note_logger_provider(provider: object) -> None:
    """Record that this process built logger provider `provider`."""
    _logger_providers_built[provider] = BuiltHere()


def is_inherited_logger_provider(provider: object) -> bool:
    """True when `provider` is a logger provider lens built in a parent of this process."""
    try:
        built = _logger_providers_built.get(provider)
    except TypeError:  # not weakly referenceable or not hashable: not one of lens's
        return False
    return built is not None and not built.here()


def note_meter(meter: object) -> None:
    """Record that lens records on `meter` in this process (a fork's child will not)."""
    consumer = _otel_internals.meter_consumer(meter)
    if consumer is not None:
        _seen_consumers.add(consumer)


def inherited_a_pipeline() -> bool:
    """True in a process forked (directly or not) from one that had built a pipeline."""
    return _inherited_pipeline


class ParentsMeter(metrics.NoOpMeter):
    """`nemo.lens.get_meter()` in a forked child before its own setup: the instruments
    created on it are no-ops (the inherited provider is never called), while
    `record_metrics` on it reports to the parent's pipeline, as on the parent's meters."""

    def __init__(self, name: str, parents_consumer: object, version: str | None = None) -> None:
        super().__init__(name, version=version)
        self.parents_consumer = parents_consumer


def consumer_of(meter: object) -> Any:
    """The measurement consumer `meter` records into (its provider's), or None."""
    if type(meter) is ParentsMeter:
        return meter.parents_consumer
    return _otel_internals.meter_consumer(meter)


def is_inherited_meter(meter: object) -> bool:
    """True when `meter` belongs to a provider this process inherited from its parent."""
    if not _inherited_consumers:  # every process that never forked from an exporting one
        return False
    consumer = consumer_of(meter)
    return consumer is not None and consumer in _inherited_consumers


def own_meter_provider() -> Any:
    """The newest meter provider lens built in this process that is still alive, or None."""
    for reference in reversed(_own_providers):
        provider = reference()
        if provider is not None:
            return provider
    return None


def global_provider_is_inherited() -> bool:
    """True when OpenTelemetry's global meter provider came from the parent process."""
    provider = _otel_internals.global_meter_provider()
    consumer = _otel_internals.provider_consumer(provider)
    return consumer is not None and consumer in _inherited_consumers


def meter_instead_of_global(name: str, version: str | None = None) -> metrics.Meter | None:
    """None where the global meter provider may be used; in a child that inherited it, the
    meter of this process's own setup, or a `ParentsMeter` before one (with one warning
    where the parent's pipeline does not take this child's values)."""
    if not global_provider_is_inherited():
        return None
    own = own_meter_provider()
    if own is not None:
        meter: metrics.Meter = own.get_meter(name, version)
        return meter
    consumer = _otel_internals.provider_consumer(_otel_internals.global_meter_provider())
    if not _forked_children.reports_to_parent(consumer):
        _warnings.warn(
            "no own provider",
            "nemo.lens.get_meter(%r): this process was forked from one whose global meter "
            "provider it inherited, which a child never records through (its locks may be "
            "held for good), and that provider's pipeline does not take this process's "
            "values; returning a no-op meter. Call setup_telemetry in the child.",
            name,
        )
    return ParentsMeter(name, consumer, version)


def _snapshot_before_fork() -> None:
    """Note every provider the child could reach (no lock is taken: attribute reads only)."""
    _at_fork.clear()
    candidates: list[object] = [_otel_internals.global_meter_provider()]
    candidates += [reference() for reference in _own_providers]
    for provider in candidates:
        consumer = _otel_internals.provider_consumer(provider)
        if consumer is not None:
            _at_fork.add(consumer)
    for consumers in (_seen_consumers, _inherited_consumers):
        for consumer in list(consumers):
            _at_fork.add(consumer)


def _forget_snapshot_in_parent() -> None:
    _at_fork.clear()


def _become_child() -> None:
    global _inherited_consumers, _seen_consumers, _at_fork, _pipelines_built
    global _inherited_pipeline
    _inherited_consumers = _at_fork
    _at_fork = weakref.WeakSet()
    _seen_consumers = weakref.WeakSet()
    _own_providers.clear()
    _inherited_pipeline = _inherited_pipeline or _pipelines_built > 0
    _pipelines_built = 0


_fork_hooks.register(
    "inherited meters",
    before=_snapshot_before_fork,
    after_in_parent=_forget_snapshot_in_parent,
    after_in_child=_become_child,
)
