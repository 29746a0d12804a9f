"""Meters of a finished setup: recording on them after `handle.shutdown()` warns once.

A provider that was shut down exports nothing more, so what is recorded on its meters is
lost. `mark_finished` (called by the shutdown) notes the provider and empties the emitter
caches of its meters, so the next record of each key on one takes `record_metrics`'s
slow path, where `cache.finished` makes it warn once per group and skip the value. The
per-step path gains no check: a meter that was never finished costs nothing more.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

from nemo.lens import _otel_internals
from nemo.lens.instruments import _registry

#: How long `mark_finished` waits for the registry lock: a shutdown from a signal handler
#: may have interrupted the very thread that holds it; it then marks without the lock.
LOCK_WAIT_S: Final = 0.1

# The measurement consumers of the meter providers that were shut down.
_finished_consumers: weakref.WeakSet[Any] = weakref.WeakSet()


def is_finished_meter(meter: object) -> bool:
    """True when `meter` belongs to a provider `mark_finished` was given."""
    if not _finished_consumers:  # every process before its first shutdown
        return False
    consumer = _otel_internals.meter_consumer(meter)
    return consumer is not None and consumer in _finished_consumers


def mark_finished(meter_provider: object) -> None:
    """`meter_provider` is being shut down: recording on its meters warns from now on."""
    consumer = _otel_internals.provider_consumer(meter_provider)
    if consumer is None:
        return
    _finished_consumers.add(consumer)
    locked = _registry.lock.acquire(timeout=LOCK_WAIT_S)
    try:
        for state in list(_registry.GROUPS.values()):
            for cache in list(state.meters.values()):
                meter = cache.ref()
                if meter is not None and _otel_internals.meter_consumer(meter) is consumer:
                    cache.finished = True
                    cache.emitters = {}
                    cache.bounded = {}
                    cache.kept = {}
    finally:
        if locked:
            _registry.lock.release()
