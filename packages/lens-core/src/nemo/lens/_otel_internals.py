"""Every use lens makes of OpenTelemetry's private names, in one module.

lens needs a few of them: the metrics proxy types (to skip a proxy with nothing behind it
on the recording path), the reader's collection callback (to gate collections across
`fork()`), the API's set-once globals (so `nemo.lens.testing` can forget a provider), an
ended span's own containers (so export reads them without the copies the public
properties make), and an instrument's per-series aggregations (so a coalesced series'
interval is handed over in one step, not value by value).
A release may rename any of these without notice, so `missing_internals()` lists the
module-level ones this install lacks, and `test_coalesced_histograms.py` finds the
aggregations; both run in every cell of the OpenTelemetry matrix.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import operator
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import trace as _trace_api
from opentelemetry.metrics import _internal as _metrics_api

#: (module, attribute) for every private module-level name lens reads or writes.
MODULE_INTERNALS: Final = (
    ("opentelemetry.metrics._internal", "_ProxyMeter"),
    ("opentelemetry.metrics._internal", "_ProxyMeterProvider"),
    ("opentelemetry.metrics._internal", "_METER_PROVIDER"),
    ("opentelemetry.metrics._internal", "_METER_PROVIDER_SET_ONCE"),
    ("opentelemetry.metrics._internal", "_PROXY_METER_PROVIDER"),
    ("opentelemetry.trace", "_TRACER_PROVIDER"),
    ("opentelemetry.trace", "_TRACER_PROVIDER_SET_ONCE"),
    ("opentelemetry._logs._internal", "_LOGGER_PROVIDER"),
    ("opentelemetry._logs._internal", "_LOGGER_PROVIDER_SET_ONCE"),
    ("opentelemetry.util._once", "Once"),
)
#: Private instance attributes: a proxy meter's target, a metric reader's collect callback,
#: and the measurement consumer an SDK meter shares with the provider that made it.
PROXY_METER_TARGET: Final = "_real_meter"
READER_COLLECT_CALLBACK: Final = "_collect"
MEASUREMENT_CONSUMER: Final = "_measurement_consumer"
#: A metric reader's temporality and (opentelemetry-sdk 1.45.2 and newer) cardinality limit
#: per SDK instrument class, read by the `MeterProvider` when it is built.
READER_TEMPORALITY: Final = "_instrument_class_temporality"
READER_CARDINALITY_LIMITS: Final = "_instrument_class_cardinality_limit"
#: The containers an SDK `ReadableSpan` holds its attributes, events and links in; its
#: public properties copy them on every read (a mapping proxy and two tuples, the events'
#: and links' under a lock), which export, reading every span twice, need not pay.
SPAN_CONTAINERS: Final = ("_attributes", "_events", "_links")
#: The SDK's synchronous instrument classes (named, so this module never imports the SDK),
#: by the lens kind (`MetricSpec.kind`) each creates.
SDK_INSTRUMENT_CLASS_BY_KIND: Final = {
    "counter": "_Counter",
    "gauge": "_Gauge",
    "histogram": "_Histogram",
    "up_down_counter": "_UpDownCounter",
}

#: The SDK's aggregations of a synchronous instrument's series, by class name and by the
#: lens kind whose values they aggregate: a coalesced series' interval is handed into its
#: state (`SeriesMatch.add_to_sum`, `SeriesMatch.set_last_value`, `add_histogram_interval`),
#: found from the instrument through its consumer's reader storages, a storage's view
#: matches per instrument and a match's aggregations per series (keyed by the SDK's
#: `_hash_attributes` where the release has it, else by `frozenset(attributes.items())`).
AGGREGATION_CLASS_BY_KIND: Final = {
    "counter": "_SumAggregation",
    "up_down_counter": "_SumAggregation",
    "gauge": "_LastValueAggregation",
    "histogram": "_ExplicitBucketHistogramAggregation",
}
#: Where an aggregation holds its interval: a sum's running value or a histogram's bucket
#: counts are `_value` (`_current_value` in older releases, 1.23 among them); a last
#: value is `_value` in every release.
AGGREGATION_STATE: Final = ("_value", "_current_value")
#: The exemplar filter that samples every value: an instrument under it is never handed
#: over into its aggregations (its values must each reach the SDK to be sampled).
ALWAYS_ON_EXEMPLAR_FILTER: Final = "AlwaysOnExemplarFilter"

ProxyMeter: Final[type] = _metrics_api._ProxyMeter
ProxyMeterProvider: Final[type] = _metrics_api._ProxyMeterProvider

#: The meter a global proxy meter forwards to (None until an SDK provider is set).
real_meter_of: Final = operator.attrgetter(PROXY_METER_TARGET)


def missing_internals() -> list[str]:
    """The private names this OpenTelemetry install lacks, as `module.attribute`."""
    missing: list[str] = []
    for module_name, attribute in MODULE_INTERNALS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            missing.append(f"{module_name} (module)")
            continue
        if not hasattr(module, attribute):
            missing.append(f"{module_name}.{attribute}")
    if not hasattr(ProxyMeter("nemo.lens.internals-check"), PROXY_METER_TARGET):
        missing.append(f"opentelemetry.metrics._internal._ProxyMeter().{PROXY_METER_TARGET}")
    return missing


def collect_callback(reader: object) -> Callable[..., Any] | None:
    """The collection callback a `MeterProvider` gave `reader`, or None."""
    callback = getattr(reader, READER_COLLECT_CALLBACK, None)
    return callback if callable(callback) else None


def replace_collect_callback(reader: object, callback: Callable[..., Any]) -> None:
    """Make `reader` collect through `callback` from now on."""
    setattr(reader, READER_COLLECT_CALLBACK, callback)


def delta_kinds(reader: object) -> frozenset[str]:
    """The lens kinds whose instruments `reader` collects with delta temporality (empty
    where the reader does not say)."""
    temporality = getattr(reader, READER_TEMPORALITY, None)
    if not isinstance(temporality, dict):
        return frozenset()
    by_class_name = {getattr(cls, "__name__", None): value for cls, value in temporality.items()}
    return frozenset(
        kind
        for kind, class_name in SDK_INSTRUMENT_CLASS_BY_KIND.items()
        if getattr(by_class_name.get(class_name), "name", None) == "DELTA"
    )


def lift_sdk_cardinality_limits(reader: object, unlimited: int) -> bool:
    """Raise every cardinality limit `reader` gives its instruments to `unlimited`, before
    a `MeterProvider` reads them. False on a release without such limits (before 1.45.2)."""
    limits = getattr(reader, READER_CARDINALITY_LIMITS, None)
    if not isinstance(limits, dict):
        return False
    for instrument_class in limits:
        limits[instrument_class] = unlimited
    return True


def span_containers(span: Any, sdk_span_type: type) -> tuple[Any, Any, Any]:
    """An ended span's attributes (None or a mapping), events and links, as the span holds
    them: read-only, no copy.

    Only for a span of exactly `sdk_span_type` (the SDK's `ReadableSpan`, what its spans
    end as), whose properties copy those containers; any other span (a subclass may
    compute its properties), and a release that keeps them elsewhere, gets the public
    properties' values.
    """
    if type(span) is sdk_span_type:
        try:
            held: tuple[Any, Any, Any] = _held_span_containers(span)
            return held
        except AttributeError:
            pass
    return span.attributes, span.events, span.links


_held_span_containers: Final = operator.attrgetter(*SPAN_CONTAINERS)


def meter_consumer(meter: object) -> Any:
    """The measurement consumer of an SDK meter (shared with its provider), or None."""
    return getattr(meter, MEASUREMENT_CONSUMER, None)


def provider_consumer(provider: object) -> Any:
    """The measurement consumer of an SDK meter provider, or None (also for None)."""
    return getattr(provider, MEASUREMENT_CONSUMER, None)


def global_meter_provider() -> object | None:
    """The meter provider set globally, or None while only the API's proxy is there."""
    return _metrics_api._METER_PROVIDER


