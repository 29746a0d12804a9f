"""Coalesced recording for the meter provider of a lens pipeline (see
`nemo.lens.instruments._coalesce`): its buffer, registered for the provider and flushed
before each of its readers collects.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from opentelemetry.sdk.metrics import Counter, Meter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricReader,
)
from opentelemetry.sdk.resources import Resource

from nemo.lens import _otel_internals
from nemo.lens._process import BuiltHere
from nemo.lens._sdk import _fork
from nemo.lens.instruments import _cardinality, _coalesce, _series


def coalesce_recording(
    meter_provider: MeterProvider, readers: Sequence[MetricReader], built: BuiltHere
) -> _coalesce.CoalescingBuffer | None:
    """Gate `readers` (see `_fork.gate_metric_reader`), start a cardinality cycle at each
    collection, and make `record_metrics` on
    `meter_provider`'s meters coalesce into a buffer that each collection flushes first:
    gauges always, counters and up-down counters with a single reader (lens's pipeline
    builds one; see `CoalescingBuffer`).

    Also makes lens key series as the installed SDK does (`_series.follow_sdk`), in the
    buffer and in the cardinality limit, on every meter: setup runs this before it sets
    a limit.

    Returns the buffer, or None where values stay direct: a reader could not be gated (it
    would collect without the flush), or how the SDK keys series could not be told.
    """
    keyed_by_type = sdk_keys_by_type()
    if keyed_by_type is not None:
        _series.follow_sdk(keyed_by_type)
    consumer = _otel_internals.provider_consumer(meter_provider)
    if keyed_by_type is None or consumer is None:
        for reader in readers:
            _fork.gate_metric_reader(reader, built, _cardinality.start_cycle)
        return None
    buffer = _coalesce.CoalescingBuffer(single_reader=len(readers) == 1)

    def before_collect() -> None:
        # The values buffered so far belong to this collection, and so do their sets.
        buffer.flush()
        _cardinality.start_cycle()

    gated = [_fork.gate_metric_reader(reader, built, before_collect) for reader in readers]
    if not all(gated):
        return None
    _coalesce.register(consumer, buffer, Meter)
    return buffer


@functools.cache
def sdk_forgets_delta_series() -> bool:
    """True when the installed SDK drops a delta instrument's series at each collection
    (opentelemetry-sdk 1.45.2 and newer), so a cardinality limit may count per cycle.

    Older releases keep every series they ever saw, delta or not: counting per cycle there
    would let memory grow by `limit` sets a collection. Asked once, of a throwaway provider
    whose reader keeps one set per cycle, through the public API only (a release without
    per-reader limits answers False).
    """
    try:
        reader = InMemoryMetricReader(
            preferred_temporality={Counter: AggregationTemporality.DELTA},
            cardinality_limits={Counter: 1},  # type: ignore[call-arg]  # 1.45.2 and newer
        )
    except TypeError:
        return False
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.get_empty(), shutdown_on_exit=False
    )
    try:
        counter = provider.get_meter("nemo.lens.delta-series-probe").create_counter("probe")
        counter.add(1, {"probe": 1})
        reader.get_metrics_data()
        counter.add(1, {"probe": 2})
        data = reader.get_metrics_data()
        if data is None:
            return False
        points = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
        return [dict(point.attributes or {}) for point in points] == [{"probe": 2}]
    except Exception:  # an SDK that answers otherwise: count over the process's life
        return False
    finally:
        provider.shutdown()


@functools.cache
def sdk_keys_by_type() -> bool | None:
    """True when the installed SDK keeps `{"k": 1}` and `{"k": True}` as two series.

    Releases differ (older ones key series by `frozenset(attributes.items())`, in which
    1 == True == 1.0); asked once, of a throwaway provider, through the public API only.
    None if the probe itself failed.
    """
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.get_empty(), shutdown_on_exit=False
    )
    try:
        counter = provider.get_meter("nemo.lens.series-key-probe").create_counter("probe")
        counter.add(1, {"probe": 1})
        counter.add(1, {"probe": True})
        data = reader.get_metrics_data()
        if data is None:
            return None
        points = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
        return len(points) == 2
    except Exception:  # an SDK that answers otherwise (disabled): keep values direct
        return None
    finally:
        provider.shutdown()