def provider_is_shut_down(provider: object) -> bool:
    """True for an SDK provider that has already shut down (the SDK warns on a second one)."""
    return getattr(provider, "_shutdown", False) is True


def installed_global_providers() -> list[tuple[object, str]]:
    """The tracer, meter and logger providers set globally (None where none was set)."""
    # Not imported for this: setting a logger provider imports the logs API, so where it
    # was never imported none is set (and importing it would cost a setup ~1.5 ms).
    logs_api = sys.modules.get("opentelemetry._logs._internal")
    return [
        (_trace_api._TRACER_PROVIDER, "tracer provider"),
        (_metrics_api._METER_PROVIDER, "meter provider"),
        (None if logs_api is None else logs_api._LOGGER_PROVIDER, "logger provider"),
    ]


def forget_global_tracer_provider() -> None:
    """Forget the global tracer provider, so the next `set_tracer_provider` takes effect."""
    from opentelemetry.util._once import Once

    _trace_api._TRACER_PROVIDER = None
    _trace_api._TRACER_PROVIDER_SET_ONCE = Once()


def forget_global_meter_provider() -> None:
    """Forget the global meter provider and the proxy that forwards to it for good."""
    from opentelemetry.util._once import Once

    _metrics_api._METER_PROVIDER = None
    _metrics_api._METER_PROVIDER_SET_ONCE = Once()
    _metrics_api._PROXY_METER_PROVIDER = _metrics_api._ProxyMeterProvider()


def forget_global_logger_provider() -> None:
    """Forget the global logger provider."""
    from opentelemetry._logs import _internal as logs_api
    from opentelemetry.util._once import Once

    logs_api._LOGGER_PROVIDER = None
    logs_api._LOGGER_PROVIDER_SET_ONCE = Once()


class SeriesMatch:
    """Where an SDK instrument keeps its series' aggregations: found by `series_match`.

    The SDK keeps them in one mapping per instrument, from its key of a series'
    attributes to the series' aggregation, which it never changes once set; a release
    that forgets delta series replaces the whole mapping at each collection instead. So
    an aggregation found in the mapping `aggregations()` returns stays the series' own
    for as long as that mapping is the current one.
    """

    __slots__ = (
        "_key",
        "_match",
        "add_to_sum",
        "boundaries",
        "lock",
        "replace_sum",
        "set_last_value",
    )

    def __init__(self, match: Any, aggregation: Any) -> None:
        self._match = match
        module = sys.modules.get(type(match).__module__)
        self._key: Callable[[dict[str, Any]], Any] = getattr(
            module, "_hash_attributes", _frozen_items
        )
        state = next(name for name in AGGREGATION_STATE if hasattr(aggregation, name))
        #: What a sum's or a last value's `aggregate` does with a value: added to the
        #: interval's sum (from 0), or made the value.
        self.add_to_sum: Callable[[Any, float], None] = (
            _add_to_value if state == "_value" else _add_to_current_value
        )
        #: A sum's interval whose first value the SDK got at once (`sent`, what its
        #: aggregation then holds): its state becomes the whole interval's sum `total`,
        #: added in the same order; where another value reached it meanwhile, the rest of
        #: `total` is added to it.
        self.replace_sum: Callable[[Any, float, float], None] = functools.partial(
            _replace_sum, state
        )
        self.set_last_value: Callable[[Any, float], None] = _set_value
        #: The lock the SDK's recording and collection hold where a delta collection
        #: discards the instrument's aggregations (opentelemetry-sdk 1.45.2 and newer):
        #: a hand-over then looks up and writes under it. None elsewhere.
        self.lock: Any = match._lock if getattr(match, "_reset_on_collect", False) else None
        #: A histogram's bucket boundaries; None for a sum or a last value.
        bounds = getattr(aggregation, "_boundaries", None)
        self.boundaries: tuple[float, ...] | None = None if bounds is None else tuple(bounds)

    def aggregations(self) -> Mapping[Any, Any]:
        """The SDK's current mapping of this instrument's series to their aggregations."""
        mapping: Mapping[Any, Any] = self._match._attributes_aggregation
        return mapping

    def find(self, aggregations: Mapping[Any, Any], attributes: Mapping[str, Any] | None) -> Any:
        """The aggregation of the series `attributes` record on, in `aggregations` (what
        `aggregations()` returned), or None while the SDK holds none for it."""
        return aggregations.get(self._key(dict(attributes) if attributes else {}))


def _frozen_items(attributes: dict[str, Any]) -> frozenset[Any]:
    return frozenset(attributes.items())


def series_match(instrument: object, kind: str) -> SeriesMatch | None:
    """Where `instrument` (of lens kind `kind`) aggregates its series, when lens can hand
    intervals into their state: its provider has one reader, whose storage has one view
    match for it, filtering no attribute, whose aggregation (of a series it holds
    already) is the SDK's default one for `kind`, and values are not all exemplar
    candidates. None otherwise (ask again later)."""
    try:
        consumer = getattr(instrument, MEASUREMENT_CONSUMER)
        config = getattr(consumer, "_sdk_config", None)
        exemplar_filter = getattr(config, "exemplar_filter", None)
        if type(exemplar_filter).__name__ == ALWAYS_ON_EXEMPLAR_FILTER:
            return None
        storages = list(consumer._reader_storages.values())
        if len(storages) != 1:
            return None
        matches = storages[0]._instrument_view_instrument_matches.get(instrument)
        if not matches or len(matches) != 1:
            return None
        match = matches[0]
        if match._view._attribute_keys is not None:
            return None
        aggregation: Any = next(iter(list(match._attributes_aggregation.values())), None)
        if type(aggregation).__name__ != AGGREGATION_CLASS_BY_KIND.get(kind):
            return None
        if not any(hasattr(aggregation, name) for name in AGGREGATION_STATE):
            return None
        return SeriesMatch(match, aggregation)
    except (AttributeError, TypeError, RuntimeError):
        return None


# Once per series and collection: each write below takes the aggregation's lock by
# acquire/release, which costs ~80 ns less per hold than `with` (a series' hand-over
# costs ~400 ns).


def _add_to_value(aggregation: Any, value: float) -> None:
    lock = aggregation._lock
    lock.acquire()
    try:
        held = aggregation._value
        aggregation._value = (0 if held is None else held) + value
    finally:
        lock.release()


def _add_to_current_value(aggregation: Any, value: float) -> None:
    lock = aggregation._lock
    lock.acquire()
    try:
        held = aggregation._current_value
        aggregation._current_value = (0 if held is None else held) + value
    finally:
        lock.release()


def _replace_sum(state: str, aggregation: Any, sent: float, total: float) -> None:
    # Once per new series and interval, not per value: the state is named, not hard-coded.
    lock = aggregation._lock
    lock.acquire()
    try:
        held = getattr(aggregation, state)
        if type(held) is type(sent) and held == sent:
            setattr(aggregation, state, total)
        else:  # another value reached it meanwhile: add the rest
            setattr(aggregation, state, (0 if held is None else held) + (total - sent))
    finally:
        lock.release()


def _set_value(aggregation: Any, value: float) -> None:
    lock = aggregation._lock
    lock.acquire()
    try:
        aggregation._value = value
    finally:
        lock.release()


def add_histogram_interval(
    aggregation: Any,
    counts: list[int],
    total: float,
    low: float,
    high: float,
    *,
    recorded: float | None,
) -> None:
    """Add an interval's values, as bucket counts, sum, min and max, to `aggregation`.

    Where the aggregation's interval is empty, or holds exactly the one value the caller
    just recorded into it (`recorded`, which `counts` and `total` include), it takes them
    as they are: the state recording each value would have left, the sum added in the same
    order. Otherwise they are added to what it holds (less `recorded`).
    """
    name = next(state for state in AGGREGATION_STATE if hasattr(aggregation, state))
    lock = aggregation._lock
    lock.acquire()
    try:
        held = getattr(aggregation, name)
        if held is None or (recorded is not None and sum(held) == 1):
            setattr(aggregation, name, counts)
            aggregation._sum = total
            if aggregation._record_min_max:
                aggregation._min = low
                aggregation._max = high
            return
        if recorded is not None:  # another value reached it meanwhile: add the rest
            counts[bisect.bisect_left(aggregation._boundaries, recorded)] -= 1
            total -= recorded
        for index, count in enumerate(counts):
            if count:
                held[index] += count
        aggregation._sum += total
        if aggregation._record_min_max:
            aggregation._min = min(aggregation._min, low)
            aggregation._max = max(aggregation._max, high)
    finally:
        lock.release()
